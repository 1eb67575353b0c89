import signal
import sys

from smallinit.cli import main

rc = main()
if rc in (128 + signal.SIGINT, 128 + signal.SIGTERM):
    # stopped by a signal, after the checkpoint: a second copy of the same Ctrl-C (terminal + a runner forwarding
    # it) must not kill the exiting process — Python restores the default handlers while it finalizes (joining
    # torch's threads can take a second), and a SIGINT then would end it "killed by signal" instead of with the
    # 130 / 143 the clean stop earned. Ignored (process-wide, and kept by finalization), it is dropped.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
sys.exit(rc)
