"""Token-level gap between two models scored on the same token positions (DESIGN.md §2).

A is the variant, B the baseline. For each held-out position, p_A and p_B are the probabilities
the two models give the true next token, ℓ = −log p their losses.

- Δ_sym = (p_A − p_B) / (p_A + p_B) ∈ [−1, 1]  (antisymmetric: swapping A and B flips the sign)
- difficulty = (ℓ_A + ℓ_B) / 2, split into quantile bins (default 5: easy … extreme)
- per bin and overall: count, mean Δ_sym, mean ℓ_B − ℓ_A (> 0 means A is better), each with a
  percentile-bootstrap 95% interval.

This module holds the math on arrays of scores (numpy; torch tensors are accepted too).
``compare_models`` (scoring two checkpoints) lives at the bottom of the file.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Sequence

import numpy as np

__all__ = [
    "delta_sym",
    "delta_sym_from_logp",
    "difficulty_bins",
    "bin_names",
    "bootstrap_ci",
    "compare_token_scores",
]

FIVE_BIN_NAMES = ("easy", "moderate", "hard", "very hard", "extreme")
CI_LEVEL = 0.95


def _to_numpy(x: Any, name: str) -> np.ndarray:
    """1-D float64 numpy array from an array-like or a torch tensor."""
    if hasattr(x, "detach"):  # torch.Tensor, without importing torch
        x = x.detach().cpu().double().numpy()
    a = np.asarray(x, dtype=np.float64)
    if a.ndim != 1:
        a = a.reshape(-1)
    if np.isnan(a).any():
        raise ValueError(f"{name} contains NaN")
    return a


def delta_sym_from_logp(logp_a: Any, logp_b: Any) -> np.ndarray:
    """Δ_sym from log-probabilities: tanh((log p_A − log p_B) / 2).

    This is exactly (p_A − p_B) / (p_A + p_B). Proof: write x = log p_A − log p_B, so
    e^x = p_A / p_B. Since tanh(x/2) = (e^(x/2) − e^(−x/2)) / (e^(x/2) + e^(−x/2)) = (e^x − 1)/(e^x + 1),
    tanh(x/2) = (p_A/p_B − 1) / (p_A/p_B + 1) = (p_A − p_B) / (p_A + p_B), multiplying through by p_B > 0.

    Working from log-probs never forms p, so it stays exact when both probabilities underflow
    (log p = −1000 and −1001 give tanh(1/2), not 0/0). Conventions for −inf: one side −inf gives
    ±1 (the other model has all the mass); both −inf gives 0 (no information).
    """
    la = _to_numpy(logp_a, "logp_a")
    lb = _to_numpy(logp_b, "logp_b")
    if la.shape != lb.shape:
        raise ValueError(f"logp_a and logp_b differ in length: {la.size} vs {lb.size}")
    both_inf = np.isneginf(la) & np.isneginf(lb)
    with np.errstate(invalid="ignore"):
        d = np.tanh((la - lb) / 2.0)
    d[both_inf] = 0.0
    return d


def delta_sym(p_a: Any, p_b: Any) -> np.ndarray:
    """Symmetric relative gap Δ_sym = (p_A − p_B) / (p_A + p_B) ∈ [−1, 1] per token (DESIGN.md §2).

    Computed as tanh((log p_A − log p_B)/2) (see ``delta_sym_from_logp``), which is the same
    quantity and stays defined when p_A, p_B are tiny; when both are exactly 0 the result is 0.
    """
    pa = _to_numpy(p_a, "p_a")
    pb = _to_numpy(p_b, "p_b")
    if (pa < 0).any() or (pb < 0).any():
        raise ValueError("probabilities must be >= 0")
    with np.errstate(divide="ignore"):
        return delta_sym_from_logp(np.log(pa), np.log(pb))


def bin_names(n_bins: int) -> list[str]:
    """Names of difficulty bins, easiest first: the five DESIGN.md names for 5 bins, else q1..qN."""
    if n_bins == 5:
        return list(FIVE_BIN_NAMES)
    return [f"q{k + 1}" for k in range(n_bins)]


def difficulty_bins(loss_a: Any, loss_b: Any, n_bins: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """Quantile bins of token difficulty d = (ℓ_A + ℓ_B)/2 (DESIGN.md §2).

    Edges are the quantiles of d at 0, 1/n_bins, …, 1 (``np.quantile``, linear interpolation).
    Token i goes to bin k when edges[k] <= d_i < edges[k+1] (the last bin includes its upper edge),
    so bins partition all tokens, are ordered by difficulty (every token of bin k is no harder
    than every token of bin k+1), equal difficulties share a bin, and counts are equal up to ties.

    Returns:
        (bin_index, edges): int64 array of bin indices in [0, n_bins), one per token, and the
        n_bins + 1 edges.
    """
    if int(n_bins) != n_bins or n_bins < 1:
        raise ValueError(f"n_bins must be a positive integer, got {n_bins}")
    la = _to_numpy(loss_a, "loss_a")
    lb = _to_numpy(loss_b, "loss_b")
    if la.shape != lb.shape:
        raise ValueError(f"loss_a and loss_b differ in length: {la.size} vs {lb.size}")
    if la.size == 0:
        raise ValueError("no tokens to bin")
    return quantile_bins((la + lb) / 2.0, n_bins)


def quantile_bins(difficulty: Any, n_bins: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """Quantile bins of any per-token difficulty d (edges = quantiles of d at 0, 1/n, …, 1; bin k holds
    edges[k] <= d < edges[k+1], the last bin its upper edge too). Returns (bin_index, edges)."""
    d = _to_numpy(difficulty, "difficulty")
    if int(n_bins) != n_bins or n_bins < 1:
        raise ValueError(f"n_bins must be a positive integer, got {n_bins}")
    if d.size == 0:
        raise ValueError("no tokens to bin")
    edges = np.quantile(d, np.linspace(0.0, 1.0, int(n_bins) + 1))
    idx = np.searchsorted(edges[1:-1], d, side="right").astype(np.int64)
    return idx, edges


def _bootstrap_mean_intervals(
    X: np.ndarray, n_boot: int, rng: np.random.Generator, level: float, clusters: np.ndarray | None = None
) -> np.ndarray:
    """Percentile-bootstrap intervals of the column means of X (n, k), paired resampling.

    Every bootstrap replicate draws n rows with replacement (the same rows for every column).
    Replicates are processed in chunks of at most ~2M gathered values, whatever n is.
    With ``clusters`` (one label per row, e.g. the window a token was scored in) a replicate draws C whole
    clusters out of the C present instead, and its mean is Σ chosen cluster sums / Σ chosen cluster sizes:
    tokens of one window share their context and are not independent draws.
    Returns an array (k, 2) of (low, high).
    """
    n, k = X.shape
    alpha = (1.0 - level) / 2.0
    if clusters is not None:
        _, inv = np.unique(np.asarray(clusters).reshape(-1), return_inverse=True)
        sizes = np.bincount(inv).astype(np.float64)
        sums = np.stack([np.bincount(inv, weights=X[:, j]) for j in range(k)], axis=1)  # (C, k)
        C = sizes.size
        means = np.empty((n_boot, k), dtype=np.float64)
        chunk = max(1, 2_000_000 // max(C, 1))
        for start in range(0, n_boot, chunk):
            stop = min(n_boot, start + chunk)
            pick = rng.integers(0, C, size=(stop - start, C))
            means[start:stop] = sums[pick].sum(axis=1) / sizes[pick].sum(axis=1)[:, None]
        lo, hi = np.quantile(means, [alpha, 1.0 - alpha], axis=0)
        return np.stack([lo, hi], axis=1)
    cols = [np.ascontiguousarray(X[:, j]) for j in range(k)]
    idx_dtype = np.int32 if n < 2**31 else np.int64
    means = np.empty((n_boot, k), dtype=np.float64)
    chunk = max(1, 2_000_000 // max(n, 1))
    for start in range(0, n_boot, chunk):
        stop = min(n_boot, start + chunk)
        idx = rng.integers(0, n, size=(stop - start, n), dtype=idx_dtype)
        for j, col in enumerate(cols):
            means[start:stop, j] = np.take(col, idx).sum(axis=1) / n
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(means, [alpha, 1.0 - alpha], axis=0)
    return np.stack([lo, hi], axis=1)


def bootstrap_ci(values: Any, n_boot: int = 1000, seed: int = 0, level: float = 0.95) -> tuple[float, float]:
    """Percentile-bootstrap confidence interval of the mean of ``values``.

    ``n_boot`` resamples of size n with replacement (numpy Generator seeded with ``seed``); the
    interval is the (1−level)/2 and (1+level)/2 quantiles of the resampled means.
    """
    v = _to_numpy(values, "values")
    if v.size == 0:
        raise ValueError("bootstrap interval of an empty sample")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    lo, hi = _bootstrap_mean_intervals(v[:, None], n_boot, np.random.default_rng(seed), level)[0]
    return float(lo), float(hi)


def _summary(dsym: np.ndarray, gain: np.ndarray, la: np.ndarray, lb: np.ndarray, n_boot: int, seed: int,
             clusters: np.ndarray | None = None) -> dict:
    """count, means and paired-bootstrap intervals of Δ_sym and ℓ_B − ℓ_A for one group of tokens."""
    n = int(dsym.size)
    if n == 0:
        return {
            "count": 0,
            "delta_sym": {"mean": None, "ci95": None},
            "loss_gain": {"mean": None, "ci95": None},
            "loss_a": None,
            "loss_b": None,
        }
    ci = _bootstrap_mean_intervals(np.stack([dsym, gain], axis=1), n_boot, np.random.default_rng(seed), CI_LEVEL,
                                   clusters)
    return {
        "count": n,
        "delta_sym": {"mean": float(dsym.mean()), "ci95": [float(ci[0, 0]), float(ci[0, 1])]},
        "loss_gain": {"mean": float(gain.mean()), "ci95": [float(ci[1, 0]), float(ci[1, 1])]},
        "loss_a": float(la.mean()),
        "loss_b": float(lb.mean()),
    }


def _per_bin(
    bins: np.ndarray, edges: np.ndarray, dsym: np.ndarray, gain: np.ndarray, la: np.ndarray, lb: np.ndarray,
    n_boot: int, seed: int, clusters: np.ndarray | None = None,
) -> list[dict]:
    names = bin_names(len(edges) - 1)
    out = []
    for k, name in enumerate(names):
        m = bins == k
        row = {"bin": k, "name": name, "difficulty": [float(edges[k]), float(edges[k + 1])]}
        row.update(_summary(dsym[m], gain[m], la[m], lb[m], n_boot, seed + 1 + k,
                            None if clusters is None else clusters[m]))
        out.append(row)
    return out


def compare_token_scores(
    logp_a: Any,
    logp_b: Any,
    n_bins: int = 5,
    sources: Any = None,
    seed: int = 0,
    n_boot: int = 1000,
    reference_logp: Any = None,
    windows: Any = None,
) -> dict:
    """Token-level comparison of variant A and baseline B from per-token log-probs (DESIGN.md §2).

    ``reference_logp`` (log p under a third model that is neither A nor B, e.g. a second baseline seed): the
    primary bins are then quantiles of the reference's loss ℓ_ref, which is independent of A's and B's own noise
    — binning by (ℓ_A + ℓ_B)/2 correlates the bin with ℓ_B − ℓ_A whenever one model's per-token losses are noisier
    — and the (ℓ_A + ℓ_B)/2 bins stay as a secondary table ``bins_mean_difficulty``. ``windows`` (the window each
    token was scored in): every interval is a bootstrap over windows, not over tokens.

    Args:
        logp_a, logp_b: log p of the true next token at the same positions, under A and B.
        n_bins: number of difficulty quantile bins (difficulty = (ℓ_A + ℓ_B)/2, ℓ = −log p).
        sources: optional array of source names (e.g. language), one per token; adds a
            ``by_source`` section computed with the global bin edges, so that a bin means the same
            difficulty range in every source.
        seed: seed of the bootstrap (each group gets its own derived, fixed stream).
        n_boot: bootstrap resamples.

    Returns a JSON-serialisable dict::

        {"n_tokens", "n_bins", "ci_level", "n_boot", "seed", "edges",
         "overall": {"count", "delta_sym": {"mean", "ci95"}, "loss_gain": {"mean", "ci95"},
                     "loss_a", "loss_b"},
         "bins": [{"bin", "name", "difficulty": [lo, hi], <same fields as overall>}, ...],
         "by_source": {name: {"overall": ..., "bins": [...]}}            # only with sources}

    where loss_gain = ℓ_B − ℓ_A (> 0: A has lower loss) and Δ_sym > 0 means A gives the true token
    more probability. Empty groups have count 0 and None for every statistic.
    """
    la_lp = _to_numpy(logp_a, "logp_a")
    lb_lp = _to_numpy(logp_b, "logp_b")
    if la_lp.shape != lb_lp.shape:
        raise ValueError(f"logp_a and logp_b differ in length: {la_lp.size} vs {lb_lp.size}")
    if (la_lp > 0).any() or (lb_lp > 0).any():
        raise ValueError("log-probabilities must be <= 0")
    loss_a, loss_b = -la_lp, -lb_lp
    if not (np.isfinite(loss_a).all() and np.isfinite(loss_b).all()):
        raise ValueError("log-probabilities must be finite (a model gave the true token probability 0)")
    dsym = delta_sym_from_logp(la_lp, lb_lp)
    gain = loss_b - loss_a
    win = None
    if windows is not None:
        win = np.asarray(windows).reshape(-1)
        if win.size != dsym.size:
            raise ValueError(f"windows has {win.size} entries for {dsym.size} tokens")
    if reference_logp is not None:
        ref = -_to_numpy(reference_logp, "reference_logp")
        if ref.shape != loss_a.shape:
            raise ValueError(f"reference_logp has {ref.size} entries for {dsym.size} tokens")
        bins, edges = quantile_bins(ref, n_bins)
        how = "reference model's loss, quantile bins"
    else:
        bins, edges = difficulty_bins(loss_a, loss_b, n_bins)
        how = "(loss_a + loss_b) / 2, quantile bins"

    result: dict[str, Any] = {
        "n_tokens": int(dsym.size),
        "n_bins": int(n_bins),
        "ci_level": CI_LEVEL,
        "n_boot": int(n_boot),
        "seed": int(seed),
        "difficulty": how,
        "bootstrap_unit": "window" if win is not None else "token",
        "edges": [float(e) for e in edges],
        "overall": _summary(dsym, gain, loss_a, loss_b, n_boot, seed, win),
        "bins": _per_bin(bins, edges, dsym, gain, loss_a, loss_b, n_boot, seed, win),
    }
    if reference_logp is not None:
        b2, e2 = difficulty_bins(loss_a, loss_b, n_bins)
        result["bins_mean_difficulty"] = _per_bin(b2, e2, dsym, gain, loss_a, loss_b, n_boot, seed, win)
        result["bins_mean_difficulty_caveat"] = (
            "binned by (ℓ_A + ℓ_B)/2: this correlates the bin with ℓ_B − ℓ_A whenever one model's per-token losses "
            "are noisier, so a trend across these bins can appear between models of equal mean loss")
    if sources is not None:
        src = np.asarray(sources).reshape(-1)
        if src.size != dsym.size:
            raise ValueError(f"sources has {src.size} entries for {dsym.size} tokens")
        src = src.astype(str)
        by_source: dict[str, Any] = {}
        for j, name in enumerate(np.unique(src).tolist()):
            m = src == name
            s_seed = seed + 1000 * (j + 1)
            by_source[name] = {
                "overall": _summary(dsym[m], gain[m], loss_a[m], loss_b[m], n_boot, s_seed,
                                    None if win is None else win[m]),
                "bins": _per_bin(bins[m], edges, dsym[m], gain[m], loss_a[m], loss_b[m], n_boot, s_seed,
                                 None if win is None else win[m]),
            }
        result["by_source"] = by_source
    return result


# ----------------------------------------------------------------------------------------------
# compare_models(run_a, run_b, ...): scoring two checkpoints on the same positions (added later).
# ----------------------------------------------------------------------------------------------

from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402

__all__ += ["TokenScores", "score_models", "summarize_scores", "compare_models", "top_contexts"]

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
    from smallinit.checkpoint import MANIFEST

    return path.parent.parent if (path / MANIFEST).is_file() else path


def _canonical_tokenizer(path: Path) -> str:
    """The tokenizer at ``path`` serialised by the tokenizers library (formatting-independent)."""
    from tokenizers import Tokenizer

    from smallinit.errors import DataError

    try:
        return Tokenizer.from_file(str(path)).to_str()
    except Exception as e:  # the library raises plain Exception subclasses
        raise DataError(f"{path}: unreadable tokenizer ({str(e).splitlines()[0][:200]})") from None


def _run_tokenizer_file(run_dir: Path, label: str) -> Path:
    from smallinit.errors import DataError

    p = run_dir / "tokenizer.json"
    if not p.is_file():
        raise DataError(
            f"run {label} ({run_dir}) has no tokenizer.json, so its tokenization cannot be checked against the other run"
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


from smallinit.device import resolve_device as _resolve_device  # noqa: E402


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

    import torch
    import torch.nn.functional as F

    from smallinit.checkpoint import model_from_state, read_checkpoint, resolve_checkpoint
    from smallinit.data import TokenData, val_batches
    from smallinit.errors import DataError
    from smallinit.rundir import run_data_path
    from smallinit.train.config import config_diff

    t0 = time.perf_counter()
    if int(tokens) < 1:
        raise DataError(f"tokens must be >= 1, got {tokens}")
    if int(batch_size) < 1:
        raise DataError(f"batch_size must be >= 1, got {batch_size}")

    runs = {}
    for label, path, step in (("A", Path(run_a), step_a), ("B", Path(run_b), step_b)):
        ckpt = resolve_checkpoint(path, step)
        runs[label] = {"path": path, "run_dir": _run_dir_of(ckpt), "ckpt": ckpt}

    # 1. same tokenizer, or refuse
    canon = {k: _canonical_tokenizer(_run_tokenizer_file(r["run_dir"], k)) for k, r in runs.items()}
    if canon["A"] != canon["B"]:
        raise DataError(
            f"runs use different tokenizers (A {runs['A']['run_dir']}/tokenizer.json: {_tokenizer_summary(canon['A'])}; "
            f"B {runs['B']['run_dir']}/tokenizer.json: {_tokenizer_summary(canon['B'])}): "
            "a token-level comparison needs both models to score the same tokens"
        )

    # 2. models and configs (verified checkpoints)
    dev = _resolve_device(device)
    for r in runs.values():
        data = read_checkpoint(r["ckpt"])
        r["config"] = data["config"]
        r["step"] = int(data["state"].get("step", -1))
        r["model"] = model_from_state(data["config"], data["model"], map_location=str(dev)).float().eval()

    cfg_b = runs["B"]["config"]
    # 3. the data: B's by default; must be tokenized with the runs' tokenizer
    if data_dir is None:
        if not (cfg_b.get("data") or {}).get("path"):
            raise DataError("run B's config names no data.path; pass the validation data directory explicitly")
        data_dir = str(run_data_path(runs["B"]["run_dir"], cfg_b))
        if not Path(data_dir).is_dir():
            raise DataError(f"data directory {data_dir!r} from run B's config not found; pass it explicitly (--data)")
    td = TokenData(data_dir)
    tok_file = td.path / td.meta["files"]["tokenizer"]
    if _canonical_tokenizer(tok_file) != canon["A"]:
        raise DataError(
            f"{td.path} was tokenized with another tokenizer than the runs ({_tokenizer_summary(_canonical_tokenizer(tok_file))} "
            f"vs {_tokenizer_summary(canon['A'])}); prepare it with --tokenizer RUN/tokenizer.json"
        )

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
    bos_id = td.bos_id if bos else None

    n_windows = -(-int(tokens) // T)
    it = val_batches(td.val, T, int(batch_size), max_batches=-(-n_windows // int(batch_size)), bos_id=bos_id)

    # 4. score in float32 (no TF32 / reduced-precision matmuls)
    prev_prec = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    lps: dict[str, list[np.ndarray]] = {"A": [], "B": []}
    done = 0
    try:
        with torch.inference_mode():
            for x, y in it:
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
    n_windows = done
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


def summarize_scores(scores: TokenScores, n_bins: int = 5, by_source: bool = False, seed: int = 0,
                     n_boot: int = 1000, reference: TokenScores | None = None, by_window: bool = False) -> dict:
    """``compare_token_scores`` on ``scores`` plus the scoring ``setup`` (runs, checkpoints, data, seq_len).

    ``reference``: scores whose ``logp_a`` is a third model's on the same positions (bins by its loss);
    ``by_window``: bootstrap over the scored windows instead of tokens."""
    ref = None
    if reference is not None:
        if not np.array_equal(reference.positions, scores.positions):
            raise ValueError("the reference model was scored on other positions than A and B")
        ref = reference.logp_a
    res = compare_token_scores(scores.logp_a, scores.logp_b, n_bins=n_bins,
                               sources=scores.sources if by_source else None, seed=seed, n_boot=n_boot,
                               reference_logp=ref, windows=scores.window_starts if by_window else None)
    return {"setup": dict(scores.info), **res}


def compare_models(
    run_a: str | Path,
    run_b: str | Path,
    data_dir: str | Path | None = None,
    tokens: int = DEFAULT_TOKENS,
    n_bins: int = 5,
    seq_len: int | None = None,
    by_source: bool = False,
    batch_size: int = 8,
    seed: int = 0,
    n_boot: int = 1000,
    bos: bool | None = None,
    device: str = "cpu",
    by_window: bool = False,
    reference: str | Path | Sequence[str | Path] | None = None,
) -> dict:
    """Token-level comparison of variant A against baseline B (DESIGN.md §2, "Token-level gap").

    ``by_window``: intervals by a bootstrap over the scored windows (tokens of one window are not independent).
    ``reference``: a third run (a model from neither family) or several runs (e.g. a second seed of *each* arm, a
    reference symmetric in A and B, DESIGN.md §2 "Token bins by an independent reference") scored on the same
    positions; the primary bins are then quantiles of the reference loss — with several runs the mean of their
    per-token losses, ℓ_ref = mean_r ℓ_r — and the (ℓ_A + ℓ_B)/2 bins a secondary table.

    Scores both models on the same held-out positions (:func:`score_models`, float32), then
    Δ_sym = (p_A − p_B)/(p_A + p_B) and ℓ_B − ℓ_A per difficulty bin ((ℓ_A + ℓ_B)/2 quantiles),
    with bootstrap 95% intervals (:func:`compare_token_scores`); ``by_source`` adds the same per
    val source (e.g. language). Returns the dict of ``compare_token_scores`` plus ``setup``.
    Refuses (DataError) when the runs' tokenizers differ.
    """
    scores = score_models(run_a, run_b, data_dir=data_dir, tokens=tokens, seq_len=seq_len,
                          batch_size=batch_size, bos=bos, device=device)
    ref = None
    refs = [] if reference is None else [reference] if isinstance(reference, (str, os.PathLike)) else list(reference)
    if refs:
        scored = [score_models(r, run_b, data_dir=data_dir, tokens=tokens, seq_len=seq_len, batch_size=batch_size,
                               bos=bos, device=device) for r in refs]
        for r, sc in zip(refs[1:], scored[1:]):
            if not np.array_equal(sc.positions, scored[0].positions):
                raise ValueError(f"the reference run {r} was scored on other positions than {refs[0]}")
        ref = scored[0]
        if len(scored) > 1:  # the mean per-token loss of the references: log p_ref = mean_r log p_r
            ref = dataclasses.replace(ref, logp_a=np.mean([sc.logp_a for sc in scored], axis=0))
    res = summarize_scores(scores, n_bins=n_bins, by_source=by_source, seed=seed, n_boot=n_boot, reference=ref,
                           by_window=by_window)
    if refs:
        res["setup"]["reference"] = str(refs[0]) if len(refs) == 1 else [str(r) for r in refs]
    return res


def _decode(tokenizer: Any, ids: np.ndarray) -> str:
    return tokenizer.decode([int(i) for i in ids], skip_special_tokens=False)


def top_contexts(
    scores: TokenScores,
    val_tokens: np.ndarray,
    tokenizer: Any,
    k: int = 10,
    context: int = 24,
    bos_text: str = "",
) -> dict[str, list[dict]]:
    """The positions where A gains most over B and where it loses most, with decoded contexts.

    Ranked by ℓ_B − ℓ_A = log p_A − log p_B (Δ_sym = tanh of half of it, so the order is the same).
    A position is kept only if it lies more than ``context`` tokens from every position already
    kept on the same side, so one repeated passage does not fill the list. Each entry gives the
    last ``context`` tokens of what the models saw (never crossing the start of the scoring window;
    ``bos_text`` marks a window start under BOS), the true next token, p_A, p_B, ℓ_A, ℓ_B, Δ_sym,
    source and position.

    Returns {"gains": [...], "losses": [...]}, each at most ``k`` entries, best first.
    """
    diff = scores.logp_a - scores.logp_b  # ℓ_B − ℓ_A
    dsym = delta_sym_from_logp(scores.logp_a, scores.logp_b)
    bos = bool(scores.info.get("bos", False))

    def entry(i: int) -> dict:
        pos = int(scores.positions[i])
        ws = int(scores.window_starts[i])
        lo = max(ws, pos - int(context))
        ctx = _decode(tokenizer, np.asarray(val_tokens[lo:pos]))
        if bos and lo == ws:
            ctx = bos_text + ctx
        return {
            "position": pos,
            "source": str(scores.sources[i]),
            "context": ctx,
            "target": _decode(tokenizer, np.asarray(val_tokens[pos : pos + 1])),
            "p_a": float(np.exp(scores.logp_a[i])),
            "p_b": float(np.exp(scores.logp_b[i])),
            "loss_a": float(-scores.logp_a[i]),
            "loss_b": float(-scores.logp_b[i]),
            "loss_gain": float(diff[i]),
            "delta_sym": float(dsym[i]),
        }

    def pick(order: np.ndarray) -> list[dict]:
        kept: list[int] = []
        for i in order:
            p = scores.positions[i]
            if all(abs(int(p) - int(scores.positions[j])) > context for j in kept):
                kept.append(int(i))
                if len(kept) >= k:
                    break
        return [entry(i) for i in kept]

    order = np.argsort(-diff, kind="stable")
    return {"gains": pick(order), "losses": pick(order[::-1])}


# ---- the written comparison (``smallinit compare``) ------------------------------------------------

def _ci_text(stat: dict, fmt: str = "+.4f") -> str:
    if stat["mean"] is None:
        return "–"
    lo, hi = stat["ci95"]
    return f"{stat['mean']:{fmt}} [{lo:{fmt}}, {hi:{fmt}}]"


def bins_table(res: dict) -> str:
    """Markdown table of one result block ({"overall", "bins"}) with the difficulty edges."""
    lines = [
        "| bin | difficulty (nats) | tokens | mean Δ_sym [95% CI] | mean ℓ_B − ℓ_A [95% CI] | ℓ_A | ℓ_B |",
        "|---|---|---:|---|---|---:|---:|",
    ]

    def row(name: str, diff: str, r: dict) -> str:
        la = "–" if r["loss_a"] is None else f"{r['loss_a']:.3f}"
        lb = "–" if r["loss_b"] is None else f"{r['loss_b']:.3f}"
        return f"| {name} | {diff} | {r['count']} | {_ci_text(r['delta_sym'])} | {_ci_text(r['loss_gain'])} | {la} | {lb} |"

    for b in res["bins"]:
        lo, hi = b["difficulty"]
        lines.append(row(b["name"], f"{lo:.2f}–{hi:.2f}", b))
    lines.append(row("**all**", "", res["overall"]))
    return "\n".join(lines)


def _md_cell(text: str, limit: int = 120) -> str:
    t = text.replace("\\", "\\\\").replace("|", "\\|").replace("`", "ˋ").replace("\r", "").replace("\n", "↵")
    t = t.replace("\t", "→")
    if len(t) > limit:
        t = "…" + t[-limit:]
    return t


def contexts_markdown(top: dict, setup: dict) -> str:
    """Two markdown tables: top gains and top losses of A against B, with the decoded context."""
    out = [
        "# Where A gains and loses most",
        "",
        f"A = `{setup['run_a']['path']}` (step {setup['run_a']['step']}), "
        f"B = `{setup['run_b']['path']}` (step {setup['run_b']['step']}); data `{setup['data']}` (val), "
        f"seq_len {setup['seq_len']}. Ranked by ℓ_B − ℓ_A (nats). The context is what precedes the target "
        "in its window (↵ = newline); the target token is in **bold**.",
    ]
    for side, title in (("gains", "A gains most"), ("losses", "A loses most")):
        out += ["", f"## {title}", "",
                "| # | context → **target** | p_A | p_B | ℓ_B − ℓ_A | Δ_sym | source | position |",
                "|---:|---|---:|---:|---:|---:|---|---:|"]
        for i, e in enumerate(top[side], 1):
            tgt = _md_cell(e["target"], 40) or "∅"
            out.append(
                f"| {i} | {_md_cell(e['context'])} → **{tgt}** | {e['p_a']:.3g} | {e['p_b']:.3g} | "
                f"{e['loss_gain']:+.3f} | {e['delta_sym']:+.3f} | {e['source']} | {e['position']} |"
            )
    return "\n".join(out) + "\n"


def write_comparison(run_a: str | Path, run_b: str | Path, out: str | Path, *, data_dir: str | Path | None = None,
                     tokens: int = DEFAULT_TOKENS, n_bins: int = 5, by_source: bool = False,
                     seq_len: int | None = None, batch_size: int = 8, bos: bool | None = None, device: str = "auto",
                     n_boot: int = 1000, seed: int = 0, top: int = 10) -> dict:
    """:func:`score_models` + :func:`summarize_scores` + :func:`top_contexts`, written into ``out``:
    ``compare.json`` (the result), ``delta_by_bin.png``, ``scatter.png`` and ``contexts.md``. Returns the result."""
    import json

    from smallinit.data import TokenData
    from smallinit.errors import ConfigError
    from smallinit.figures import plot_delta_by_bin, plot_scatter
    from smallinit.io import atomic_write_json, atomic_write_text, json_safe

    from smallinit.outputs import check_out_dir

    for name, v in (("--bins", n_bins), ("--tokens", tokens), ("--n-boot", n_boot), ("--batch-size", batch_size),
                    ("--seq-len", 1 if seq_len is None else seq_len)):
        if v < 1:
            raise ConfigError(f"{name} must be >= 1, got {v}")
    if top < 0:
        raise ConfigError(f"--top must be >= 0, got {top}")
    if n_bins > tokens:
        raise ConfigError(f"--bins {n_bins} is more than --tokens {tokens}: every bin needs tokens; use at most "
                          f"{tokens} bins or score more tokens")
    check_out_dir(out, "compare", inputs=[run_a, run_b, data_dir], can_continue=True, verb="compare")
    out = Path(out)
    scores = score_models(run_a, run_b, data_dir=data_dir, tokens=tokens, seq_len=seq_len, batch_size=batch_size,
                          bos=bos, device=device)
    res = summarize_scores(scores, n_bins=n_bins, by_source=by_source, seed=seed, n_boot=n_boot)
    td = TokenData(scores.info["data"])
    res["top_contexts"] = top_contexts(scores, td.val, td.tokenizer, k=top, bos_text="⟨BOS⟩")
    out.mkdir(parents=True, exist_ok=True)
    res["files"] = {"delta_by_bin": "delta_by_bin.png", "scatter": "scatter.png", "contexts": "contexts.md"}
    atomic_write_text(out / "contexts.md", contexts_markdown(res["top_contexts"], res["setup"]))
    plot_delta_by_bin(res, out / "delta_by_bin.png")
    res["scatter_points"] = plot_scatter(-scores.logp_a, -scores.logp_b, out / "scatter.png", seed=seed)
    json.dumps(json_safe(res), allow_nan=False)  # fail before writing if anything is not serialisable
    atomic_write_json(out / "compare.json", json_safe(res))
    return res
__all__ += ["bins_table", "contexts_markdown", "write_comparison"]
