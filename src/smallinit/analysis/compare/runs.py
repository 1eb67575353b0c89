"""Comparing two runs token by token: scores of both models on the same positions, optionally binned by the loss of
a reference run (or the mean loss of several), summarised per difficulty bin (``compare_models``, DESIGN.md §2)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from smallinit.analysis.compare.scoring import DEFAULT_TOKENS, TokenScores, score_models
from smallinit.analysis.compare.summary import compare_token_scores


def summarize_scores(
    scores: TokenScores,
    n_bins: int = 5,
    by_source: bool = False,
    seed: int = 0,
    n_boot: int = 1000,
    reference: TokenScores | None = None,
    by_window: bool = False,
) -> dict:
    """``compare_token_scores`` on ``scores`` plus the scoring ``setup`` (runs, checkpoints, data, seq_len).

    ``reference``: scores whose ``logp_a`` is a third model's on the same positions (bins by its loss);
    ``by_window``: bootstrap over the scored windows instead of tokens."""
    ref = None
    if reference is not None:
        if not np.array_equal(reference.positions, scores.positions):
            raise ValueError("the reference model was scored on other positions than A and B")
        ref = reference.logp_a
    res = compare_token_scores(
        scores.logp_a,
        scores.logp_b,
        n_bins=n_bins,
        sources=scores.sources if by_source else None,
        seed=seed,
        n_boot=n_boot,
        reference_logp=ref,
        windows=scores.window_starts if by_window else None,
    )
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
    scores = score_models(
        run_a, run_b, data_dir=data_dir, tokens=tokens, seq_len=seq_len, batch_size=batch_size, bos=bos, device=device
    )
    ref = None
    refs = [] if reference is None else [reference] if isinstance(reference, (str, os.PathLike)) else list(reference)
    if refs:
        scored = [
            score_models(
                r,
                run_b,
                data_dir=data_dir,
                tokens=tokens,
                seq_len=seq_len,
                batch_size=batch_size,
                bos=bos,
                device=device,
            )
            for r in refs
        ]
        for r, sc in zip(refs[1:], scored[1:]):
            if not np.array_equal(sc.positions, scored[0].positions):
                raise ValueError(f"the reference run {r} was scored on other positions than {refs[0]}")
        ref = scored[0]
        if len(scored) > 1:  # the mean per-token loss of the references: log p_ref = mean_r log p_r
            ref = dataclasses.replace(ref, logp_a=np.mean([sc.logp_a for sc in scored], axis=0))
    res = summarize_scores(
        scores, n_bins=n_bins, by_source=by_source, seed=seed, n_boot=n_boot, reference=ref, by_window=by_window
    )
    if refs:
        res["setup"]["reference"] = str(refs[0]) if len(refs) == 1 else [str(r) for r in refs]
    return res
