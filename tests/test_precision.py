"""train.dtype=auto (smallinit.train.precision): bf16 only where the device has native bf16 and a measurement at the
run's shape says it is faster; cached; decided once per run and kept on resume. Every machine fact is faked here (the
conftest gives every test an AVX2-only CPU); no assertion is about timings."""

from __future__ import annotations

import json
import os

import pytest
import torch
import yaml

from smallinit.train import precision as P

AVX2 = frozenset("fpu sse2 avx fma avx2".split())
AVX512_BF16 = AVX2 | {"avx512f", "avx512_bf16"}
AMX = AVX2 | {"amx_tile", "amx_bf16"}


def never():
    raise AssertionError("measured, but nothing should have been measured")


class Counter:
    def __init__(self, fp32_s: float, bf16_s: float):
        self.calls, self.times = 0, (fp32_s, bf16_s)

    def __call__(self):
        self.calls += 1
        return self.times


@pytest.mark.parametrize("flags", [AVX512_BF16, AMX], ids=["avx512_bf16", "amx_bf16"])
def test_auto_chooses_bf16_with_native_flags_when_the_measurement_says_faster(flags, tmp_path):
    m = Counter(0.30, 0.20)
    d = P.decide(
        "auto", "cpu", flags=flags, measure=m, key="k", cache_file=tmp_path / "dtype.json", shape_text="B 4 × T 32"
    )
    assert (d.dtype, d.setting, m.calls, d.cached) == ("bf16", "auto", 1, False)
    assert ("amx_bf16" if "amx_bf16" in flags else "avx512_bf16") in d.reason and "measured now" in d.reason
    assert d.line().startswith("dtype: bf16 (auto: CPU has ")


def test_auto_is_fp32_without_native_bf16_and_measures_nothing(tmp_path):
    d = P.decide("auto", "cpu", flags=AVX2, measure=never, key="k", cache_file=tmp_path / "dtype.json")
    assert d.dtype == "fp32" and "no native bf16" in d.reason and not (tmp_path / "dtype.json").exists()
    assert P.decide("auto", "cuda", cuda_bf16=False, measure=never).dtype == "fp32"
    assert P.decide("auto", "mps", flags=AMX, measure=never).dtype == "fp32"
    # the glue reads the (faked) flags of this CPU: AVX2 only → fp32, no model built, no cache touched
    from smallinit.model import ModelConfig

    cfg = ModelConfig(vocab_size=64, d_model=32, n_layers=1, n_heads=2, max_seq_len=16)
    assert P.resolve("auto", cfg, 2, 16, "cpu", measure=never).dtype == "fp32"


@pytest.mark.parametrize("times", [(0.30, 0.40), (0.30, 0.30), (0.30, 0.29)], ids=["slower", "equal", "within-5%"])
def test_auto_is_fp32_when_bf16_is_not_clearly_faster(times, tmp_path):
    d = P.decide("auto", "cpu", flags=AMX, measure=Counter(*times), key="k", cache_file=tmp_path / "dtype.json")
    assert d.dtype == "fp32" and "below the ×1.05 needed" in d.reason
    assert P.choose(1.0, 1 / 1.06) == "bf16" and P.choose(1.0, 1.0) == "fp32"


def test_the_cache_is_used_on_a_second_call(tmp_path):
    path = tmp_path / "sub" / "dtype.json"
    m = Counter(0.30, 0.20)
    first = P.decide("auto", "cpu", flags=AMX, measure=m, key="k1", cache_file=path, info={"shape": {"batch": 4}})
    second = P.decide("auto", "cpu", flags=AMX, measure=m, key="k1", cache_file=path)
    assert m.calls == 1 and (first.dtype, second.dtype) == ("bf16", "bf16") and second.cached and not first.cached
    assert "cached, measured" in second.reason
    entry = json.loads(path.read_text())["k1"]
    assert entry["fp32_s"] == 0.30 and entry["bf16_s"] == 0.20 and entry["shape"] == {"batch": 4}
    # another shape is another entry (measured), the first is kept
    P.decide("auto", "cpu", flags=AMX, measure=Counter(0.3, 0.4), key="k2", cache_file=path)
    assert set(json.loads(path.read_text())) == {"k1", "k2"}
    # a damaged cache is measured again, not an error
    path.write_text("{not json")
    assert P.decide("auto", "cpu", flags=AMX, measure=m, key="k1", cache_file=path).dtype == "bf16" and m.calls == 2


