"""smallinit reproduce: a fixture-sized preset (TEST, below) end to end (claims.json, report.md, index.html whose every
image and link exists), resumption, and the dry-run plans of the public presets."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import pytest

from smallinit.experiments.claims import CLAIMS, NOT_RUN, VERDICTS
from smallinit.experiments.plan import claim_arms
from smallinit.experiments.presets import DEMO, AnchorArm, Preset, get_preset, shape
from smallinit.experiments.reproduce import reproduce

TEST = Preset(  # fixture-sized, in-process: every claim in about a minute on 2 cores
    name="test",
    budget="seconds (test only)",
    description="fixture-sized models for the test suite",
    claims=tuple(range(1, 12)),
    base={
        "model": {"preset": "tiny", "max_seq_len": 32},
        "data": {"seq_len": 32, "val_batches": 2, "tune_batches": 1, "bos": True},
        "optim": {"warmup_steps": 2},
        "train": {"batch_size": 4, "log_every": 2, "eval_every": 4, "ckpt_every": 8, "keep_ckpts": 1, "threads": 1},
        "probe": {"every": 2, "heatmaps": ["blocks.0.attn.q"]},
    },
    sizes={
        "d16": shape(16, 1, 2, 32, 8),
        "d32": shape(32, 1, 2, 64, 8),
        "d48": shape(48, 1, 2, 96, 8),
        "d32-moe": shape(32, 1, 2, 64, 8, **{"model.moe.n_experts": 2, "model.moe.top_k": 1, "model.moe.d_expert": 32}),
    },
    main_size="d32",
    probe_size="d32",
    shrink_sizes=("d16", "d32"),
    scaling_sizes=("d16", "d32", "d48"),
    moe_size="d32-moe",
    lrs=(3e-3, 1e-2),
    seeds={1: 2, 9: 2},
    gammas=(0.5, 1.0, 1.5),
    anchor={
        "steps": 20,
        "n_train": 256,
        "n_test": 64,
        "d_model": 16,
        "n_layers": 1,
        "n_heads": 2,
        "d_ff": 32,
        "eval_every": 10,
        "threads": 1,
    },
    anchor_lrs=(1e-3, 3e-3),
    corpus={"inputs": ["builtin:stdlib"], "vocab_size": 512, "max_bytes": 400_000, "val_fraction": 0.1, "name": "test"},
    compare_tokens=256,
    gflops=5.0,
    anchor_gflops=1.0,
    inprocess=True,
)


class _Refs(HTMLParser):
    def __init__(self):
        super().__init__()
        self.refs: list[str] = []

    def handle_starttag(self, tag, attrs):
        for k, v in attrs:
            if k in ("src", "href") and v:
                self.refs.append(v)


@pytest.fixture(scope="module")
def test_report(tmp_path_factory, token_dir):
    out = tmp_path_factory.mktemp("repro") / "out"
    logs: list[str] = []
    results = reproduce(TEST, out, token_dir, log=logs.append)
    return out, results, logs


@pytest.mark.timeout(300)
def test_reproduce_writes_claims_and_a_self_contained_report(test_report):
    out, results, logs = test_report
    data = json.loads((out / "claims.json").read_text())
    assert [c["id"] for c in data["claims"]] == list(CLAIMS)
    assert all(c["verdict"] in VERDICTS for c in data["claims"])
    assert all(c["verdict"] != NOT_RUN for c in data["claims"])  # the test preset runs every claim
    # verdicts follow from the recorded effects (never hand-written): a supported claim has every part above 0
    for c in data["claims"]:
        if c["verdict"] == "supported":
            assert c["effects"] and all(
                e["lo"] is not None and e["lo"] > 0
                for e in c["effects"]
                if e["label"][:3] in ("(a)", "(b)") or len(c["effects"]) == 1
            )

    html = (out / "index.html").read_text()
    p = _Refs()
    p.feed(html)
    assert p.refs, "the report shows no plots"
    for ref in p.refs:
        assert not re.match(r"^[a-z]+://", ref) and not ref.startswith("/"), f"non-relative reference {ref}"
        assert (out / ref.split("#")[0]).is_file(), f"index.html references a missing file: {ref}"
    md = (out / "report.md").read_text()
    for ref in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md):
        assert (out / ref).is_file(), f"report.md references a missing file: {ref}"
    for cid in CLAIMS:
        assert f"Claim {cid}:" in md
    # learning-rate selection is shown, one row per (arm, lr)
    assert "chosen" in md and "lr_sweep.png" in html
    # the regime table states tokens per parameter beside the paper's
    assert "tokens/param" in md and "~1T" in md
    # progress display numbered over both phases
    assert any(re.search(r"\] 1/\d+ start", l) for l in logs)
    assert any("phase 2/2" in l for l in logs)


@pytest.mark.timeout(300)
def test_rerun_resumes_without_training_again(test_report, token_dir):
    out, results, _ = test_report
    runs = sorted((out / "runs").glob("*/summary.json"))
    mtimes = {p: p.stat().st_mtime_ns for p in runs}
    logs: list[str] = []
    again = reproduce(TEST, out, token_dir, log=logs.append)
    assert [c["verdict"] for c in again] == [c["verdict"] for c in results]
    assert {p: p.stat().st_mtime_ns for p in runs} == mtimes
    assert not any(" start " in l for l in logs), "a finished run was started again"


def test_gpu_dry_run_prints_the_plan_and_its_cost(tmp_path, capsys):
    reproduce("gpu", tmp_path / "gpu", log=print, dry_run=True)
    text = capsys.readouterr().out
    assert "phase 1:" in text and "phase 2:" in text and "device-hours" in text
    assert "1.5b-g1-e1e-12-elementwise-lr0.003-s0" in text  # paper-sized runs, named by their setting
    assert "0.5b-moe-g1-e1e-12-elementwise" in text  # claim 10's MoE
    assert not (tmp_path / "gpu" / "runs").exists()  # nothing ran


def test_demo_plan_covers_its_claims_with_three_models_and_a_crossover():
    arms = claim_arms(DEMO)
    assert sorted(arms) == [1, 4, 6, 7, 9]
    unique = {a for roles in arms.values() for a in roles.values()}
    lm = {a for a in unique if not isinstance(a, AnchorArm)}
    assert len(lm) == 3  # claims 4/6 (γ 0.5 / 1 at ε 1e-12: no gate, and γ 1 with the gate); claim 7's reference
    assert DEMO.crossover is not None and set(DEMO.crossover.arms) == {"baseline", "paper"}  # claim 1's own runs
    assert sorted(a.gamma for a in unique - lm) == [0.5, 1.0]  # claim 9: the anchor task at γ 0.5 and 1
    cpu = get_preset("cpu")
    assert sorted(claim_arms(cpu)) == list(CLAIMS)
    assert len(cpu.lrs) >= 3 and cpu.n_seeds(1) == 2 and cpu.n_seeds(9) == 2
    assert cpu.crossover is not None and cpu.crossover.tokens >= 8_000_000 and cpu.crossover.seeds >= 2
    assert set(cpu.crossover.arms) == {"baseline", "paper", "gamma-only"}
    assert get_preset("cpu-long").crossover.tokens >= 64_000_000
    assert get_preset("demo", seeds=3).n_seeds(1) == 3


def test_fewer_runs_than_jobs_share_the_cores(monkeypatch, tmp_path):
    """On a 64-core machine the demo's five phase-1 runs get 64 // 5 = 12 torch threads each (before: 1 each and 59
    cores idle); with as many jobs as cores and more runs than jobs, one thread each."""
    from smallinit.experiments import cost
    from smallinit.experiments.reproduce import Reproduction

    monkeypatch.setattr(cost, "usable_cores", lambda: 64)

    def threads(plan) -> list[int]:
        return [j.config.train.threads if hasattr(j.config, "train") else j.config.threads for j in plan.phase1]

    plan = Reproduction(get_preset("demo"), tmp_path / "out", jobs=64, gflops=10.0).plan(tmp_path / "data")
    assert threads(plan) == [12] * 5
    monkeypatch.setattr(cost, "usable_cores", lambda: 2)
    plan = Reproduction(get_preset("demo"), tmp_path / "out", jobs=2, gflops=10.0).plan(tmp_path / "data")
    assert threads(plan) == [1] * 5
    assert not (tmp_path / "out").exists()


def test_claim_1_from_a_crossover_and_claim_7_on_its_largest_budget(tmp_path, token_dir):
    """A preset with a crossover: claim 1's verdict is the crossover's loss-claim verdict (never a final-loss
    comparison), claim 7 scores the largest-budget branches with a second baseline seed as the reference, and a
    rerun trains nothing."""
    import dataclasses

    from smallinit.experiments.presets import CrossoverPlan

    p = dataclasses.replace(
        TEST,
        name="test-x",
        claims=(1, 7),
        seeds={},
        crossover=CrossoverPlan(
            size="d32", tokens=4 * 32 * 40, seeds=2, fractions=(0.25, 0.5, 1.0), overrides={"probe.every": 0}
        ),
    )
    out = tmp_path / "out"
    res = {c["id"]: c for c in reproduce(p, out, token_dir, log=lambda s: None)}
    x = json.loads((out / "crossover" / "crossover.json").read_text())
    a = x["analyses"]["paper"]
    assert res[1]["verdict"] == a["verdict"] and res[1]["verdict"] in VERDICTS
    assert res[1]["effects"][0]["value"] == pytest.approx(a["gap"][-1]["value"])
    assert res[1]["plots"] == ["crossover/crossover.png"] and (out / "crossover" / "crossover.png").is_file()
    assert not (out / "runs").exists() or not list((out / "runs").glob("*paper*"))  # no separate claim-1 runs
    # every seed pair, each binned by the other seed of *both* arms (a reference symmetric in A and B)
    assert sorted(r.split("/", 2)[-1] for r in res[7]["runs"]) == [
        "baseline/seed0/D5120",
        "baseline/seed1/D5120",
        "paper/seed0/D5120",
        "paper/seed1/D5120",
    ]
    assert any("seed 0: bins by the mean per-token loss of seed 1 of each arm" in n for n in res[7]["notes"])
    assert res[7]["numbers"]["seed_pairs"] == 2
    mtimes = {q: q.stat().st_mtime_ns for q in (out / "crossover").glob("runs/*/*/*/summary.json")}
    assert len(mtimes) == 2 * 2 * 4  # 2 arms × 2 seeds × (trunk + 3 branches)
    logs: list[str] = []
    reproduce(p, out, token_dir, log=logs.append)
    assert {q: q.stat().st_mtime_ns for q in mtimes} == mtimes
    assert not any(" done " in l for l in logs)


def test_claim_6_trains_its_own_pair_when_the_crossover_tunes_rates_per_arm(tmp_path, token_dir):
    """A crossover that tunes each arm's rate trains paper and γ-only at different rates, so claim 6 does not read
    its trunks (issue 35): it trains its own γ 1 / γ 0.5 pair and compares them at one rate. An untuned crossover
    with probes serves claim 6 (no short runs). The preset's rate grid is tuned per arm and the report says so."""
    import dataclasses

    from smallinit.experiments.claims import c06_condensation
    from smallinit.experiments.presets import CrossoverPlan

    xp = CrossoverPlan(
        size="d32",
        tokens=4 * 32 * 40,
        seeds=1,
        fractions=(0.25, 0.5, 1.0),
        arms=("baseline", "paper", "gamma-only"),
        lrs=(3e-3, 1e-2),
        tune_fraction=0.25,
        overrides={"probe.every": 8},
    )
    p = dataclasses.replace(TEST, name="test-x6", claims=(1, 6), seeds={}, crossover=xp)
    assert set(c06_condensation.arms(p)) == {"small", "std"}
    assert c06_condensation.arms(dataclasses.replace(p, crossover=dataclasses.replace(xp, lrs=()))) == {}
    out = tmp_path / "out"
    res = {c["id"]: c for c in reproduce(p, out, token_dir, log=lambda s: None)}
    lr = re.search(r"both at learning rate (\S+)\)?", res[6]["measured"])
    assert lr, res[6]["measured"]
    assert res[6]["runs"] and all(f"-lr{lr.group(1).rstrip(';,')}-s0" in r for r in res[6]["runs"])
    assert res[6]["verdict"] in VERDICTS and res[6]["numbers"]["matrices"] > 0
    probes = [
        json.loads(l)["step"] for l in (out / "runs" / res[6]["runs"][0] / "probes.jsonl").read_text().splitlines()
    ]
    assert probes[:2] == [0, 1]  # the early probe below probe.every = 2
    x = json.loads((out / "crossover" / "crossover.json").read_text())
    assert set(x["tuning"]) == {"baseline", "paper", "gamma-only"}
    assert "tuned per arm" in res[1]["measured"]


