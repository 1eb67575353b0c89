"""The bf16-vs-fp32 loss-parity judge of issue 31 (:func:`loss_parity`): may the runs that decide a claim train in
bf16? Until it says so, ``train.dtype = "auto"`` is float32 for them
(:data:`smallinit.train.precision.CLAIM_RUNS_DTYPE`); ``benchmarks/bf16_parity.py`` trains the runs it judges."""

from __future__ import annotations

from typing import Any

__all__ = ["loss_parity"]


def loss_parity(losses: dict[str, dict[str, dict[int, float]]], baseline: str, variant: str) -> dict[str, Any]:
    """The bf16-vs-fp32 parity of a claim comparison (issue 31): ``losses[arm][dtype][seed]`` final val losses.

    Per arm: Δ = L_bf16 − L_fp32, a seed-paired 95% t-interval over seeds (same seed = same init draw and batches).
    The claim-1 gap under each dtype: G_dtype = L_baseline − L_variant, paired by seed. The decision reads
    ΔG_s = G_bf16,s − G_fp32,s (seed-paired 95% t-interval):

    - ΔG's interval excludes 0 → **fp32 for claim runs** (bf16 moves the gap beyond seed noise);
    - ΔG's interval lies inside ±h, h the half-width of G_fp32's own interval (the seed noise of the measurement
      bf16 would join) → **bf16 may decide claims** (whatever bf16 does to G is smaller than that noise);
    - otherwise → **not resolved** (too few seeds to tell; claim runs stay float32).

    Needs ≥ 2 seeds present in all four cells (``decision`` is "not measured" otherwise)."""
    from smallinit.core.stats import paired_t_interval

    cells = [(a, d) for a in (baseline, variant) for d in ("fp32", "bf16")]
    for a, d in cells:
        if not losses.get(a, {}).get(d):
            raise ValueError(f"no {d} losses for arm {a!r}")
    seeds = sorted(set.intersection(*(set(losses[a][d]) for a, d in cells)))
    per_arm = {
        a: paired_t_interval([losses[a]["bf16"][s] - losses[a]["fp32"][s] for s in seeds]).to_dict()
        for a in (baseline, variant)
    }
    gap = {
        d: paired_t_interval([losses[baseline][d][s] - losses[variant][d][s] for s in seeds]).to_dict()
        for d in ("fp32", "bf16")
    }
    dg = paired_t_interval(
        [
            (losses[baseline]["bf16"][s] - losses[variant]["bf16"][s])
            - (losses[baseline]["fp32"][s] - losses[variant]["fp32"][s])
            for s in seeds
        ]
    )
    if dg.lo is None:
        decision, why = "not measured", f"{len(seeds)} seed(s) in all four cells: no interval"
    elif dg.lo > 0 or dg.hi < 0:
        decision = "fp32 for claim runs"
        why = (
            f"bf16 moves the gap by {dg.value:+.4f} [{dg.lo:+.4f}, {dg.hi:+.4f}] nats, beyond seed noise: "
            "`auto` stays float32 for the runs that decide a claim"
        )
    else:
        g = gap["fp32"]
        h = (g["hi"] - g["lo"]) / 2
        moved = f"bf16 moves the gap by {dg.value:+.4f} [{dg.lo:+.4f}, {dg.hi:+.4f}] nats"
        if -h <= dg.lo and dg.hi <= h:
            decision = "bf16 may decide claims"
            why = f"{moved}, inside ±{h:.4f} (the seed noise of G in fp32, {len(seeds)} seeds)"
        else:
            decision = "not resolved"
            why = (
                f"{moved}: holds 0 but reaches beyond ±{h:.4f} (the seed noise of G in fp32); more seeds would "
                "tell, and claim runs stay float32 until then"
            )
    return {
        "seeds": seeds,
        "per_arm": per_arm,
        "gap": gap,
        "gap_change": dg.to_dict(),
        "decision": decision,
        "reason": why,
    }
