"""Scoring two checkpoints on the same held-out positions: log p(true next token) under A and B, in float32
(``score_models`` → ``TokenScores``). Refuses runs whose tokenizers differ, data tokenized otherwise, and runs that
disagree on BOS unless the convention is chosen."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from smallinit.core.device import resolve_device as _resolve_device

DEFAULT_TOKENS = 65_536


@dataclass
class TokenScores:
    """Per-position scores of two models on the same validation targets.

    ``positions[i]`` is the index in the val token array of the i-th scored target token;
    ``window_starts[i]`` the index of the first token of the window it was scored in (the model saw
    ``val[window_starts[i] : positions[i]]`` as context, after a BOS token when ``bos``).
    ``logp_a``, ``logp_b``: log p of that token under A and B (computed in float32).
    ``sources``: the val source (e.g. language) each target comes from (``"unknown"`` outside the
    spans in ``meta.json``). ``info``: what was scored, for the report.
    """

    logp_a: np.ndarray
    logp_b: np.ndarray
    positions: np.ndarray
    window_starts: np.ndarray
    sources: np.ndarray
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def n_tokens(self) -> int:
        return int(self.logp_a.size)


def _run_dir_of(path: Path) -> Path:
    """The run directory of a run dir or of one of its checkpoint dirs."""
    from smallinit.runs.checkpoint import MANIFEST

    return path.parent.parent if (path / MANIFEST).is_file() else path


def _canonical_tokenizer(path: Path) -> str:
    """The tokenizer at ``path`` serialised by the tokenizers library (formatting-independent)."""
    from tokenizers import Tokenizer

    from smallinit.core.errors import DataError

    try:
        return Tokenizer.from_file(str(path)).to_str()
    except Exception as e:  # the library raises plain Exception subclasses
        raise DataError(f"{path}: unreadable tokenizer ({str(e).splitlines()[0][:200]})") from None


def _run_tokenizer_file(run_dir: Path, label: str) -> Path:
    from smallinit.core.errors import DataError

    p = run_dir / "tokenizer.json"
    if not p.is_file():
        raise DataError(
            f"run {label} ({run_dir}) has no tokenizer.json, "
            "so its tokenization cannot be checked against the other run"
        )
    return p


def _tokenizer_summary(canonical: str) -> str:
    import json

    d = json.loads(canonical)
    model = d.get("model") or {}
    vocab = model.get("vocab")
    n = len(vocab) if isinstance(vocab, (dict, list)) else "?"
    return f"{model.get('type', '?')} with {n} base tokens + {len(d.get('added_tokens') or [])} added"


def _source_of(positions: np.ndarray, spans: list | None) -> np.ndarray:
    """Source name of each val position from ``meta['val_sources']`` spans [start, end, name]."""
    out = np.full(positions.shape, "unknown", dtype=object)
    for start, end, name in spans or []:
        out[(positions >= int(start)) & (positions < int(end))] = str(name)
    return out.astype(str)


def _resolve_runs(
    run_a: str | Path, run_b: str | Path, step_a: int | None, step_b: int | None
) -> dict[str, dict[str, Any]]:
    """{"A": …, "B": …}: each run's path as given, its checkpoint directory and the run directory holding it."""
    from smallinit.runs.checkpoint import resolve_checkpoint

    runs = {}
    for label, path, step in (("A", Path(run_a), step_a), ("B", Path(run_b), step_b)):
        ckpt = resolve_checkpoint(path, step)
        runs[label] = {"path": path, "run_dir": _run_dir_of(ckpt), "ckpt": ckpt}
    return runs


def _same_tokenizer(runs: dict[str, dict[str, Any]]) -> str:
    """The runs' common tokenizer (canonical form); DataError when their tokenizer.json differ or one is missing."""
    from smallinit.core.errors import DataError

    canon = {k: _canonical_tokenizer(_run_tokenizer_file(r["run_dir"], k)) for k, r in runs.items()}
    if canon["A"] != canon["B"]:
        raise DataError(
            "runs use different tokenizers "
            f"(A {runs['A']['run_dir']}/tokenizer.json: {_tokenizer_summary(canon['A'])}; "
            f"B {runs['B']['run_dir']}/tokenizer.json: {_tokenizer_summary(canon['B'])}): "
            "a token-level comparison needs both models to score the same tokens"
        )
    return canon["A"]