def _extra_preset():
    import dataclasses

    from smallinit.experiments.presets import SHRINK_ARMS, CrossoverPlan

    xp = CrossoverPlan(size="d32", tokens=4 * 32 * 40, seeds=1, fractions=(0.5, 1.0), overrides={"probe.every": 0})
    gam = {f"g{g:g}": (g, 1e-12, "elementwise") for g in (0.5, 1.0, 1.5)}
    extras = (
        dataclasses.replace(xp, claim=10, size="d32-moe"),
        dataclasses.replace(xp, claim=5, arms=tuple(gam), settings=gam),
        *(
            dataclasses.replace(
                xp,
                claim=2,
                label=z,
                size=z,
                tokens=0,
                tokens_per_param=0.5,
                arms=tuple(SHRINK_ARMS),
                settings=dict(SHRINK_ARMS),
            )
            for z in ("d16", "d32")
        ),
    )
    return dataclasses.replace(
        TEST,
        name="test-extra",
        claims=(1, 2, 5, 10),
        seeds={},
        extra_crossovers=extras,
        crossover=dataclasses.replace(xp, seeds=2),
    )


def test_further_crossovers_answer_claims_2_5_and_10(tmp_path, token_dir):
    """cpu-long's design on the fixture: claims 2 (one crossover per width at equal tokens per parameter), 5 (the γ
    sweep) and 10 (the MoE pair) read their own crossovers — no short runs — with the claim-1 crossover's seed-noise
    floor for their one-seed differences."""
    from smallinit.experiments.crossover_plan import crossover_folder

    p = _extra_preset()
    out = tmp_path / "out"
    res = {c["id"]: c for c in reproduce(p, out, token_dir, log=lambda s: None)}
    assert not (out / "runs").exists() or not any((out / "runs").iterdir())
    assert sorted(crossover_folder(xp) for xp in p.extra_crossovers) == [
        "crossover-c10",
        "crossover-c2-d16",
        "crossover-c2-d32",
        "crossover-c5",
    ]
    for c in (2, 5, 10):
        assert res[c]["verdict"] in VERDICTS and "crossover" in json.dumps(res[c]["runs"])
    floor = json.loads((out / "claims.json").read_text())["crossover_noise_floor"]
    assert floor is not None and floor > 0  # claim 1's two seeds
    assert res[10]["effects"][0]["value"] == pytest.approx(
        json.loads((out / "crossover-c10" / "crossover.json").read_text())["analyses"]["paper"]["gap"][-1]["value"]
    )
    assert set(res[5]["numbers"]["loss_by_gamma"]) == {"0.5", "1", "1.5"}
    tpp = res[2]["numbers"]["tokens_per_param"]
    assert len(tpp) == 2 and max(tpp.values()) / min(tpp.values()) < 1.1  # equal tokens per parameter: no confound
    assert not any("confounded" in n for n in res[2]["notes"])
    assert len(res[2]["tables"][0]["rows"]) == 4  # 2 widths × (no fix, fix)


