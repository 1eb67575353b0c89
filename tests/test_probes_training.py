"""Training-time probes: hooks leave no trace, known answers on constructed models, the TrainingProbe
callback through real (tiny) runs, and the ``smallinit probe`` / ``smallinit plot`` verbs."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import tiny_overrides

from smallinit.model import ModelConfig, Transformer
from smallinit.probes import (
    attention_sink,
    compute_probes,
    heatmap_arrays,
    heatmap_steps,
    matrix_kind,
    named_matrices,
    optimizer_eps_damping,
    optimizer_eps_probes,
    stable_rank,
    uniform_sink_baseline,
)
from smallinit.probes.metrics import residual_flow
from smallinit.probes.plots import run_labels


def _model(**kw) -> Transformer:
    torch.manual_seed(0)
    base = dict(vocab_size=64, d_model=32, n_layers=2, n_heads=2, d_ff=64, max_seq_len=16)
    return Transformer(ModelConfig(**{**base, **kw}))


def _idx(B: int = 2, T: int = 12, V: int = 64, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


def _hook_count(model: torch.nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


# ---- compute_probes ------------------------------------------------------------------------------


@pytest.mark.parametrize("gate", ["none", "elementwise"])
def test_hooks_removed_and_forward_unchanged(gate):
    model = _model(gate=gate)
    idx = _idx()
    before = model(idx)
    seen = []
    mine = model.lm_head.register_forward_hook(lambda m, a, out: seen.append(out.detach().clone()))
    n_hooks = _hook_count(model)
    rec = compute_probes(model, idx)
    assert _hook_count(model) == n_hooks  # only our own hook is left
    mine.remove()
    assert _hook_count(model) == 0
    assert torch.equal(seen[0], before)  # the probed forward computed exactly the model's logits
    assert torch.equal(model(idx), before)  # and the model still does
    assert json.loads(json.dumps(rec, allow_nan=False)) == rec  # strict JSON


def test_hooks_removed_even_when_the_forward_fails():
    model = _model()
    with pytest.raises(IndexError):
        compute_probes(model, torch.full((1, 8), 10_000))  # token id outside the vocabulary
    assert _hook_count(model) == 0


def test_record_matches_direct_computation():
    model = _model(gate="headwise", tie_embeddings=False)
    idx = _idx(T=10)
    rec = compute_probes(model, idx, exact_srank=True)
    assert rec["T"] == 10 and rec["batch"] == 2
    assert rec["uniform_sink"] == pytest.approx(uniform_sink_baseline(10))
    with torch.no_grad():
        cos, sin = model.rope(10)
        h = model.tok_emb(idx)
        assert rec["emb_max_act"] == pytest.approx(float(h.abs().max()))
        for i, b in enumerate(model.blocks):
            lay = rec["layers"][i]
            x = b.attn_norm(h)
            ms = h.double().square().mean(-1)
            assert lay["attn_norm"]["saturation"] == pytest.approx(
                float((ms / (ms + b.attn_norm.eps)).mean()), rel=1e-9
            )
            assert lay["sink"] == pytest.approx(attention_sink(b.attn.attention_weights(x, cos, sin)), rel=1e-9)
            a = b.attn(x, cos, sin)
            assert lay["flow_attn"] == pytest.approx(residual_flow(a, h), rel=1e-9)
            h = h + a
            m = b.mlp(b.mlp_norm(h))
            assert lay["flow_mlp"] == pytest.approx(residual_flow(m, h), rel=1e-9)
            h = h + m
            assert lay["max_act"] == pytest.approx(float(h.abs().max()))
        ms = h.double().square().mean(-1)
        assert rec["final_norm"]["saturation"] == pytest.approx(float((ms / (ms + model.norm_f.eps)).mean()), rel=1e-9)
    names = set(rec["matrices"])
    assert {
        "blocks.0.attn.q",
        "blocks.0.attn.k",
        "blocks.0.attn.v",
        "blocks.0.attn.gate",
        "blocks.0.attn.o",
        "blocks.1.mlp.gate",
        "blocks.1.mlp.up",
        "blocks.1.mlp.down",
        "tok_emb",
        "lm_head",
    } <= names
    W = named_matrices(model)["blocks.1.mlp.down"]
    assert W.shape == (32, 64)
    assert rec["matrices"]["blocks.1.mlp.down"]["srank"] == pytest.approx(stable_rank(W), rel=1e-6)
    assert rec["matrices"]["blocks.1.mlp.down"]["d_in"] == 64


def test_tied_head_is_one_matrix():
    names = named_matrices(_model(tie_embeddings=True))
    assert "tok_emb" in names and "lm_head" not in names
    assert len([n for n in names if n.startswith("blocks.0.")]) == 8  # q k v gate o + gate up down


def test_sink_of_uniform_attention_is_the_baseline_and_a_forced_sink_is_found():
    model = _model()
    with torch.no_grad():
        for b in model.blocks:  # Q = 0: every score is 0, attention is uniform over the causal window
            b.attn.matrices()["q"].zero_()
    rec = compute_probes(model, _idx(T=12), weights=False)
    for lay in rec["layers"]:
        assert lay["sink"] == pytest.approx(uniform_sink_baseline(12), rel=1e-6)
    assert "matrices" not in rec
    # a constructed sink: token 0 is always token 7; every query looks for a feature only token 7 has.
    # Q and K use output channel 15, the slowest RoPE pair (angle <= 12 * 1.8e-4 rad here), so RoPE does not interfere.
    model = _model(n_heads=1)
    with torch.no_grad():
        emb = model.tok_emb.weight
        emb.normal_(0, 1e-4)
        emb[:, 1] = 0.5  # a shared feature: every query is large and positive along channel 15
        emb[7] = 0.0
        emb[7, 0] = 1.0  # only token 7 has feature 0: after the norm it is sqrt(32) there
        for b in model.blocks:
            q, k = b.attn.matrices()["q"], b.attn.matrices()["k"]
            q.zero_()
            k.zero_()
            q[15, 1] = 5.0
            k[15, 0] = 5.0
    idx = _idx(T=12)
    idx[idx == 7] = 8
    idx[:, 0] = 7
    rec = compute_probes(model, idx, weights=False)
    assert rec["layers"][0]["sink"] > 0.99
    idx[:, 0] = 8  # no token 7 in the window: no sink, scores are nearly equal
    rec = compute_probes(model, idx, weights=False)
    assert rec["layers"][0]["sink"] == pytest.approx(uniform_sink_baseline(12), rel=0.05)


def test_saturation_large_vs_tiny_eps_on_small_init():
    idx = _idx(T=12)
    # γ = 1, d = 32: embeddings have std 1/32, so ms ≈ 1e-3 at the first norm
    sats = {}
    for eps in (1e-12, 1e-2):
        rec = compute_probes(_model(gamma=1.0, norm_eps=eps), idx, weights=False)
        sats[eps] = rec["layers"][0]["attn_norm"]
        assert sats[eps]["eps"] == eps
        ms = sats[eps]["mean_square"]
        assert 2e-4 < ms < 5e-3
        assert sats[eps]["eps_over_ms"] > 0
    assert sats[1e-12]["saturation"] > 0.999999
    assert sats[1e-2]["saturation"] < 0.2  # ε swamps the signal
    assert sats[1e-2]["eps_over_ms"] > 2


def test_residual_flow_of_a_constructed_block_is_relative_to_the_stream():
    """A block whose branches have known outputs: every token is the same vector h = c·u (u = ±1, so rms 1),
    V = I and W_O = α·I make attention return α·norm(h) = α·u whatever the scores, so
    flow_attn = ||α u|| / ||c u|| = α / c (the raw branch norm would be α·√d). The MLP gets h' = (c + α)·u;
    with W_gate = W_up = W_down = I (d_ff = d) its output is silu(u) ⊙ u, entries σ(±1), so
    flow_mlp = sqrt((σ(1)² + σ(-1)²) / 2) / (c + α)."""
    d, c, alpha = 32, 2.0, 0.5
    model = _model(n_layers=1, d_model=d, d_ff=d, gate="none", norm_eps=1e-12)
    u = torch.ones(d)
    u[::2] = -1.0
    blk = model.blocks[0]
    with torch.no_grad():
        model.tok_emb.weight[5] = c * u
        mats = blk.attn.matrices()
        for k in ("q", "k", "v"):
            mats[k].zero_()
        mats["v"].copy_(torch.eye(d))
        mats["o"].copy_(alpha * torch.eye(d))
        for k, W in blk.mlp.matrices().items():
            W.copy_(torch.eye(d))
    rec = compute_probes(model, torch.full((2, 8), 5), weights=False)
    lay = rec["layers"][0]
    assert lay["flow_attn"] == pytest.approx(alpha / c, rel=1e-6)
    assert lay["flow_attn"] != pytest.approx(alpha * d**0.5, rel=0.1)  # not the raw norm
    sig = torch.sigmoid(torch.tensor([1.0, -1.0], dtype=torch.float64))
    assert lay["flow_mlp"] == pytest.approx(float(sig.square().mean().sqrt()) / (c + alpha), rel=1e-6)


def _one_adamw_step(model, eps=1e-8):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, eps=eps, fused=True)
    idx = _idx(T=12)
    torch.nn.functional.cross_entropy(model(idx).flatten(0, 1), idx.flatten()).backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    opt.step()
    return opt, grads


def test_optimizer_eps_probe_matches_the_first_gradient_of_each_matrix():
    """After one AdamW step sqrt(v̂) = |g|: the probe of each (fused, sliced, transposed) matrix view is the
    metric of that matrix's own gradient entries."""
    pytest.importorskip("smallinit.model.moe")
    model = _model(
        gamma=1.0, gate="elementwise", tie_embeddings=False, moe=dict(n_experts=4, top_k=2, d_expert=16, every=2)
    )
    assert optimizer_eps_probes(model, torch.optim.AdamW(model.parameters()))["matrices"] == {}  # no step yet
    opt, g = _one_adamw_step(model, eps=1e-3)  # a large ε so that every matrix has entries on both sides
    rec = optimizer_eps_probes(model, opt)
    assert rec["eps"] == 1e-3 and rec["t"] == 1 and rec["beta2"] == 0.999
    qkvg = g["blocks.0.attn.w_qkvg.weight"]  # rows: q (32), k (32), v (32), gate (32)
    gu = g["blocks.1.mlp.w_gate_up"]  # (E, d, 2·d_e), input-major
    expected = {
        "blocks.0.attn.k": qkvg[32:64],
        "blocks.0.attn.v": qkvg[64:96],
        "blocks.0.attn.gate": qkvg[96:],
        "blocks.0.mlp.down": g["blocks.0.mlp.w_down.weight"],
        "blocks.1.mlp.expert1.up": gu[1, :, 16:].T,
        "blocks.1.mlp.expert2.down": g["blocks.1.mlp.w_down"][2].T,
        "lm_head": g["lm_head.weight"],
    }
    for name, grad in expected.items():
        want = optimizer_eps_damping(grad.square() * (1 - 0.999), 1, 0.999, 1e-3)
        got = rec["matrices"][name]
        assert got["frac_below"] == pytest.approx(want["frac_below"], abs=1e-12), name
        assert got["damping"] == pytest.approx(want["damping"], rel=1e-5), name
    assert 0 < rec["matrices"]["blocks.0.attn.v"]["frac_below"] < 1
    # different slices of one fused parameter are different numbers
    assert rec["matrices"]["blocks.0.attn.k"]["damping"] != rec["matrices"]["blocks.0.attn.v"]["damping"]
    assert set(rec["matrices"]) == set(named_matrices(model))
    assert optimizer_eps_probes(model, torch.optim.SGD(model.parameters(), lr=0.1)) is None  # not Adam


