"""Reading benchmark files: JSON Lines and CSV, with errors that name the file, line and expected format.

Files may be gzip, bzip2, xz or zstd compressed (``test.jsonl.gz``): detected by their first bytes and read
transparently (:mod:`smallinit.core.containers`); the format is named by the suffix without the compression's.

Every loader in ``smallinit.eval`` goes through these helpers so that a user with a wrong or
missing file gets one ``DataError`` line such as ``/data/gsm8k/test.jsonl:17: malformed JSON (Expecting ','
delimiter); expected JSON Lines with fields question, answer``.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from smallinit.core.containers import inner_suffix, open_input
from smallinit.core.errors import DataError


@dataclass
class Row:
    """One record of a benchmark file and where it came from (for error messages)."""

    data: dict[str, Any]
    path: Path
    line: int

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"

    def get(self, key: str, fmt: str) -> Any:
        """``data[key]`` (a dotted key walks nested dicts); DataError naming file:line and format if absent."""
        value: Any = self.data
        for part in key.split("."):
            if not isinstance(value, dict) or part not in value:
                raise DataError(f"{self.where}: missing field '{key}'; expected {fmt}")
            value = value[part]
        return value


def require_file(path: Path, fmt: str) -> Path:
    """``path`` if it is a file, else DataError naming it and the expected format."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: file not found; expected {fmt}")
    return path


def read_jsonl(path: Path, fmt: str, limit: int | None = None) -> list[Row]:
    """The JSON objects of a JSON Lines file (blank lines skipped), each with its 1-based line number;
    only the first ``limit`` when given."""
    path = require_file(path, fmt)
    rows: list[Row] = []
    with open_input(path) as raw, io.TextIOWrapper(raw, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if limit is not None and len(rows) >= limit:
                break
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{path}:{lineno}: malformed JSON ({e.msg}); expected {fmt}") from None
            if not isinstance(obj, dict):
                raise DataError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}; expected {fmt}")
            rows.append(Row(obj, path, lineno))
    if not rows:
        raise DataError(f"{path}: no records; expected {fmt}")
    return rows


def read_csv(path: Path, fmt: str, required: tuple[str, ...] = (), limit: int | None = None) -> list[Row]:
    """The rows of a CSV file with a header line, as dicts (the first ``limit`` when given); line
    numbers count the header as line 1."""
    path = require_file(path, fmt)
    rows: list[Row] = []
    with open_input(path) as raw, io.TextIOWrapper(raw, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        header = reader.fieldnames or []
        missing = [c for c in required if c not in header]
        if missing:
            raise DataError(f"{path}:1: CSV header lacks column(s) {', '.join(missing)}; expected {fmt}")
        try:
            for row in reader:
                if limit is not None and len(rows) >= limit:
                    break
                if None in row or any(v is None for v in row.values()):
                    raise DataError(f"{path}:{reader.line_num}: wrong number of columns; expected {fmt}")
                rows.append(Row(dict(row), path, reader.line_num))
        except csv.Error as e:
            raise DataError(f"{path}:{reader.line_num}: malformed CSV ({e}); expected {fmt}") from None
    if not rows:
        raise DataError(f"{path}: no records; expected {fmt}")
    return rows


def read_records(path: Path, fmt: str) -> list[Row]:
    """JSON Lines (``.jsonl``), a JSON list (``.json``) or CSV (``.csv``), chosen by the file extension (a
    compression suffix skipped: ``.csv.gz`` is CSV)."""
    path = Path(path)
    suffix = inner_suffix(path)
    if suffix == ".csv":
        return read_csv(path, fmt)
    if suffix == ".json":
        require_file(path, fmt)
        try:
            with open_input(path) as raw:
                obj = json.loads(raw.read().decode("utf-8"))
        except json.JSONDecodeError as e:
            raise DataError(f"{path}:{e.lineno}: malformed JSON ({e.msg}); expected {fmt}") from None
        if not isinstance(obj, list) or not all(isinstance(o, dict) for o in obj) or not obj:
            raise DataError(f"{path}: expected a non-empty JSON list of objects; expected {fmt}")
        return [Row(o, path, i + 1) for i, o in enumerate(obj)]
    return read_jsonl(path, fmt)


@dataclass
class TaskResult:
    """What one benchmark returns: headline metrics, optional per-subtask metrics, per-item records."""

    name: str
    metrics: dict[str, float]
    records: list[dict[str, Any]]
    subtasks: dict[str, dict[str, float]] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)

    def to_dict(self, records: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {"metrics": self.metrics, "config": self.config}
        if self.subtasks:
            out["subtasks"] = self.subtasks
        if records:
            out["records"] = self.records
        return out


def accuracy_stderr(p: float, n: int) -> float:
    """Standard error of a mean of n Bernoulli outcomes: sqrt(p (1 - p) / (n - 1)) (0 when n < 2)."""
    return (p * (1.0 - p) / (n - 1)) ** 0.5 if n > 1 else 0.0