def test_only_the_further_crossovers_that_fit_the_hours_are_chosen(token_dir):
    from smallinit.experiments.crossover_plan import choose_extras, crossover_wall_seconds, spec_from_preset

    p = _extra_preset()
    c10 = crossover_wall_seconds(spec_from_preset(p, token_dir, p.extra_crossovers[0]), 5.0, 1)
    chosen, lines = choose_extras(p, token_dir, c10 * 1.01, 5.0, jobs=1)
    assert [xp.claim for xp in chosen] == [10]
    assert "claim 10: 1 crossover(s)" in lines[0] and "fits" in lines[0] and "does not fit" in lines[1]
    assert [xp.claim for xp in choose_extras(p, token_dir, 1e9, 5.0, jobs=1)[0]] == [10, 5, 2, 2]
    assert choose_extras(p, token_dir, 0.0, 5.0, jobs=1)[0] == []


def test_a_preset_corpus_can_be_byte_level(tmp_path):
    """The cpu preset trains on bytes (its LM head is then 3% of the FLOPs, not 47% as with BPE 8192): a preset's
    ``corpus`` names the tokenizer, and ensure_corpus prepares it so."""
    import dataclasses

    from smallinit.experiments.plan import ensure_corpus
    from smallinit.experiments.presets import get_preset

    assert get_preset("cpu").corpus["tokenizer"] == "byte"
    text = tmp_path / "t.txt"
    text.write_text("small init matters. " * 2000)
    p = dataclasses.replace(TEST, corpus={"inputs": [str(text)], "tokenizer": "byte", "val_fraction": 0.1, "name": "b"})
    logs: list[str] = []
    path = ensure_corpus(p, None, tmp_path / "out", logs.append)
    assert json.loads((path / "meta.json").read_text())["vocab_size"] == 257
    assert any("(byte" in l for l in logs)