def test_layernorm_saturation_uses_the_variance():
    model = _model(norm="layernorm", norm_eps=1e-3)
    idx = _idx()
    rec = compute_probes(model, idx, weights=False)
    with torch.no_grad():
        h = model.tok_emb(idx).double()
        var = (h - h.mean(-1, keepdim=True)).square().mean(-1)
    assert rec["layers"][0]["attn_norm"]["saturation"] == pytest.approx(float((var / (var + 1e-3)).mean()), rel=1e-6)


def test_moe_probes_include_router_experts_and_stats():
    pytest.importorskip("smallinit.model.moe")
    model = _model(moe=dict(n_experts=4, top_k=2, d_expert=32, every=2))
    idx = _idx()
    model(idx)
    moe = model.blocks[1].mlp
    aux_before, stats_before = moe.aux_loss, moe.last_stats
    rec = compute_probes(model, idx)
    assert moe.aux_loss is aux_before and moe.last_stats is stats_before  # restored
    assert "blocks.1.mlp.router" in rec["matrices"]
    assert "blocks.1.mlp.expert3.down" in rec["matrices"]
    assert "blocks.0.mlp.up" in rec["matrices"]  # dense layer
    assert matrix_kind("blocks.1.mlp.expert3.down") == "mlp.expert.down"
    frac = rec["moe"]["layers"]["blocks.1.mlp"]["expert_fraction"]
    assert sum(frac) == pytest.approx(1.0)
    assert rec["layers"][1]["flow_mlp"] > 0


