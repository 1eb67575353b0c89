"""The run directory from the trainer's side, before the first step: the lock that keeps a second process off the
run (:class:`RunLock`), the folder itself under the output-folder policy (:func:`prepare_run_dir`) and the files
written at the start (:func:`write_run_files`: ``config.yaml``, ``origin.json``, ``tokenizer.json``). Reading a run
directory is :mod:`smallinit.runs.rundir`."""

from __future__ import annotations

import fcntl
import os
import sys
from pathlib import Path

from smallinit.config import save_config
from smallinit.core.errors import ConfigError, RunDirError
from smallinit.core.io import atomic_write_json, atomic_write_text
from smallinit.runs.rundir import ORIGIN
from smallinit.train import distributed as dist_utils


class RunLock:
    """An exclusive, non-blocking ``flock`` on ``RUN_DIR/.lock``: a second process on the same run refuses."""

    def __init__(self, run_dir: Path):
        self.path = run_dir / ".lock"
        self.fd: int | None = None

    def __enter__(self) -> RunLock:
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = os.pread(self.fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(self.fd)
            self.fd = None
            raise RunDirError(
                f"{self.path.parent} is in use by another process (pid {other}); "
                "wait for it or choose another directory"
            ) from None
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, str(os.getpid()).encode(), 0)
        return self

    def __exit__(self, *exc) -> None:
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


def prepare_run_dir(trainer) -> None:
    """Create the run directory on rank 0 (a new run's folder first passes :func:`_check_out_dir`); every rank waits."""
    rd = trainer.run_dir
    if trainer.dist.is_main:
        if not trainer.resume:
            _check_out_dir(trainer)
        rd.mkdir(parents=True, exist_ok=True)
    dist_utils.barrier(trainer.dist)


def _check_out_dir(trainer) -> None:
    """The output-folder policy (:mod:`smallinit.core.outputs`) for a new run: RUN_DIR absent or empty, never
    the data folder (or inside it, or holding it), never a folder that holds something else."""
    from smallinit.core.outputs import check_out_dir

    try:
        check_out_dir(trainer.run_dir, "run", inputs=[trainer.cfg.data.path], verb="train", has_force=False)
    except ConfigError as e:
        raise RunDirError(str(e)) from None


def write_run_files(trainer) -> None:
    """``config.yaml`` (every run), ``origin.json`` (a new run), ``tokenizer.json`` (copied from the data) and the
    dtype decision's line on stderr; rank 0 only."""
    if not trainer.dist.is_main:
        return
    save_config(trainer.cfg, trainer.run_dir / "config.yaml")
    if not trainer.resume:  # where a relative data.path is relative to (rundir.run_data_path); the dtype decision
        atomic_write_json(trainer.run_dir / ORIGIN, {"cwd": os.getcwd(), "dtype": trainer.dtype_decision.to_dict()})
    print(trainer.dtype_decision.line(), file=sys.stderr, flush=True)
    tok = trainer.data_path / "tokenizer.json"
    if tok.is_file():
        atomic_write_text(trainer.run_dir / "tokenizer.json", tok.read_text())
