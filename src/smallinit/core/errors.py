"""Exception types. Every error a user can cause is a SmallinitError with a one-line message;
the CLI prints it as ``error: <message>`` and exits with status 2."""


class SmallinitError(Exception):
    """Base class of every error smallinit raises on bad input or a bad state."""


class ConfigError(SmallinitError, ValueError):
    """A configuration value or override is invalid (the message names the field)."""


class DataError(SmallinitError, ValueError):
    """A corpus, prepared data directory or benchmark file is missing or malformed."""


class CheckpointError(SmallinitError):
    """A checkpoint is missing, corrupted (checksum mismatch) or incompatible."""


class RunDirError(SmallinitError):
    """A run directory is locked by another process, or is not a run directory."""


class DivergenceError(SmallinitError):
    """Training produced a non-finite loss or gradient."""


class Interrupted(SmallinitError):
    """SIGINT/SIGTERM stopped training at a step boundary after saving a checkpoint (``signum``, ``step``,
    ``checkpoint``); ``smallinit train`` exits 128 + signum (130 for SIGINT, 143 for SIGTERM)."""

    def __init__(self, message: str, signum: int, step: int, checkpoint: str | None):
        super().__init__(message)
        self.signum, self.step, self.checkpoint = signum, step, checkpoint