def test_matrix_kind_and_heatmap_steps():
    assert matrix_kind("blocks.3.attn.q") == "attn.q"
    assert matrix_kind("tok_emb") == "tok_emb"
    assert heatmap_steps(10) == [0, 1, 2, 4, 8, 10]
    assert heatmap_steps(8) == [0, 1, 2, 4, 8]
    assert heatmap_steps(1) == [0, 1]


def test_heatmap_arrays_subsample_fixed_rows():
    W = torch.randn(300, 16, generator=torch.Generator().manual_seed(0))
    W[:150] += 3 * torch.randn(16, generator=torch.Generator().manual_seed(1))  # one aligned block
    a, b = heatmap_arrays(W), heatmap_arrays(W * 2)
    assert a["cos"].shape == (256, 256) and a["cos"].dtype == np.float16
    assert np.array_equal(a["rows"], b["rows"]) and len(set(a["rows"].tolist())) == 256
    assert sorted(a["order"].tolist()) == list(range(256))
    C = a["cos"].astype(np.float32)
    assert np.allclose(np.diag(C), 1.0, atol=1e-3)
    ordered = C[np.ix_(a["order"], a["order"])]
    n_block = int((a["rows"] < 150).sum())
    blk = a["order"][:n_block] if a["rows"][a["order"][0]] < 150 else a["order"][-n_block:]
    assert (a["rows"][blk] < 150).mean() > 0.95  # the aligned rows end up together
    assert ordered.shape == (256, 256)