def test_resolve_keys_the_cache_by_machine_and_shape(tmp_path, monkeypatch):
    from smallinit.model import ModelConfig

    monkeypatch.setenv("SMALLINIT_CACHE", str(tmp_path / "c"))
    monkeypatch.setenv("SMALLINIT_CPU_FLAGS", " ".join(AMX))
    cfg = ModelConfig(vocab_size=64, d_model=32, n_layers=1, n_heads=2, max_seq_len=16, gamma=1.0)
    m = Counter(0.3, 0.2)
    assert P.resolve("auto", cfg, 2, 16, "cpu", measure=m).dtype == "bf16"
    other_init = ModelConfig(
        vocab_size=64, d_model=32, n_layers=1, n_heads=2, max_seq_len=16, gamma=0.5, gate="none", norm_eps=1e-5
    )
    assert P.resolve("auto", other_init, 2, 16, "cpu", measure=m).cached and m.calls == 1  # arms share a decision
    assert not P.resolve("auto", cfg, 4, 16, "cpu", measure=m).cached and m.calls == 2  # another micro-batch
    assert (tmp_path / "c" / "dtype.json").is_file()
    monkeypatch.setenv("SMALLINIT_CPU_FLAGS", " ".join(AMX | {"avx512f"}))  # another machine
    assert not P.resolve("auto", cfg, 2, 16, "cpu", measure=m).cached and m.calls == 3


