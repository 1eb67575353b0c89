"""Run config: named configs, dotted overrides with type checks, clear errors, schedules."""

import math

import pytest

from smallinit.config import apply_overrides, config_diff, config_names, parse_value, preset_names, read_config_file
from smallinit.core.errors import ConfigError
from smallinit.train import OptimConfig, load_config, lr_at


def test_named_configs_load_and_apply_model_defaults():
    assert {"tiny", "small", "small-moe", "0.1b", "0.3b", "0.7b", "1.5b"} <= set(config_names())
    assert preset_names is config_names  # the old name
    cfg = load_config("small")
    assert (cfg.model.d_model, cfg.model.gamma, cfg.model.norm_eps, cfg.model.gate) == (384, 1.0, 1e-12, "elementwise")
    big = load_config("1.5b")
    assert big.model.d_model == 2048 and big.train.dtype == "bf16"
    moe = load_config("small-moe")
    assert moe.model.moe.n_experts > 0 and moe.data.seq_len == 256  # inherited from `small`


def test_overrides_parse_types():
    cfg = load_config(
        "tiny",
        [
            "model.gamma=0.5",
            "model.norm_eps=1e-5",
            "model.gate=none",
            "optim.lr=3e-3",
            "train.max_steps=2000",
            "train.compile=true",
            "optim.betas=[0.9, 0.99]",
            "model.init_overrides={'tok_emb.*': 0.5}",
            "model.n_kv_heads=2",
        ],
    )
    assert cfg.model.gamma == 0.5 and isinstance(cfg.model.gamma, float)
    assert cfg.model.norm_eps == 1e-5 and cfg.model.gate == "none"
    assert cfg.train.max_steps == 2000 and cfg.train.compile is True
    assert cfg.optim.betas == (0.9, 0.99) and cfg.model.init_overrides == {"tok_emb.*": 0.5}
    assert parse_value("1e-12") == 1e-12 and parse_value("3") == 3 and parse_value("abc") == "abc"
    assert load_config("tiny", ["model.gamma=1"]).model.gamma == 1.0  # ints widen to float


@pytest.mark.parametrize(
    "override,match",
    [
        ("model.gama=1.0", "model.gama"),
        ("train.max_steps=abc", "train.max_steps"),
        ("train.max_steps=1.5", "train.max_steps"),
        ("model.gate=sigmoid", "gate"),
        ("train.compile=maybe", "train.compile"),
        ("optim.lr=-1", "optim.lr"),
        ("train.dtype=fp8", "train.dtype"),
        ("bogus.key=1", "bogus"),
        ("model.gamma", "section.key=value"),
        ("gamma=1", "dotted"),
        ("model.n_heads=5", "n_heads"),
        ("train.batch_size=0", "train.batch_size"),
        ("train.micro_batch_size=5", "micro_batch_size"),
    ],
)
def test_bad_overrides_name_the_key(override, match):
    with pytest.raises(ConfigError, match=match):
        load_config("tiny", [override])


def test_unknown_config_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="unknown config 'nope'; configs: .*tiny"):
        load_config("nope")
    with pytest.raises(ConfigError, match="model.preset: unknown model size 'huge'; choose one of tiny"):
        load_config("tiny", ["model.preset=huge"])
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    good = tmp_path / "mine.yaml"
    good.write_text("base: tiny\nmodel:\n  gamma: 0.75\n")
    assert load_config(good).model.gamma == 0.75
    assert read_config_file(good)["model"]["preset"] == "tiny"


def test_config_diff_and_apply_overrides_do_not_mutate():
    base = {"model": {"gamma": 1.0}}
    out = apply_overrides(base, ["model.gamma=0.5", "train.seed=3"])
    assert base == {"model": {"gamma": 1.0}} and out["train"]["seed"] == 3
    assert config_diff(base, out) == {"model.gamma": (1.0, 0.5), "train": (None, {"seed": 3})}


def test_schedule_values():
    cos = OptimConfig(lr=1.0, warmup_steps=10, min_lr_ratio=0.1, schedule="cosine")
    assert lr_at(0, 110, cos) == pytest.approx(0.1)
    assert lr_at(9, 110, cos) == pytest.approx(1.0)
    assert lr_at(10, 110, cos) == pytest.approx(1.0)
    assert lr_at(109, 110, cos) == pytest.approx(0.1)
    mid = 10 + (109 - 10) / 2
    assert lr_at(int(mid), 110, cos) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (int(mid) - 10) / 99)))
    wsd = OptimConfig(lr=1.0, warmup_steps=10, min_lr_ratio=0.0, schedule="wsd", decay_fraction=0.2)
    assert lr_at(50, 100, wsd) == 1.0 and lr_at(79, 100, wsd) == 1.0
    assert lr_at(99, 100, wsd) == pytest.approx(0.0) and 0 < lr_at(90, 100, wsd) < 1
    const = OptimConfig(lr=2.0, warmup_steps=0, schedule="constant")
    assert lr_at(0, 10, const) == 2.0 and lr_at(9, 10, const) == 2.0
    lrs = [lr_at(s, 200, cos) for s in range(10, 200)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:]))  # monotone decay after warmup


def test_relative_base_is_read_from_the_yaml_folder_not_the_cwd(tmp_path, monkeypatch):
    """Issue 32 (B): `base: parent.yaml` is the file beside the YAML; a stray parent.yaml in the current folder used
    to be loaded silently instead."""
    cfgs = tmp_path / "cfgs"
    cfgs.mkdir()
    (cfgs / "parent.yaml").write_text("base: tiny\nmodel:\n  gamma: 0.75\n")
    (cfgs / "child.yaml").write_text("base: parent.yaml\ntrain:\n  seed: 7\n")
    (cfgs / "sub").mkdir()
    (cfgs / "sub" / "deep.yaml").write_text("base: ../child.yaml\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "parent.yaml").write_text("base: tiny\nmodel:\n  gamma: 1.5\n")  # the stray one
    monkeypatch.chdir(elsewhere)
    for f in (cfgs / "child.yaml", cfgs / "sub" / "deep.yaml"):
        cfg = load_config(f)
        assert cfg.model.gamma == 0.75 and cfg.train.seed == 7
    # a relative base missing beside the YAML is an error naming where it looked, even if the cwd has one
    (cfgs / "parent.yaml").unlink()
    with pytest.raises(ConfigError, match=r"base: 'parent.yaml' not found as .*cfgs.parent\.yaml"):
        load_config(cfgs / "child.yaml")
    # a bare name is still a config name, a dotted one too
    (cfgs / "p.yaml").write_text("base: 0.1b\n")
    assert read_config_file(cfgs / "p.yaml")["model"]["preset"] == "0.1b"