def test_run_labels_from_config_differences():
    a = {
        "model": {"gamma": 1.0, "gate": "elementwise", "moe": {"every": 1}},
        "probe": {"every": 5},
        "train": {"progress": True},
    }
    b = {
        "model": {"gamma": 0.5, "gate": "none", "moe": {"every": 1}},
        "probe": {"every": 5},
        "train": {"progress": False},
    }
    assert run_labels([a, b]) == ["gamma=1, gate=elementwise", "gamma=0.5, gate=none"]
    c = {"model": {"gamma": 1.0, "gate": "elementwise", "moe": {"every": 2}}, "probe": {"every": 10}, "train": {}}
    assert run_labels([a, c]) == ["model.moe.every=1, probe.every=5", "model.moe.every=2, probe.every=10"]
    assert run_labels([a, a], ["x", "y"]) == ["x", "y"]


def test_probe_callbacks_and_attach_wire_the_probe_only_when_on():
    """The one wiring of a run's probe config to its callback: none at every = 0; one TrainingProbe with the config's
    settings otherwise; ``attach`` appends it to a built trainer's callbacks (default: the trainer's own config)."""
    from types import SimpleNamespace

    from smallinit.config import ProbeConfig
    from smallinit.probes.training import TrainingProbe, attach, probe_callbacks

    assert probe_callbacks(ProbeConfig(every=0)) == []
    (cb,) = probe_callbacks(ProbeConfig(every=7, batch_size=3))
    assert isinstance(cb, TrainingProbe) and (cb.every, cb.batch_size) == (7, 3)
    other = object()
    off = SimpleNamespace(cfg=SimpleNamespace(probe=ProbeConfig(every=0)), callbacks=[other])
    assert attach(off) is None and off.callbacks == [other]
    on = SimpleNamespace(cfg=SimpleNamespace(probe=ProbeConfig(every=5)), callbacks=[other])
    got = attach(on)
    assert on.callbacks == [other, got] and got.every == 5
    assert attach(off, ProbeConfig(every=2)).every == 2 and len(off.callbacks) == 2


