import sys

from smallinit.cli import main

sys.exit(main())