def test_cache_dir_honours_smallinit_cache_then_xdg(tmp_path, monkeypatch):
    monkeypatch.delenv("SMALLINIT_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert P.cache_path() == tmp_path / "xdg" / "smallinit" / "dtype.json"
    monkeypatch.setenv("SMALLINIT_CACHE", str(tmp_path / "own"))
    assert P.cache_path() == tmp_path / "own" / "dtype.json"


def test_explicit_values_and_the_config_field():
    from smallinit.core.errors import ConfigError
    from smallinit.train import load_config

    assert P.decide("bf16", "cpu", flags=AVX2, measure=never).dtype == "bf16"  # forced, even without native bf16
    assert P.decide("fp32", "cpu", flags=AMX, measure=never).dtype == "fp32"
    assert load_config("tiny").train.dtype == "auto"
    for v in ("auto", "fp32", "bf16"):
        assert load_config("tiny", [f"train.dtype={v}"]).train.dtype == v
    with pytest.raises(ConfigError, match="train.dtype: unknown value 'fp16'"):
        load_config("tiny", ["train.dtype=fp16"])


def test_cpu_flags_come_from_cpuinfo_or_the_override(tmp_path, monkeypatch):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: Fake CPU\nflags\t\t: fpu avx2 amx_bf16 amx_tile\n\nprocessor\t: 1\n")
    monkeypatch.delenv("SMALLINIT_CPU_FLAGS", raising=False)
    assert P.cpu_flags(str(info)) == {"fpu", "avx2", "amx_bf16", "amx_tile"} and P.cpu_model(str(info)) == "Fake CPU"
    assert P.cpu_flags(str(tmp_path / "missing")) == frozenset()
    monkeypatch.setenv("SMALLINIT_CPU_FLAGS", "avx2 fma")
    assert P.cpu_flags(str(info)) == {"avx2", "fma"}
    assert P.native_bf16("cuda", cuda_bf16=True)[0] and not P.native_bf16("cpu", {"avx512f"})[0]


def test_the_measurement_runs_both_dtypes_and_leaves_the_rng_alone():
    from smallinit.model import ModelConfig

    cfg = ModelConfig(vocab_size=64, d_model=32, n_layers=1, n_heads=2, d_ff=64, max_seq_len=16)
    torch.manual_seed(123)
    state = torch.get_rng_state()
    fp32_s, bf16_s = P.measure_step_seconds(cfg, 2, 16, "cpu", steps=1)
    assert fp32_s > 0 and bf16_s > 0 and torch.equal(torch.get_rng_state(), state)


def _fake_bf16_machine(monkeypatch, tmp_path, faster: bool = True) -> Counter:
    m = Counter(0.3, 0.2) if faster else Counter(0.3, 0.4)
    monkeypatch.setenv("SMALLINIT_CPU_FLAGS", " ".join(AMX))
    monkeypatch.setenv("SMALLINIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(P, "measure_step_seconds", lambda *a, **k: m())
    return m


def _losses(run):
    return {r["step"]: r["loss"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())}


def test_a_run_records_its_decision_and_a_resumed_run_keeps_it(tiny_cfg, tmp_path, monkeypatch, capsys):
    from smallinit.train import resume, train

    m = _fake_bf16_machine(monkeypatch, tmp_path)
    over = {"train.max_steps": 8, "train.ckpt_every": 3, "optim.schedule": "constant", "train.eval_every": 4}
    full = tmp_path / "full"
    s = train(tiny_cfg(**over), full)
    assert s["dtype"] == "bf16" and "auto: CPU has amx_bf16" in s["dtype_reason"] and m.calls == 1
    assert yaml.safe_load((full / "config.yaml").read_text())["train"]["dtype"] == "bf16"
    assert json.loads((full / "origin.json").read_text())["dtype"]["dtype"] == "bf16"
    assert (
        "dtype: bf16 (auto: CPU has amx_bf16; a forward+backward step at B 4 × T 32 took 200 ms in bf16 "
        "autocast vs 300 ms in fp32, bf16 ×1.50 faster (measured now at load 0.00/core))" in capsys.readouterr().err
    )

    class Crash:
        def on_step_end(self, trainer, step, record):
            if step == 5:
                raise RuntimeError("simulated crash")

    part = tmp_path / "part"
    with pytest.raises(RuntimeError, match="simulated crash"):
        train(tiny_cfg(**over), part, callbacks=[Crash()])
    assert m.calls == 1  # the second run of the shape read the cache
    # the machine now looks AVX2-only and any measurement fails: the resumed run must not decide again
    monkeypatch.setenv("SMALLINIT_CPU_FLAGS", " ".join(AVX2))
    monkeypatch.setattr(P, "measure_step_seconds", lambda *a, **k: never())
    capsys.readouterr()
    s2 = resume(part)
    assert s2["dtype"] == "bf16" and s2["dtype_reason"].startswith(
        "kept from the run's config.yaml; at its start: auto"
    )
    assert "dtype: bf16 (kept from the run's config.yaml" in capsys.readouterr().err
    assert _losses(full) == _losses(part)  # exact: the same dtype before and after the resume


def test_a_branch_whose_config_says_auto_takes_its_checkpoints_dtype(tiny_cfg, tmp_path, monkeypatch):
    """A cooldown branch is laid out with the plan's config ("auto") beside a copy of the trunk's checkpoint: it
    resumes in the trunk's dtype whatever this machine would decide now."""
    from smallinit.train import resume, train

    _fake_bf16_machine(monkeypatch, tmp_path)
    run = tmp_path / "r"
    train(tiny_cfg(**{"train.max_steps": 4, "train.ckpt_every": 2}), run)
    raw = yaml.safe_load((run / "config.yaml").read_text())
    raw["train"]["dtype"], raw["train"]["max_steps"] = "auto", 6
    (run / "config.yaml").write_text(yaml.safe_dump(raw))
    (run / "summary.json").unlink()
    monkeypatch.setenv("SMALLINIT_CPU_FLAGS", " ".join(AVX2))
    monkeypatch.setattr(P, "measure_step_seconds", lambda *a, **k: never())
    s = resume(run)
    assert s["dtype"] == "bf16" and "checkpoint step_00000004" in s["dtype_reason"]
    assert yaml.safe_load((run / "config.yaml").read_text())["train"]["dtype"] == "bf16"


def test_auto_gives_fp32_when_bf16_measured_slower_in_a_run(tiny_cfg, tmp_path, monkeypatch):
    from smallinit.train import train

    _fake_bf16_machine(monkeypatch, tmp_path, faster=False)
    s = train(tiny_cfg(**{"train.max_steps": 2}), tmp_path / "r")
    assert s["dtype"] == "fp32" and "below the ×1.05 needed" in s["dtype_reason"]


def test_a_wanted_auto_matches_the_dtype_a_run_decided():
    from smallinit.runs.rundir import config_mismatch
    from smallinit.train import load_config

    have = load_config("tiny", ["train.dtype=bf16"]).to_dict()
    assert config_mismatch(have, load_config("tiny").to_dict()) == {}
    assert "train.dtype" in config_mismatch(have, load_config("tiny", ["train.dtype=fp32"]).to_dict())


def test_the_time_estimate_is_measured_in_the_runs_dtype(tiny_cfg, tmp_path, monkeypatch):
    from smallinit.experiments.cost import measure_gflops

    cfg = tiny_cfg()
    g = measure_gflops(cfg, steps=1, threads=1)  # conftest's AVX2-only CPU: auto → fp32
    assert isinstance(g, float) and g > 0 and g.dtype == "fp32"
    m = _fake_bf16_machine(monkeypatch, tmp_path)
    g = measure_gflops(cfg, steps=1, threads=1)
    assert g.dtype == "bf16" and m.calls == 1 and f"{g:.1f}"
    assert measure_gflops(cfg, steps=1, threads=1, dtype="fp32").dtype == "fp32"
    assert measure_gflops(steps=1, threads=1).dtype == "fp32"  # no config: the tiny shape in float32, as before
    import pickle

    assert pickle.loads(pickle.dumps(g)).dtype == "bf16"


def _parity_losses(shift_baseline: float, shift_paper: float, seeds: int = 3, noise: float = 0.01, jitter=0.001):
    """Final losses per arm × dtype × seed: a per-seed level shared by both dtypes (the init draw and batches), the
    paper arm 0.02 ahead, bf16 adding a per-arm shift and a little per-run jitter."""
    import numpy as np

    rng = np.random.default_rng(0)
    out = {}
    for arm, ahead, shift in (("baseline", 0.0, shift_baseline), ("paper", 0.02, shift_paper)):
        level = rng.normal(0, noise, seeds)  # this arm's init draw per seed, the same in both dtypes
        out[arm] = {
            "fp32": {s: 1.5 - ahead + level[s] + rng.normal(0, jitter) for s in range(seeds)},
            "bf16": {s: 1.5 - ahead + shift + level[s] + rng.normal(0, jitter) for s in range(seeds)},
        }
    return out


def test_bf16_that_moves_only_one_arm_keeps_claim_runs_in_fp32():
    from smallinit.train.precision_parity import loss_parity

    res = loss_parity(_parity_losses(0.0, 0.03), "baseline", "paper")  # bf16 costs the small-init arm 0.03 nats
    assert res["decision"] == "fp32 for claim runs"
    assert res["gap_change"]["hi"] < 0 and res["per_arm"]["paper"]["lo"] > 0
    assert res["gap_change"]["value"] == pytest.approx(-0.03, abs=0.005)


def test_bf16_that_shifts_both_arms_alike_may_decide_claims():
    from smallinit.train.precision_parity import loss_parity

    res = loss_parity(_parity_losses(0.01, 0.01), "baseline", "paper")
    assert res["decision"] == "bf16 may decide claims"
    assert res["gap_change"]["lo"] <= 0 <= res["gap_change"]["hi"]
    assert res["per_arm"]["baseline"]["lo"] > 0  # both arms moved, the gap did not


def test_bf16_parity_too_noisy_to_tell_is_not_resolved():
    from smallinit.train.precision_parity import loss_parity

    res = loss_parity(_parity_losses(0.0, 0.0, noise=0.002, jitter=0.02), "baseline", "paper")
    assert res["gap_change"]["lo"] <= 0 <= res["gap_change"]["hi"]  # no shift found, but no power either
    assert res["decision"] == "not resolved"


def test_parity_needs_two_seeds_in_every_cell():
    from smallinit.train.precision_parity import loss_parity

    one = _parity_losses(0.0, 0.0, seeds=1)
    assert loss_parity(one, "baseline", "paper")["decision"] == "not measured"
    del one["paper"]["bf16"]
    with pytest.raises(ValueError, match="no bf16 losses"):
        loss_parity(one, "baseline", "paper")


def test_a_cache_entry_measured_under_load_is_measured_again_on_a_quiet_machine(tmp_path):
    """Issue #45 (2): the cache said "bf16 ×1.16 faster", measured while other work ran. The load per core is now
    recorded with every measurement and named in the reason; an entry taken above LOADED is used while the machine
    is still busy, and measured again (and replaced) once it is quiet."""
    path = tmp_path / "dtype.json"
    busy = P.decide("auto", "cpu", flags=AMX, measure=Counter(0.30, 0.26), key="k", cache_file=path, load=lambda: 1.4)
    assert busy.dtype == "bf16" and "at load 1.40/core (busy)" in busy.reason
    assert json.loads(path.read_text())["k"]["load_per_core"] == 1.4
    m = Counter(0.30, 0.40)
    still_busy = P.decide("auto", "cpu", flags=AMX, measure=m, key="k", cache_file=path, load=lambda: 1.2)
    assert still_busy.cached and m.calls == 0  # nothing better to measure on
    quiet = P.decide("auto", "cpu", flags=AMX, measure=m, key="k", cache_file=path, load=lambda: 0.1)
    assert not quiet.cached and m.calls == 1 and quiet.dtype == "fp32" and "at load 0.10/core" in quiet.reason
    assert json.loads(path.read_text())["k"]["load_per_core"] == 0.1  # the quiet figure replaces the busy one
    again = P.decide("auto", "cpu", flags=AMX, measure=m, key="k", cache_file=path, load=lambda: 0.1)
    assert again.cached and m.calls == 1


def _rank_decides(rank: int, world: int, init: str, out: str) -> None:
    """One rank of a gloo job: rank 0 measures bf16 faster, rank 1 slower; each writes the dtype it got."""
    import torch.distributed as dist

    from smallinit.train import precision

    os.environ["SMALLINIT_CPU_FLAGS"] = " ".join(AMX)
    os.environ["SMALLINIT_CACHE"] = os.path.join(out, f"cache{rank}")
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        from types import SimpleNamespace

        from smallinit.model import ModelConfig

        cfg = SimpleNamespace(
            model=ModelConfig(vocab_size=64, d_model=32, n_layers=1, n_heads=2, max_seq_len=16),
            train=SimpleNamespace(dtype="auto"),
            data=SimpleNamespace(seq_len=16),
        )
        times = (0.3, 0.2) if rank == 0 else (0.2, 0.3)
        d = precision.for_run(cfg, "cpu", 2, out, resume=False, measure=lambda: times)
        with open(os.path.join(out, f"rank{rank}.txt"), "w") as f:
            f.write(d.dtype + "\n" + d.reason)
    finally:
        dist.destroy_process_group()


def test_every_rank_of_one_job_takes_rank_0s_decision(tmp_path):
    """Two processes of one job measured differently (the single-vs-DDP run differed by 1.6e-4 in loss): under
    torch.distributed rank 0 measures and every rank trains in its dtype."""
    import torch.multiprocessing as mp

    init = f"file://{tmp_path / 'rendezvous'}"
    mp.start_processes(_rank_decides, args=(2, init, str(tmp_path)), nprocs=2, join=True, start_method="spawn")
    got = [(tmp_path / f"rank{r}.txt").read_text().splitlines() for r in (0, 1)]
    assert got[0][0] == got[1][0] == "bf16" and got[0][1] == got[1][1]