# ---- the callback through real runs --------------------------------------------------------------


def _train(token_dir: Path, out: Path, **extra):
    from smallinit.probes import TrainingProbe
    from smallinit.train import load_config
    from smallinit.train.loop import Trainer

    cfg = load_config(
        "tiny",
        tiny_overrides(
            token_dir,
            **{"train.max_steps": 10, "probe.every": 5, "train.log_every": 3, "train.eval_every": 10, **extra},
        ),
    )
    probe = TrainingProbe(cfg.probe)
    Trainer(cfg, out, callbacks=[probe]).run()
    return probe


@pytest.fixture(scope="module")
def runs(token_dir, tmp_path_factory):
    """Two 10-step tiny runs (γ = 1 and γ = 0.5) with probes every 5 steps."""
    root = tmp_path_factory.mktemp("probe_runs")
    _train(token_dir, root / "g1", **{"model.gamma": 1.0})
    _train(token_dir, root / "g05", **{"model.gamma": 0.5})
    return root / "g1", root / "g05"


def _lines(run: Path) -> list[dict]:
    return [json.loads(l) for l in (run / "probes.jsonl").read_text().splitlines()]


def test_training_probe_writes_lines_at_the_right_steps(runs):
    run = runs[0]
    recs = _lines(run)
    assert [r["step"] for r in recs] == [
        0,
        1,
        2,
        5,
        10,
    ]  # the early steps below every=5, then every 5; log_every=3 does not matter
    for r in recs:
        assert len(r["layers"]) == 2 and "blocks.0.attn.q" in r["matrices"]
        assert r["tokens"] == r["step"] * 4 * 32
    # step 0 is the γ = 1 initialization: stable rank of a fresh random matrix, sink near uniform
    assert recs[0]["matrices"]["blocks.0.attn.q"]["srank"] > 2
    assert recs[-1]["matrices"]["blocks.0.attn.q"] != recs[0]["matrices"]["blocks.0.attn.q"]  # weights moved
    # the probe at step 10 saw the final weights: recompute from the final checkpoint
    from smallinit.runs.checkpoint import load_checkpoint

    W = named_matrices(load_checkpoint(run, step=10))["blocks.0.mlp.down"]
    assert recs[-1]["matrices"]["blocks.0.mlp.down"]["srank"] == pytest.approx(stable_rank(W, exact=False), rel=1e-6)


def test_training_probe_logs_the_optimizer_eps(runs):
    """At step s the record holds the second moment the s-th update used: t = s, one entry per matrix; none at 0."""
    for run in runs:
        recs = _lines(run)
        assert recs[0]["optim_eps"] == {"eps": 1e-8, "beta2": 0.95, "t": 0, "matrices": {}}
        for r in recs[1:]:
            oe = r["optim_eps"]
            assert oe["t"] == r["step"] and oe["eps"] == 1e-8
            assert set(oe["matrices"]) == set(r["matrices"])
            for m in oe["matrices"].values():
                assert set(m) == {"frac_below", "damping", "frac_zero", "median_sqrt_v"}
                assert 0 <= m["frac_below"] <= 1 and 0 <= m["damping"] <= 1
    # the probe read the live optimizer: recompute step 10 from the checkpointed AdamW state
    from smallinit.runs.checkpoint import read_checkpoint, resolve_checkpoint

    osd = read_checkpoint(resolve_checkpoint(runs[0], 10))["optim"]["optimizer"]
    st = osd["state"]["blocks.0.mlp.w_down.weight"]
    assert float(st["step"]) == 10
    want = optimizer_eps_damping(st["exp_avg_sq"], 10, 0.95, 1e-8)
    got = _lines(runs[0])[-1]["optim_eps"]["matrices"]["blocks.0.mlp.down"]
    assert got["damping"] == pytest.approx(want["damping"], rel=1e-9)
    assert got["median_sqrt_v"] == pytest.approx(want["median_sqrt_v"], rel=1e-9)


