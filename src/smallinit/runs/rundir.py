"""Reading a run directory: the one place that knows its files.

A run directory (written by :class:`smallinit.train.loop.Trainer`, or by the anchor task) holds::

    config.yaml     the resolved config          read_config(rd)
    metrics.jsonl   one record per logged step   read_metrics(rd)
    probes.jsonl    one record per probed step   read_probes(rd)
    heatmaps/       row-cosine matrices          read_heatmaps(rd)
    summary.json    written when the run ends    read_json(rd / "summary.json")
    failed.json     written by a job runner when the run exited with an error
    tb/, wandb/     experiment trackers' files (train.logger); wandb.json keeps the W&B run id

:func:`run_state` says what a directory is (done / failed / partial / new), :func:`collect_run` the numbers
every table wants, :func:`load_run` everything the plots want. Comparisons of configs (labels of overlaid
runs, "differs from the baseline", "is this run directory the one a sweep wants") ignore the keys of
:data:`IGNORED_IN_COMPARISON` — the one list of them.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from smallinit.core.errors import RunDirError
from smallinit.core.io import read_jsonl

PROBES_FILE = "probes.jsonl"
HEATMAP_DIR = "heatmaps"

IGNORED_IN_COMPARISON: tuple[str, ...] = (
    "train.progress",
    "train.threads",
    "train.device",
    "train.tensorboard",
    "train.keep_ckpts",
    "train.compile",
    "train.logger",
    "train.wandb_project",
    "train.wandb_run_name",
    "train.wandb_entity",
)
"""Config keys that only concern how a run is executed, never what it learns or records: ignored whenever two
run configs are compared."""

DATA_DECIDED: tuple[str, ...] = ("model.vocab_size", "model.max_seq_len")
"""Keys a run sets by itself from its data (the tokenizer's vocabulary, the window length): a wanted config
written before the run compares equal to the run's saved config whatever they hold (:func:`config_mismatch`)."""


def read_json(path: str | os.PathLike, strict: bool = False) -> dict[str, Any] | None:
    """The JSON object in ``path``; None when the file is missing (or, unless ``strict``, unreadable)."""
    p = Path(path)
    try:
        return json.loads(p.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        if strict:
            raise RunDirError(f"{p}: invalid JSON") from None
        return None


def read_config(run_dir: str | os.PathLike) -> dict[str, Any]:
    """The run's ``config.yaml`` as nested plain data; RunDirError when it is missing or not YAML."""
    import yaml

    p = Path(run_dir) / "config.yaml"
    if not p.is_file():
        raise RunDirError(f"{Path(run_dir)}: not a run directory (no config.yaml)")
    try:
        return yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as e:
        raise RunDirError(f"{p}: not valid YAML ({str(e).splitlines()[0]})") from None
    except UnicodeDecodeError:
        raise RunDirError(f"{p}: not UTF-8 text") from None


ORIGIN = "origin.json"
"""A run's launch record: ``{"cwd": the folder `train` ran in}``, so that a relative ``data.path`` still resolves
when the run is resumed, probed or compared from another folder."""


def run_data_path(run_dir: str | os.PathLike, config: dict[str, Any] | None = None) -> Path:
    """The prepared data folder of a run: its ``data.path`` as written when that resolves from here (absolute, or
    relative to the current folder); else relative to the folder the run was started in (:data:`ORIGIN`); else as
    written (the caller reports it missing)."""
    config = config if config is not None else read_config(run_dir)
    path = Path(str((config.get("data") or {}).get("path", "")))
    if path.is_absolute() or (path / "meta.json").is_file():
        return path
    cwd = (read_json(Path(run_dir) / ORIGIN) or {}).get("cwd")
    if cwd and (Path(cwd) / path / "meta.json").is_file():
        return Path(cwd) / path
    return path


def trained_vocab(run_dir: str | os.PathLike) -> int | None:
    """The vocabulary the run's weights were trained with: ``model.vocab_size`` in the config copy of its newest
    checkpoint (set by the data when the run started; the run's own config.yaml may be a wanted config written
    before that, as for a crossover's cooldown branch). None when there is no checkpoint."""
    import hashlib

    import yaml

    for ck in sorted((Path(run_dir) / "checkpoints").glob("step_*"), reverse=True):
        try:  # only a copy that matches its manifest (a damaged checkpoint is skipped, as resume skips it)
            want = json.loads((ck / "manifest.json").read_text())["files"]["config.yaml"]["sha256"]
            raw = (ck / "config.yaml").read_bytes()
            if hashlib.sha256(raw).hexdigest() != want:
                continue
            v = ((yaml.safe_load(raw.decode("utf-8")) or {}).get("model") or {}).get("vocab_size")
        except (OSError, ValueError, KeyError, TypeError, yaml.YAMLError, UnicodeDecodeError, AttributeError):
            continue
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    return None


def data_mismatch(run_dir: str | os.PathLike, data: Any, scan: bool = True) -> str | None:
    """Why the prepared data ``data`` (a :class:`smallinit.data.TokenData`) is not the data the run in ``run_dir``
    trained on, or None: another vocabulary size than the run's weights (:func:`trained_vocab`), another tokenizer
    than the run's own copy (``RUN/tokenizer.json``, written at the start; compared in the tokenizers library's
    canonical form), or (``scan``) a token id at or above the vocabulary in either split. ``train --resume``
    refuses such data and ``doctor`` reports it: the data folder was written into, or prepared again
    (``--force``) under another tokenizer, after the run started."""
    rd, n = Path(run_dir), data.vocab_size
    vocab_size = trained_vocab(rd)
    fix = (
        "point data.path at the data the run was trained on (or prepare it again exactly as its meta.json "
        "command says), or train a new run on this data"
    )
    if isinstance(vocab_size, int) and not isinstance(vocab_size, bool) and vocab_size != n:
        return (
            f"{data.path}: holds a vocabulary of {n} tokens (meta.json), but run {rd} was trained with "
            f"{vocab_size}: the data was prepared again with another tokenizer; {fix}"
        )
    mine, theirs = rd / "tokenizer.json", data.path / data.meta["files"]["tokenizer"]
    if mine.is_file() and theirs.is_file() and mine.read_bytes() != theirs.read_bytes():
        from tokenizers import Tokenizer

        def canonical(p: Path) -> str | None:
            try:
                return Tokenizer.from_file(str(p)).to_str()
            except Exception:  # the library raises plain Exception subclasses
                return None

        a, b = canonical(mine), canonical(theirs)
        if a is None or a != b:
            return (
                f"{theirs}: is not the tokenizer run {rd} was trained with ({mine} differs): the data was "
                f"prepared again with another tokenizer; {fix}"
            )
    if scan:
        for name in ("train", "val"):
            top = data.max_token(name)
            if top >= n:
                return (
                    f"{data.path}: {name}.bin holds token id {top}, but the vocabulary (meta.json vocab_size) "
                    f"is {n}: the data was damaged or written into after the run started; {fix}"
                )
    return None


def _by_step(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    d = {}
    for r in records:
        if isinstance(r, dict) and isinstance(r.get("step"), int):
            d[r["step"]] = r
    return [d[k] for k in sorted(d)]


def read_metrics(run_dir: str | os.PathLike, by_step: bool = False) -> list[dict[str, Any]]:
    """The records of ``metrics.jsonl`` (file order; ``by_step``: sorted by step, the last record of a repeated
    step kept, as after a resume)."""
    recs = read_jsonl(Path(run_dir) / "metrics.jsonl")
    return _by_step(recs) if by_step else recs


def read_heatmaps(run_dir: str | Path) -> dict[int, dict[str, dict[str, np.ndarray]]]:
    """{step: {matrix name: {"cos", "rows", "order"}}} for every heatmap file of a run."""
    out: dict[int, dict[str, dict[str, np.ndarray]]] = {}
    d = Path(run_dir) / HEATMAP_DIR
    if not d.is_dir():
        return out
    for f in sorted(d.glob("step_*.npz")):
        try:
            step = int(f.stem[5:])
            with np.load(f) as z:
                per: dict[str, dict[str, np.ndarray]] = {}
                for key in z.files:
                    name, _, field = key.rpartition("/")
                    per.setdefault(name, {})[field] = z[key]
        except (ValueError, OSError):
            continue  # a foreign or damaged file: skipped
        out[step] = per
    return out


def read_probes(run_dir: str | os.PathLike, by_step: bool = False) -> list[dict[str, Any]]:
    """The records of ``probes.jsonl`` (see :func:`read_metrics` for ``by_step``)."""
    recs = read_jsonl(Path(run_dir) / PROBES_FILE)
    return _by_step(recs) if by_step else recs


def run_state(run_dir: str | os.PathLike) -> str:
    """ "done" (summary.json says completed), "failed" (failed.json), "partial" (config.yaml, no summary:
    interrupted, resumable) or "new"."""
    rd = Path(run_dir)
    s = read_json(rd / "summary.json")
    if s and s.get("completed"):
        return "done"
    if (rd / "failed.json").exists():
        return "failed"
    if (rd / "config.yaml").exists():
        return "partial"
    return "new"


def last_step(run_dir: str | os.PathLike) -> int:
    """The last step logged in ``metrics.jsonl`` (cheap: reads only the file's tail)."""
    p = Path(run_dir) / "metrics.jsonl"
    try:
        with open(p, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - 4096))
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return 0
    for line in reversed(lines):
        try:
            return int(json.loads(line)["step"])
        except (ValueError, KeyError, TypeError):
            continue
    return 0


def last_val_loss(run_dir: str | os.PathLike) -> tuple[float | None, int | None]:
    """(the last ``val_loss`` in metrics.jsonl, its step), or (None, None)."""
    loss = step = None
    for rec in read_metrics(run_dir):
        if rec.get("val_loss") is not None:
            loss, step = float(rec["val_loss"]), rec.get("step")
    return loss, step


# ---- configs -------------------------------------------------------------------------------------------


def ignored(key: str) -> bool:
    """Whether a dotted config key is in :data:`IGNORED_IN_COMPARISON`."""
    return key in IGNORED_IN_COMPARISON


def config_get(config: dict[str, Any], key: str, default: Any = None) -> Any:
    """The value at a dotted ``key`` of a nested config dict (``default`` when absent)."""
    node: Any = config
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def compared_diff(a: dict[str, Any], b: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Dotted keys whose values differ between two nested configs, without the ignored keys."""
    from smallinit.config import config_diff

    return {k: v for k, v in config_diff(a, b).items() if not ignored(k)}


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _with_defaults(cfg: dict[str, Any]) -> dict[str, Any]:
    """``cfg`` with every field the code knows filled in (unchanged when it is not a valid config)."""
    from smallinit.config import config_from_dict

    try:
        return config_from_dict(cfg).to_dict()
    except Exception:  # noqa: BLE001 - a broken config is reported by the comparison itself
        return cfg


def config_mismatch(existing: dict[str, Any], wanted: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Dotted keys whose values differ between a run's saved config and the wanted one (ignored keys and the
    data-decided ones skipped). Both go through the config dataclasses first, so a field added to the code
    since the run was written compares at its default instead of as missing. A wanted ``train.dtype`` of "auto"
    matches the concrete dtype the run decided on (:mod:`smallinit.train.precision`)."""
    a, b = _flat(_with_defaults(existing)), _flat(_with_defaults(wanted))
    out = {}
    for k in sorted(set(a) | set(b)):
        if ignored(k) or k in DATA_DECIDED:
            continue
        va, vb = a.get(k), b.get(k)
        if k == "train.dtype" and "auto" in (va, vb):
            continue
        if isinstance(va, (list, tuple)) and isinstance(vb, (list, tuple)):
            va, vb = list(va), list(vb)
        if (
            k == "data.path"
            and va != vb
            and isinstance(va, str)
            and isinstance(vb, str)
            and va
            and vb
            and os.path.realpath(va) == os.path.realpath(vb)
        ):
            continue  # one folder written two ways (relative here vs absolute): the same data
        if va != vb:
            out[k] = (va, vb)
    return out


# ---- summaries -----------------------------------------------------------------------------------------


def summarize_probe_record(rec: dict[str, Any]) -> dict[str, float | None]:
    """Key numbers of one probes.jsonl record: ``sink`` (mean over layers of the first-token attention
    share), ``sink_max``, ``uniform_sink``, ``saturation_min`` (lowest RMSNorm saturation over all norms),
    ``srank_mean`` / ``cond_mean`` (mean stable rank / condensation index over block matrices),
    ``max_act`` (largest residual activation)."""
    layers = rec.get("layers") or []

    def vals(xs):
        return [x for x in xs if isinstance(x, (int, float)) and math.isfinite(x)]

    sinks = vals([l.get("sink") for l in layers])
    sats = vals(
        [(l.get(n) or {}).get("saturation") for l in layers for n in ("attn_norm", "mlp_norm")]
        + [(rec.get("final_norm") or {}).get("saturation")]
    )
    mats = {k: v for k, v in (rec.get("matrices") or {}).items() if k.startswith("blocks.")}
    sr = vals([m.get("srank") for m in mats.values()])
    co = vals([m.get("cond") for m in mats.values()])
    acts = vals([l.get("max_act") for l in layers])

    def mean(xs):
        return sum(xs) / len(xs) if xs else None

    return {
        "sink": mean(sinks),
        "sink_max": max(sinks) if sinks else None,
        "uniform_sink": rec.get("uniform_sink"),
        "saturation_min": min(sats) if sats else None,
        "srank_mean": mean(sr),
        "cond_mean": mean(co),
        "max_act": max(acts) if acts else None,
    }


def collect_run(run_dir: str | os.PathLike) -> dict[str, Any]:
    """What a finished (or partial) run directory says: state, final/best losses, tokens, parameters,
    wall time, and the last probe record summarized (``probe_*`` keys)."""
    rd = Path(run_dir)
    out: dict[str, Any] = {"state": run_state(rd)}
    s = read_json(rd / "summary.json") or {}
    metrics = read_metrics(rd)
    vals = [m for m in metrics if m.get("val_loss") is not None]
    tunes = [m for m in metrics if m.get("tune_loss") is not None]
    out["final_val_loss"] = s.get("final_val_loss", vals[-1]["val_loss"] if vals else None)
    out["final_tune_loss"] = tunes[-1]["tune_loss"] if tunes else None
    out["step"] = s.get("step", metrics[-1]["step"] if metrics else 0)
    out["tokens"] = s.get("tokens", metrics[-1].get("tokens") if metrics else 0)
    out["wall_time"] = s.get("wall_time", metrics[-1].get("wall_time") if metrics else None)
    out["params"] = s.get("params")
    out["non_embedding_params"] = s.get("non_embedding_params")
    tps = [m["tokens_per_s"] for m in metrics if m.get("tokens_per_s")]
    out["tokens_per_s"] = sorted(tps)[len(tps) // 2] if tps else None
    probes = read_probes(rd)
    if probes:
        out.update({f"probe_{k}": v for k, v in summarize_probe_record(probes[-1]).items()})
    failed = read_json(rd / "failed.json")
    if failed:
        out["error"] = failed.get("error")
    return out


@dataclass(eq=False)
class RunData:
    """Everything the plots read from one run directory."""

    path: Path
    config: dict[str, Any]
    metrics: list[dict[str, Any]]
    probes: list[dict[str, Any]]
    heatmaps: dict[int, dict[str, dict[str, Any]]] = field(default_factory=dict)
    label: str = ""

    @property
    def name(self) -> str:
        return self.path.name or str(self.path)


def load_run(run_dir: str | os.PathLike) -> RunData:
    """Read ``config.yaml``, ``metrics.jsonl``, ``probes.jsonl`` and ``heatmaps/`` of a run directory
    (records sorted by step, the last record of a repeated step kept)."""
    p = Path(run_dir)
    return RunData(p, read_config(p), read_metrics(p, by_step=True), read_probes(p, by_step=True), read_heatmaps(p))


__all__ = [
    "DATA_DECIDED",
    "HEATMAP_DIR",
    "PROBES_FILE",
    "IGNORED_IN_COMPARISON",
    "RunData",
    "collect_run",
    "compared_diff",
    "config_get",
    "data_mismatch",
    "trained_vocab",
    "config_mismatch",
    "ignored",
    "last_step",
    "last_val_loss",
    "load_run",
    "read_config",
    "read_json",
    "read_heatmaps",
    "read_metrics",
    "read_probes",
    "run_state",
    "summarize_probe_record",
]
