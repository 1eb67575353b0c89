"""Issue #44: the mechanism claims at the paper's width over an early horizon (the `cpu-0.1b` preset): its arms, the
rules that judge claims 3, 4 and 6 there (each on constructed data where the claim holds and where it fails) and the
rules that keep a preset from deciding what its width or horizon cannot show."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from smallinit.experiments.claims import c03_saturation as c3
from smallinit.experiments.claims import c04_sink as c4
from smallinit.experiments.claims import c06_condensation as c6
from smallinit.experiments.claims.rules import INCONCLUSIVE, NOT_REACHED, NOT_SUPPORTED, SUPPORTED, Effect
from smallinit.experiments.presets import CPU_01B, EARLY_ARMS, PRESETS

STEPS = [0, 1, 2, 5, 10, 20, 50, 100, 150, 200, 250, 300]  # the preset's probes: log-spaced early, then every 50
LOSS = Effect("val loss", 0.01, -0.02, 0.04)


def _saturation(healthy_from: float, seed: int) -> tuple[list[int], list[float]]:
    """Lowest saturation 0.15 (ε-dominated) before ``healthy_from``, 0.9 from it on (plus a little seed noise)."""
    return STEPS, [(0.15 if t < healthy_from else 0.9) + 0.01 * seed for t in STEPS]


def test_dominated_share_is_time_weighted_and_the_first_healthy_step_is_found():
    """Dominated until step 150 of 300: the trapezoid weights give H = (150 − 25)/300 (the probe at 150 is healthy
    and holds half of each neighbouring interval), not the 8 of 12 probes the log-spaced early steps would count."""
    s = _saturation(150, 0)
    assert c3.dominated_share(s) == pytest.approx(125 / 300)
    assert c3.first_healthy_step(s) == 150
    assert c3.first_healthy_step((STEPS, [0.1] * len(STEPS))) is None
    assert c3.dominated_share((STEPS, [0.1] * len(STEPS))) == 1.0


def test_claim3_by_share_of_horizon_holds_when_b_is_dominated_long_and_fails_when_it_recovers_early():
    """Part (a) with a declared share 0.5: B dominated until step 250 of 300 (H = 0.75) → supported; dominated
    only until step 10 (H ≈ 0.02, the first updates lift the hidden state) → not supported. C (ε 1e-12) is reported,
    never judged. The loss part of an early horizon (0.007 tokens/param against 75) is never judged."""
    c_arm = {s: (STEPS, [1.0] * len(STEPS)) for s in range(3)}
    long = {s: _saturation(250, s) for s in range(3)}
    short = {s: _saturation(10 + s, s) for s in range(3)}
    held = c3.judge(long, c_arm, LOSS, tokens_per_param=0.007, enough=75, width=768, share=0.5)
    assert held.numbers["part_a"] == SUPPORTED and held.verdict == NOT_REACHED
    assert held.numbers["dominated_share_eps_1e-5"] == pytest.approx(225 / 300)
    assert held.numbers["dominated_share_eps_1e-12"] == 0.0
    assert held.numbers["first_healthy_step_eps_1e-5"] == {0: 250, 1: 250, 2: 250}
    failed = c3.judge(short, c_arm, LOSS, tokens_per_param=0.007, enough=75, width=768, share=0.5)
    assert failed.numbers["part_a"] == NOT_SUPPORTED and failed.verdict == NOT_SUPPORTED
    # without a declared share the time-averaged rule reads the same data (B mean 0.15·0.75 + 0.9·0.25 < 0.5)
    assert c3.judge(long, c_arm, LOSS, width=768).numbers["part_a"] == SUPPORTED


def _layers(level: float, seed: int, n: int = 12, last_third: float = 0.0) -> list[float]:
    rng = np.random.default_rng(seed)
    return [level + (last_third if i >= 2 * n // 3 else 0.0) + rng.normal(0, 0.005) for i in range(n)]


def test_claim4_reads_b_against_a_and_c_against_d_with_layer_groups():
    """(a) B − A and (b) C − D over 3 seeds: B's sink above A's and D's below C's → supported; a gate that does
    nothing (D = C) leaves (b) inconclusive; a gate that raises the sink fails (b). A sink only in the last third of
    the layers shows in that group's difference and not in the first group's."""
    a = {s: _layers(0.05, s) for s in range(3)}
    b = {s: _layers(0.05, 10 + s, last_third=0.3) for s in range(3)}
    c = {s: _layers(0.25, 20 + s) for s in range(3)}
    d = {s: _layers(0.05, 30 + s) for s in range(3)}
    assert c4.judge(a, b, d, sink_small_nogate=c).verdict == SUPPORTED
    same = {s: _layers(0.25, 40 + s) for s in range(3)}
    assert c4.judge(a, b, same, sink_small_nogate=c).effects[1].verdict == INCONCLUSIVE
    higher = {s: _layers(0.45, 50 + s) for s in range(3)}
    assert c4.judge(a, b, higher, sink_small_nogate=c).verdict == NOT_SUPPORTED
    groups = c4.group_effects(b, a, "(a)")
    assert [len(g) for g in c4.layer_groups(12)] == [4, 4, 4] and [e.verdict for e in groups][::2] == [
        INCONCLUSIVE,
        SUPPORTED,
    ]
    assert groups[2].value == pytest.approx(0.3, abs=0.02)


def _srank(path: list[float], seed: int, names=("q", "k", "v")) -> dict[str, list[float]]:
    rng = np.random.default_rng(seed)
    return {n: [x * (1 + rng.normal(0, 0.01)) for x in path] for n in names}


def test_claim6_expansion_is_not_reached_from_a_short_horizon_unless_it_shows():
    """γ = 1 condenses and keeps falling to the end of a 300-step run: (b) and (c) read *not reached* (never *not
    supported*) because the horizon ends before the 1,000 steps an expansion needs; the same trajectories over
    3,000 steps read *not supported*. An expansion that does show in 300 steps stays supported."""
    falling = [64, 60, 50, 35, 25, 18, 14, 11, 10, 9, 8.5, 8]
    rising = [64, 60, 50, 35, 25, 18, 14, 16, 20, 24, 28, 32]
    flat = [64] * len(STEPS)
    small = {s: _srank(falling, s) for s in range(3)}
    std = {s: _srank(flat, 10 + s) for s in range(3)}
    short = c6.judge(small, std, STEPS, STEPS, expansion_min_steps=c6.EXPANSION_MIN_STEPS)
    assert short.effects[0].verdict == SUPPORTED and short.effects[1].verdict == NOT_SUPPORTED
    assert short.numbers["parts"] == [SUPPORTED, NOT_REACHED, NOT_REACHED] and short.verdict == NOT_REACHED
    assert any("not reached" in n for n in short.notes)
    long_steps = [10 * t for t in STEPS]
    long = c6.judge(small, std, long_steps, long_steps, expansion_min_steps=c6.EXPANSION_MIN_STEPS)
    assert long.verdict == NOT_SUPPORTED
    shown = c6.judge({s: _srank(rising, s) for s in range(3)}, std, STEPS, STEPS, expansion_min_steps=1000)
    assert shown.numbers["parts"][1] == SUPPORTED


def test_presets_say_where_claims_3_and_6_can_show():
    """On the preset definitions: claim 3 part (a) cannot show at the `cpu` preset's d 256 and can at `cpu-0.1b`'s
    d 768; claim 6's expansion cannot show from the 240-step `cpu` runs nor the 300-step `cpu-0.1b` runs."""
    assert not c3.can_show_saturation(c3.preset_width(PRESETS["cpu"].sizes["d256"]))[0]
    assert c3.can_show_saturation(c3.preset_width(CPU_01B.sizes[CPU_01B.main_size]))[0]
    for name in ("cpu", "cpu-0.1b"):
        p = PRESETS[name]
        steps = p.sizes[p.probe_size]["train.max_steps"]
        shows, why = c6.can_show_expansion(steps)
        assert not shows and f"step {steps}" in why
    assert c6.can_show_expansion(1562)[0]