def test_tiny_optimizer_eps_stays_finite_at_gamma_1(token_dir, tmp_path):
    """optim.eps = 1e-16 at γ = 1 (entries with v̂ ≈ 0 divide by ~1e-16): losses, weights and probes stay finite."""
    from smallinit.runs.checkpoint import load_checkpoint

    run = tmp_path / "eps16"
    _train(token_dir, run, **{"model.gamma": 1.0, "optim.eps": 1e-16, "probe.every": 10})
    metrics = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]
    assert metrics and all(np.isfinite(m["loss"]) for m in metrics)
    assert np.isfinite([m["val_loss"] for m in metrics if "val_loss" in m]).all()
    model = load_checkpoint(run, step=10)
    assert all(torch.isfinite(p).all() for p in model.parameters())
    last = _lines(run)[-1]["optim_eps"]
    assert last["eps"] == 1e-16 and last["t"] == 10
    # with ε = 1e-16 only never-updated entries (unseen embedding rows) remain "damped"
    for name, m in last["matrices"].items():
        if name != "tok_emb":
            assert m["damping"] < 1e-3, name


def test_training_probe_heatmaps(runs):
    from smallinit.probes import read_heatmaps

    h = read_heatmaps(runs[0])
    assert sorted(h) == [0, 1, 2, 4, 8, 10]
    for per in h.values():
        assert set(per) == {"blocks.0.attn.q", "blocks.0.mlp.up"}
        assert per["blocks.0.attn.q"]["cos"].shape == (32, 32)
        assert per["blocks.0.mlp.up"]["cos"].shape == (64, 64)
    assert not np.array_equal(h[0]["blocks.0.attn.q"]["cos"], h[10]["blocks.0.attn.q"]["cos"])


def test_resume_drops_later_probe_lines_and_rewrites_them(runs, tmp_path, token_dir):
    from smallinit.probes import TrainingProbe
    from smallinit.train.loop import resume

    run = tmp_path / "r"
    shutil.copytree(runs[0], run)
    original = _lines(run)
    shutil.rmtree(run / "checkpoints" / "step_00000010")  # a crash after step 10's probe, before its checkpoint
    (run / "summary.json").unlink()
    import yaml

    from smallinit.config import config_from_dict

    probe_cfg = config_from_dict(yaml.safe_load((run / "config.yaml").read_text())).probe
    resume(run, callbacks=[TrainingProbe(probe_cfg)])
    again = _lines(run)
    assert [r["step"] for r in again] == [0, 1, 2, 5, 10]
    for a, b in zip(original, again):
        assert b["matrices"]["blocks.0.attn.q"]["srank"] == pytest.approx(
            a["matrices"]["blocks.0.attn.q"]["srank"], rel=1e-5
        )
        assert b["layers"][1]["sink"] == pytest.approx(a["layers"][1]["sink"], rel=1e-5)
    assert sorted(int(p.stem[5:]) for p in (run / "heatmaps").glob("step_*.npz")) == [0, 1, 2, 4, 8, 10]


def test_early_probes_are_log_spaced_below_the_uniform_schedule(token_dir, tmp_path):
    """Issue 35: with probe.every = 100 a real run probes ≥ 4 steps between 0 and 100 (1, 2, 5, 10, 20, 50): the first
    updates, where a σ = 1/d matrix condenses, are seen; ``early=False`` gives the uniform schedule alone."""
    from smallinit.probes import TrainingProbe, early_probe_steps
    from smallinit.train import load_config
    from smallinit.train.loop import Trainer

    assert early_probe_steps(100) == [1, 2, 5, 10, 20, 50]
    assert early_probe_steps(1000)[-3:] == [100, 200, 500] and early_probe_steps(2) == [1]
    assert early_probe_steps(0) == [] and early_probe_steps(1) == []
    cfg = load_config(
        "tiny",
        tiny_overrides(
            token_dir,
            **{
                "train.max_steps": 60,
                "probe.every": 100,
                "probe.heatmaps": "[]",
                "train.eval_every": 60,
                "train.ckpt_every": 60,
                "train.log_every": 20,
            },
        ),
    )
    Trainer(cfg, tmp_path / "run", callbacks=[TrainingProbe(cfg.probe)]).run()
    steps = [r["step"] for r in _lines(tmp_path / "run")]
    assert steps == [0, 1, 2, 5, 10, 20, 50, 60]  # 60: the last step
    assert len([s for s in steps if 0 < s < 100]) >= 4
    off = TrainingProbe(cfg.probe, early=False)
    assert [s for s in range(61) if off._due(s, 60)[0]] == [0, 60]


