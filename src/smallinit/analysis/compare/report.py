"""The written comparison (``smallinit compare``): compare.json, the per-bin markdown table, delta_by_bin.png,
scatter.png and contexts.md."""

from __future__ import annotations

from pathlib import Path

from smallinit.analysis.compare.contexts import contexts_markdown, top_contexts
from smallinit.analysis.compare.runs import summarize_scores
from smallinit.analysis.compare.scoring import DEFAULT_TOKENS, score_models


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
        cis = f"{_ci_text(r['delta_sym'])} | {_ci_text(r['loss_gain'])}"
        return f"| {name} | {diff} | {r['count']} | {cis} | {la} | {lb} |"

    for b in res["bins"]:
        lo, hi = b["difficulty"]
        lines.append(row(b["name"], f"{lo:.2f}–{hi:.2f}", b))
    lines.append(row("**all**", "", res["overall"]))
    return "\n".join(lines)


def write_comparison(
    run_a: str | Path,
    run_b: str | Path,
    out: str | Path,
    *,
    data_dir: str | Path | None = None,
    tokens: int = DEFAULT_TOKENS,
    n_bins: int = 5,
    by_source: bool = False,
    seq_len: int | None = None,
    batch_size: int = 8,
    bos: bool | None = None,
    device: str = "auto",
    n_boot: int = 1000,
    seed: int = 0,
    top: int = 10,
) -> dict:
    """:func:`score_models` + :func:`summarize_scores` + :func:`top_contexts`, written into ``out``:
    ``compare.json`` (the result), ``delta_by_bin.png``, ``scatter.png`` and ``contexts.md``. Returns the result."""
    import json

    from smallinit.core.errors import ConfigError
    from smallinit.core.figures import plot_delta_by_bin, plot_scatter
    from smallinit.core.io import atomic_write_json, atomic_write_text, json_safe
    from smallinit.core.outputs import check_out_dir
    from smallinit.data import TokenData

    for name, v in (
        ("--bins", n_bins),
        ("--tokens", tokens),
        ("--n-boot", n_boot),
        ("--batch-size", batch_size),
        ("--seq-len", 1 if seq_len is None else seq_len),
    ):
        if v < 1:
            raise ConfigError(f"{name} must be >= 1, got {v}")
    if top < 0:
        raise ConfigError(f"--top must be >= 0, got {top}")
    if n_bins > tokens:
        raise ConfigError(
            f"--bins {n_bins} is more than --tokens {tokens}: every bin needs tokens; use at most "
            f"{tokens} bins or score more tokens"
        )
    check_out_dir(out, "compare", inputs=[run_a, run_b, data_dir], can_continue=True, verb="compare")
    out = Path(out)
    scores = score_models(
        run_a, run_b, data_dir=data_dir, tokens=tokens, seq_len=seq_len, batch_size=batch_size, bos=bos, device=device
    )
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