def test_cpu_01b_shares_four_arms_among_claims_3_4_6():
    """The preset's claims read the four arms A–D (12 runs at 3 seeds), not one set of arms each."""
    from smallinit.experiments.plan import claim_arms, seeds_of_arm

    roles = claim_arms(CPU_01B)
    arms = {a for r in roles.values() for a in r.values()}
    assert {(a.gamma, a.eps, a.gate) for a in arms} == set(EARLY_ARMS.values()) and len(arms) == 4
    assert roles[3]["eps_large"].eps == 1e-5 and roles[3]["eps_small"].eps == 1e-12
    assert roles[3]["eps_large"].gate == roles[3]["eps_small"].gate == "none"
    assert (roles[6]["small"].gamma, roles[6]["std"].gamma) == (1.0, 0.5) and roles[6]["small"].eps == 1e-5
    assert all(seeds_of_arm(CPU_01B, a, roles) == 3 for a in arms)


def test_cpu_01b_trains_in_bf16_only_where_the_cpu_has_it(monkeypatch, tmp_path):
    """bf16 where the CPU has native bf16 (amx_bf16 / avx512_bf16), float32 on an AVX2-only CPU."""
    from smallinit.experiments.plan import lm_config

    a = c3.arms(CPU_01B)["eps_large"]
    monkeypatch.setenv("SMALLINIT_CPU_FLAGS", "avx2 fma")
    assert lm_config(CPU_01B, a, 6e-4, 0, tmp_path).train.dtype == "fp32"
    monkeypatch.setenv("SMALLINIT_CPU_FLAGS", "avx2 amx_bf16")
    cfg = lm_config(CPU_01B, a, 6e-4, 0, tmp_path)
    assert cfg.train.dtype == "bf16" and cfg.model.d_model == 768 and cfg.train.max_steps == 300