def _load_models(runs: dict[str, dict[str, Any]], dev: Any) -> None:
    """Each run's config, step and float32 model in eval mode on ``dev``, from its verified checkpoint (into runs)."""
    from smallinit.runs.checkpoint import model_from_state, read_checkpoint

    for r in runs.values():
        data = read_checkpoint(r["ckpt"])
        r["config"] = data["config"]
        r["step"] = int(data["state"].get("step", -1))
        r["model"] = model_from_state(data["config"], data["model"], map_location=str(dev)).float().eval()


def _val_data(runs: dict[str, dict[str, Any]], data_dir: str | Path | None, canon: str) -> Any:
    """The TokenData whose val split is scored: ``data_dir``, by default run B's data.path; DataError unless it was
    tokenized with the runs' tokenizer ``canon``."""
    from smallinit.core.errors import DataError
    from smallinit.data import TokenData
    from smallinit.runs.rundir import run_data_path

    cfg_b = runs["B"]["config"]
    if data_dir is None:
        if not (cfg_b.get("data") or {}).get("path"):
            raise DataError("run B's config names no data.path; pass the validation data directory explicitly")
        data_dir = str(run_data_path(runs["B"]["run_dir"], cfg_b))
        if not Path(data_dir).is_dir():
            raise DataError(f"data directory {data_dir!r} from run B's config not found; pass it explicitly (--data)")
    td = TokenData(data_dir)
    tok_file = td.path / td.meta["files"]["tokenizer"]
    data_canon = _canonical_tokenizer(tok_file)
    if data_canon != canon:
        raise DataError(
            f"{td.path} was tokenized with another tokenizer than the runs ({_tokenizer_summary(data_canon)} "
            f"vs {_tokenizer_summary(canon)}); prepare it with --tokenizer RUN/tokenizer.json"
        )
    return td


def _window_convention(runs: dict[str, dict[str, Any]], bos: bool | None, seq_len: int | None) -> tuple[bool, int]:
    """(bos, T) of the scoring windows: BOS as both runs trained (DataError when they disagree and ``bos`` is None),
    T = ``seq_len`` or run B's data.seq_len, at most either model's max_seq_len."""
    from smallinit.core.errors import DataError

    cfg_b = runs["B"]["config"]
    bos_a = bool((runs["A"]["config"].get("data") or {}).get("bos", False))
    bos_b = bool((cfg_b.get("data") or {}).get("bos", False))
    if bos is None:
        if bos_a != bos_b:
            raise DataError(
                f"run A trained {'with' if bos_a else 'without'} BOS windows and run B "
                f"{'with' if bos_b else 'without'}: choose one scoring convention explicitly (bos=True/False)"
            )
        bos = bos_b
    T = int(seq_len or (cfg_b.get("data") or {}).get("seq_len") or 0)
    if T < 1:
        raise DataError(f"seq_len must be >= 1, got {T}")
    for k, r in runs.items():
        max_len = int(r["config"]["model"]["max_seq_len"])
        if T > max_len:
            raise DataError(f"seq_len {T} exceeds run {k}'s model.max_seq_len {max_len}")
    return bos, T


def _score_windows(
    runs: dict[str, dict[str, Any]], batches: Any, n_windows: int, dev: Any
) -> tuple[dict[str, list[np.ndarray]], int]:
    """log p of every target of the first ``n_windows`` windows of ``batches`` under each run's model, in float32
    (no TF32 / reduced-precision matmuls): ({label: per-batch log-prob arrays}, windows scored)."""
    import torch
    import torch.nn.functional as F

    prev_prec = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    lps: dict[str, list[np.ndarray]] = {"A": [], "B": []}
    done = 0
    try:
        with torch.inference_mode():
            for x, y in batches:
                x = x[: n_windows - done]
                y = y[: n_windows - done]
                xd, yd = x.to(dev), y.to(dev)
                for k, r in runs.items():
                    logits = r["model"](xd).float()
                    nll = F.cross_entropy(logits.flatten(0, 1), yd.flatten(), reduction="none")
                    lps[k].append((-nll).clamp(max=0.0).cpu().numpy().astype(np.float64))
                done += x.shape[0]
                if done >= n_windows:
                    break
    finally:
        torch.set_float32_matmul_precision(prev_prec)
    return lps, done