def test_unknown_heatmap_matrix_is_a_config_error(token_dir, tmp_path):
    from smallinit.core.errors import ConfigError

    with pytest.raises(ConfigError, match="probe.heatmaps"):
        _train(token_dir, tmp_path / "bad", **{"probe.heatmaps": "[blocks.0.attn.nope]", "train.max_steps": 1})


# ---- the verbs -----------------------------------------------------------------------------------


def test_probe_cli_writes_json_and_prints_a_table(runs, tmp_path, capsys):
    from smallinit.cli import main

    out = tmp_path / "p.json"
    assert main(["probe", str(runs[0]), "--ckpt", "5", "--out", str(out)]) == 0
    rec = json.loads(out.read_text())
    assert rec["step"] == 5
    at5 = next(r for r in _lines(runs[0]) if r["step"] == 5)
    assert rec["matrices"]["blocks.0.attn.q"]["srank"] == pytest.approx(
        at5["matrices"]["blocks.0.attn.q"]["srank"], rel=1e-6
    )  # same weights, same number
    assert rec["layers"][0]["sink"] == pytest.approx(at5["layers"][0]["sink"], rel=1e-5)
    text = capsys.readouterr().out
    assert "sink" in text and "attn.q" in text and str(out) in text
    # default output path, latest checkpoint
    assert main(["probe", str(runs[0])]) == 0
    assert (runs[0] / "probe_step_00000010.json").is_file()


def test_probe_cli_errors(runs, tmp_path, capsys):
    from smallinit.cli import main

    assert main(["probe", str(runs[0]), "--data", str(tmp_path)]) == 2
    assert f"{tmp_path}: not a prepared data directory (no meta.json; --data)" in capsys.readouterr().err
    assert main(["probe", str(runs[0]), "--ckpt", "7"]) == 2
    assert "no checkpoint at step 7" in capsys.readouterr().err


def test_plot_cli_writes_pngs_and_index(runs, tmp_path):
    from smallinit.cli import main

    out = tmp_path / "plots"
    assert main(["plot", str(runs[0]), str(runs[1]), "--out", str(out)]) == 0
    html = (out / "index.html").read_text()
    srcs = re.findall(r"<img src='([^']+)'", html)
    for name in (
        "loss.png",
        "srank.png",
        "condensation.png",
        "sink.png",
        "saturation.png",
        "flow.png",
        "optim_eps.png",
        "heatmaps_blocks.0.attn.q.png",
        "heatmaps_blocks.0.mlp.up.png",
    ):
        assert name in srcs
    for s in srcs:
        assert not Path(s).is_absolute()
        p = out / s
        assert p.is_file() and p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "gamma=1" in html and "gamma=0.5" in html  # labelled by the config difference


def test_plot_cli_rejects_a_non_run(tmp_path, capsys):
    from smallinit.cli import main

    assert main(["plot", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "not a run directory" in capsys.readouterr().err


def test_plot_of_a_run_without_probes_shows_its_loss(runs, tmp_path):
    from smallinit.probes.plots import make_report

    bare = tmp_path / "bare"
    bare.mkdir()
    for f in ("config.yaml", "metrics.jsonl"):
        shutil.copy(runs[0] / f, bare / f)
    index = make_report([bare], tmp_path / "out")
    srcs = re.findall(r"<img src='([^']+)'", index.read_text())
    assert srcs == ["loss.png"] and (tmp_path / "out" / "loss.png").is_file()