@pytest.mark.timeout(300)
def test_cpu_01b_builds_and_runs_two_steps_at_a_stand_in_size(tmp_path, token_dir):
    """The preset itself, at a tiny stand-in size for 2 steps (no 0.1b in tests): its 4 arms × 3 seeds train, and
    claims 3, 4 and 6 are judged from their probes (claim 6 not reached: 2 steps cannot show an expansion)."""
    import json

    from smallinit.experiments.reproduce import reproduce

    p = dataclasses.replace(
        CPU_01B,
        base={**CPU_01B.base, "model": {"preset": "tiny", "max_seq_len": 32}, "data": {**CPU_01B.base["data"]}},
        sizes={
            "0.1b": {
                "model.d_model": 32,
                "model.n_layers": 2,
                "model.n_heads": 2,
                "model.d_ff": 64,
                "train.max_steps": 2,
                "train.batch_size": 2,
                "data.seq_len": 32,
                "probe.every": 1,
            }
        },
        corpus={},
        gflops=5.0,
        inprocess=True,
    )
    p.base["data"]["seq_len"] = 32
    p.base["train"] = {**CPU_01B.base["train"], "batch_size": 2}
    out = tmp_path / "out"
    reproduce(p, out, token_dir, log=lambda s: None)
    claims = {c["id"]: c for c in json.loads((out / "claims.json").read_text())["claims"]}
    assert set(claims) >= {3, 4, 6}
    runs = sorted(d.name for d in (out / "runs").iterdir() if d.name.startswith("0.1b-"))
    assert len(runs) == 12, runs
    assert claims[6]["verdict"] in (NOT_REACHED, NOT_SUPPORTED, INCONCLUSIVE)


def test_gpu_01b_is_the_same_experiment_at_the_sizes_own_sequence_length():
    """`gpu-0.1b`: the same arms, seeds, rate, horizon and claims as `cpu-0.1b`, at T 2048 and 64 sequences a step."""
    from smallinit.experiments.plan import claim_arms, lm_config

    gpu = PRESETS["gpu-0.1b"]
    assert claim_arms(gpu) == claim_arms(CPU_01B) and gpu.seeds == CPU_01B.seeds and gpu.lrs == CPU_01B.lrs
    cfg = lm_config(gpu, c3.arms(gpu)["eps_large"], gpu.lrs[0], 0, "data")
    assert (cfg.data.seq_len, cfg.train.batch_size, cfg.train.max_steps, cfg.model.d_model) == (2048, 64, 300, 768)
    assert cfg.train.compile and cfg.model.max_seq_len == 2048