def test_report_renders_in_chromium(test_report, tmp_path):
    """The reproduce report in a real browser (tests/test_browser.py's check: no broken image, no console
    message, not blank); skips without Chromium."""
    import test_browser

    if test_browser.CHROMIUM is None:
        pytest.skip("no Chromium installed (apt-get install -y chromium)")
    out, _, _ = test_report
    stats = test_browser.check_page(out / "index.html", tmp_path / "reproduce.png", tmp_path)
    assert stats["images"] >= 5


def test_a_corpus_tokenized_otherwise_than_the_preset_is_noted(token_dir):
    """The cpu preset is sized for bytes; a BPE corpus passed with --corpus is used, with a note saying so."""
    from smallinit.experiments.plan import corpus_note
    from smallinit.experiments.presets import get_preset

    note = corpus_note(get_preset("cpu"), token_dir)
    assert note.startswith("note: preset cpu is sized for a byte corpus") and "bpe (vocabulary 512)" in note
    assert corpus_note(get_preset("demo"), token_dir) is None  # demo prepares BPE itself
    assert corpus_note(get_preset("gpu"), token_dir) is None  # gpu names no corpus of its own


def test_the_learning_rate_paragraph_names_the_anchor_tasks_own_rate():
    """The demo trains its LM arms at 3e-3 and the anchor task at 1e-3: the report said 'one learning rate for every
    arm'."""
    import dataclasses

    from smallinit.experiments.report import build_blocks

    def lr_paragraph(preset):
        blocks = build_blocks(
            preset=preset, claims=[], lr_tables={}, regime=[], corpus={}, timings={}, plan_text="", lr_plot=None
        )
        i = blocks.index(("h2", "Learning rates", "lr"))
        return blocks[i + 1][1]

    assert DEMO.lrs == (3e-3,) and DEMO.anchor_lrs == (1e-3,)
    text = lr_paragraph(DEMO)
    assert "(0.003) for every language-model arm" in text and "anchor task's arms all train at 0.001" in text
    same = lr_paragraph(dataclasses.replace(DEMO, anchor_lrs=(3e-3,)))
    assert "0.001" not in same and "at the same rate" in same
    tuned = lr_paragraph(dataclasses.replace(DEMO, anchor_lrs=(3e-4, 1e-3)))
    assert "best of 0.0003, 0.001" in tuned
