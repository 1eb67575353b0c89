"""Token-level gap between two models scored on the same token positions (DESIGN.md §2).

A is the variant, B the baseline. For each held-out position, p_A and p_B are the probabilities
the two models give the true next token, ℓ = −log p their losses.

- Δ_sym = (p_A − p_B) / (p_A + p_B) ∈ [−1, 1]  (antisymmetric: swapping A and B flips the sign)
- difficulty = (ℓ_A + ℓ_B) / 2, split into quantile bins (default 5: easy … extreme)
- per bin and overall: count, mean Δ_sym, mean ℓ_B − ℓ_A (> 0 means A is better), each with a
  percentile-bootstrap 95% interval.

One job per module; this package re-exports their public names:

    bins.py       Δ_sym (from probabilities or log-probs) and difficulty quantile bins, on arrays
    bootstrap.py  percentile-bootstrap intervals of means, over tokens or over windows (clusters)
    summary.py    compare_token_scores: the per-bin / overall / per-source table on arrays of log-probs
    scoring.py    score_models → TokenScores: both checkpoints scored on the same held-out positions (float32)
    runs.py       summarize_scores, compare_models: scoring + the table, optionally binned by reference runs
    contexts.py   top_contexts (where A gains and loses most) and their markdown
    report.py     bins_table and write_comparison (``smallinit compare``: compare.json, figures, contexts.md)
"""

from __future__ import annotations

# FIVE_BIN_NAMES, CI_LEVEL, DEFAULT_TOKENS, quantile_bins and _canonical_tokenizer (smallinit.analysis.scaling checks
# runs' tokenizers with it) are importable from here too, outside __all__
from smallinit.analysis.compare.bins import (  # noqa: F401
    FIVE_BIN_NAMES,
    bin_names,
    delta_sym,
    delta_sym_from_logp,
    difficulty_bins,
    quantile_bins,
)
from smallinit.analysis.compare.bootstrap import CI_LEVEL, bootstrap_ci  # noqa: F401
from smallinit.analysis.compare.contexts import contexts_markdown, top_contexts
from smallinit.analysis.compare.report import bins_table, write_comparison
from smallinit.analysis.compare.runs import compare_models, summarize_scores
from smallinit.analysis.compare.scoring import DEFAULT_TOKENS, TokenScores, _canonical_tokenizer, score_models  # noqa: F401
from smallinit.analysis.compare.summary import compare_token_scores

__all__ = [
    "delta_sym",
    "delta_sym_from_logp",
    "difficulty_bins",
    "bin_names",
    "bootstrap_ci",
    "compare_token_scores",
    "TokenScores",
    "score_models",
    "summarize_scores",
    "compare_models",
    "top_contexts",
    "bins_table",
    "contexts_markdown",
    "write_comparison",
]