def score_models(
    run_a: str | Path,
    run_b: str | Path,
    data_dir: str | Path | None = None,
    tokens: int = DEFAULT_TOKENS,
    seq_len: int | None = None,
    batch_size: int = 8,
    bos: bool | None = None,
    device: str = "cpu",
    step_a: int | None = None,
    step_b: int | None = None,
) -> TokenScores:
    """log p(true next token) under A and under B at the same held-out positions, in float32.

    The positions are the targets of the first ceil(tokens / seq_len) validation windows of
    ``data_dir`` (default: the data directory in run B's config), in the fixed order of
    :func:`smallinit.data.val_batches` (non-overlapping windows 0, T, 2T, …; every target of a window
    is scored, so the count is a whole number of windows, fewer if the val split is smaller).
    ``seq_len`` defaults to run B's ``data.seq_len``; ``bos`` to the runs' ``data.bos`` (which must
    agree). ``run_a``/``run_b`` are run directories (latest good checkpoint, or ``step_a``/``step_b``)
    or checkpoint directories.

    Raises:
        DataError: the runs' tokenizer.json differ (or one is missing), the data directory was
            tokenized with another tokenizer, the runs disagree on BOS and ``bos`` is not given, or
            the val split is too small.
        CheckpointError: a run or checkpoint is missing or corrupted.
    """
    import time

    from smallinit.config import config_diff
    from smallinit.core.errors import DataError
    from smallinit.data import val_batches

    t0 = time.perf_counter()
    if int(tokens) < 1:
        raise DataError(f"tokens must be >= 1, got {tokens}")
    if int(batch_size) < 1:
        raise DataError(f"batch_size must be >= 1, got {batch_size}")

    runs = _resolve_runs(run_a, run_b, step_a, step_b)
    canon = _same_tokenizer(runs)  # 1. same tokenizer, or refuse
    dev = _resolve_device(device)  # 2. models and configs (verified checkpoints)
    _load_models(runs, dev)
    cfg_b = runs["B"]["config"]
    td = _val_data(runs, data_dir, canon)  # 3. the data: B's by default; tokenized with the runs' tokenizer
    bos, T = _window_convention(runs, bos, seq_len)
    bos_id = td.bos_id if bos else None

    n_windows = -(-int(tokens) // T)
    it = val_batches(td.val, T, int(batch_size), max_batches=-(-n_windows // int(batch_size)), bos_id=bos_id)
    lps, n_windows = _score_windows(runs, it, n_windows, dev)  # 4. score in float32
    starts = np.arange(n_windows, dtype=np.int64) * T
    window_starts = np.repeat(starts, T)
    positions = window_starts + np.tile(np.arange(T, dtype=np.int64) + (0 if bos else 1), n_windows)

    info = {
        "run_a": {"path": str(runs["A"]["path"]), "checkpoint": str(runs["A"]["ckpt"]), "step": runs["A"]["step"]},
        "run_b": {"path": str(runs["B"]["path"]), "checkpoint": str(runs["B"]["ckpt"]), "step": runs["B"]["step"]},
        "config_diff": {k: [va, vb] for k, (va, vb) in config_diff(runs["A"]["config"], cfg_b).items()},
        "data": str(td.path),
        "split": "val",
        "seq_len": T,
        "bos": bool(bos),
        "n_windows": int(n_windows),
        "tokens_requested": int(tokens),
        "device": str(dev),
        "dtype": "float32",
        "score_seconds": round(time.perf_counter() - t0, 3),
    }
    return TokenScores(
        logp_a=np.concatenate(lps["A"]),
        logp_b=np.concatenate(lps["B"]),
        positions=positions,
        window_starts=window_starts,
        sources=_source_of(positions, td.meta.get("val_sources")),
        info=info,
    )
