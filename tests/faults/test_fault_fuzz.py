"""Fault 6: bad input, fuzzed with hypothesis.

Random config dicts, CLI override strings and YAML files; random bytes as a corpus; garbage and
wrong-shape safetensors (and garbage in the other checkpoint files, behind a *valid* manifest, as a
buggy or hostile writer would produce); malformed benchmark JSONL lines. Each input must either be
accepted or rejected with a SmallinitError carrying a message — never another exception escaping
from torch, numpy, yaml or json, never a hang (every test is time-bounded).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import shutil
import string
import tempfile
import warnings
from pathlib import Path

import pytest
import torch
from faultkit import fault_overrides, fault_table  # noqa: F401
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from smallinit.core.errors import SmallinitError

# CI: a fixed, modest set of examples. Deeper hunting: SMALLINIT_FUZZ_EXAMPLES=2000 (random, not derandomized).
_DEEP = int(os.environ.get("SMALLINIT_FUZZ_EXAMPLES", "0"))
FUZZ = settings(
    deadline=None,
    max_examples=_DEEP or 60,
    suppress_health_check=list(HealthCheck),
    derandomize=not _DEEP,
    database=None,
)
SLOW_FUZZ = settings(FUZZ, max_examples=max(_DEEP // 5, 12))

COUNTS: dict[str, list[int]] = {}  # test → [examples, accepted, rejected with a SmallinitError]


def outcome(name: str, fn, *args, **kwargs):
    """Run ``fn``; a SmallinitError with a non-empty one-line message is a clean rejection, anything else escapes."""
    c = COUNTS.setdefault(name, [0, 0, 0])
    c[0] += 1
    try:
        out = fn(*args, **kwargs)
    except SmallinitError as e:
        msg = str(e)
        assert msg.strip(), f"{type(e).__name__} without a message"
        c[2] += 1
        return e
    c[1] += 1
    return out


def record(fault_table, name: str, what: str) -> None:
    n, ok, rejected = COUNTS.get(name, [0, 0, 0])
    fault_table.record(f"fuzz: {what}", n, ok + rejected, "n/a", f"{ok} accepted, {rejected} rejected cleanly")


# ---- values ---------------------------------------------------------------------------------------

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
    | st.sampled_from([0, -1, 1, 2, 3, 1e-12, 1e30, "", "cpu", "none", "ddp", "nan"])
)
values = st.recursive(
    scalars, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=3), max_leaves=6
)


def _known_keys() -> list[str]:
    from smallinit.config import RunConfig

    keys = []

    def walk(cls, prefix):
        for f in dataclasses.fields(cls):
            t = f.default_factory if f.default_factory is not dataclasses.MISSING else None
            if t is not None and dataclasses.is_dataclass(t):
                walk(t, f"{prefix}{f.name}.")
            keys.append(f"{prefix}{f.name}")

    walk(RunConfig, "")
    return [k for k in keys if "." in k]


KEYS = _known_keys()
dotted = st.sampled_from(KEYS) | st.sampled_from(KEYS).map(lambda k: k + "x") | st.text(min_size=1, max_size=12)


def _tiny_dict(token_dir) -> dict:
    from smallinit.config import apply_overrides, read_config_file

    d = apply_overrides(read_config_file("tiny"), fault_overrides(token_dir))
    d["model"].pop("preset", None)
    return d


def _set(d: dict, key: str, value) -> None:
    parts = key.split(".")
    node = d
    for p in parts[:-1]:
        if not isinstance(node.get(p), dict):
            node[p] = {}
        node = node[p]
    node[parts[-1]] = value


def _model_builds(cfg) -> None:
    """A config that validates must also build its model (on the meta device: no memory, any size)."""
    from smallinit.model import Transformer

    with torch.device("meta"):
        Transformer(cfg.model)


# ---- configs ----------------------------------------------------------------------------------------


@pytest.mark.timeout(90)
def test_fuzz_config_dicts(token_dir, fault_table):
    from smallinit.config import config_from_dict
    from smallinit.model.config import SIZES

    base = _tiny_dict(token_dir)
    base["model"] = {**SIZES["tiny"], **base["model"]}

    plausible = (
        st.integers(-1, 300)
        | st.floats(-1, 2, allow_nan=False)
        | st.sampled_from(
            ["none", "headwise", "elementwise", "layernorm", "rmsnorm", "wsd", "constant", "bf16", "fsdp", True, None]
        )
    )
    edit = st.tuples(st.sampled_from(KEYS), plausible) | st.tuples(dotted, values)

    @FUZZ
    @given(edits=st.lists(edit, min_size=1, max_size=4), raw=st.sampled_from([False] * 4 + [True]), junk=values)
    def check(edits, raw, junk):
        d = junk if raw else json.loads(json.dumps(base))
        if not raw:
            for k, v in edits:
                _set(d, k, v)
        cfg = outcome("config dicts", config_from_dict, d)
        if not isinstance(cfg, SmallinitError):
            _model_builds(cfg)

    check()
    record(fault_table, "config dicts", "config dicts (config_from_dict)")


@pytest.mark.timeout(90)
def test_fuzz_cli_overrides(token_dir, fault_table):
    from smallinit.config import load_config

    base = fault_overrides(token_dir)
    yamlish = st.sampled_from(
        [
            "1",
            "-3",
            "0",
            "1e-12",
            "nan",
            "inf",
            "[1, 2]",
            "{a: 1}",
            "true",
            "null",
            "~",
            "",
            "!!python/object/apply:os.system ['true']",
            "'quoted",
            "[unclosed",
            "a: b: c",
            "0x10",
            "1_000",
            "tiny",
            "0.1b",
            "ddp",
            "fsdp",
            "bf16",
        ]
    )
    numbers = st.integers(-2, 600).map(str) | st.floats(-1, 10, allow_nan=False).map(repr)
    known = st.tuples(st.sampled_from(KEYS), numbers | yamlish).map(lambda kv: f"{kv[0]}={kv[1]}")
    override = (
        known
        | st.tuples(dotted, yamlish | st.text(max_size=10)).map(lambda kv: f"{kv[0]}={kv[1]}")
        | st.text(alphabet=string.printable, max_size=20)
    )

    @FUZZ
    @given(extra=st.lists(known, min_size=1, max_size=2) | st.lists(override, min_size=1, max_size=4))
    def check(extra):
        cfg = outcome("overrides", load_config, "tiny", base + extra)
        if not isinstance(cfg, SmallinitError):
            _model_builds(cfg)

    check()
    record(fault_table, "overrides", "CLI override strings (load_config)")


@pytest.mark.timeout(60)
def test_fuzz_config_files(fault_table):
    from smallinit.config import load_config

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cfg.yaml"

        @FUZZ
        @given(
            text=st.text(max_size=200)
            | st.binary(max_size=200).map(lambda b: b.decode("latin-1"))
            | values.map(lambda v: json.dumps(v))
        )
        def check(text):
            path.write_text(text, encoding="utf-8", errors="surrogatepass")
            outcome("config files", load_config, str(path))

        check()
    record(fault_table, "config files", "YAML config files of random text")


# ---- corpora ----------------------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_fuzz_random_bytes_as_corpus(tmp_path, fault_table):
    from smallinit.data import prepare_corpus

    n = [0]

    @SLOW_FUZZ
    @given(
        data=st.binary(max_size=3000) | st.binary(max_size=64).map(lambda b: b * 50),
        tokenizer=st.sampled_from(["byte", "bpe"]),
        val=st.sampled_from([0.0, 0.1, 0.5]),
    )
    def check(data, tokenizer, val):
        n[0] += 1
        src = tmp_path / f"c{n[0]}.txt"
        src.write_bytes(data)
        out = tmp_path / f"out{n[0]}"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            outcome(
                "corpus",
                prepare_corpus,
                [str(src)],
                out,
                tokenizer=tokenizer,
                vocab_size=300,
                val_fraction=val,
                progress=False,
                num_workers=1,
            )
        shutil.rmtree(out, ignore_errors=True)

    check()
    record(fault_table, "corpus", "random bytes as a corpus (prepare_corpus)")


# ---- checkpoints ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def good_ckpt(token_dir, tmp_path_factory) -> Path:
    from smallinit.runs.checkpoint import list_checkpoints
    from smallinit.train import load_config, train

    rd = tmp_path_factory.mktemp("ck") / "run"
    train(load_config("tiny", fault_overrides(token_dir, **{"train.max_steps": 4, "train.eval_every": 4})), rd)
    return list_checkpoints(rd)[-1]


def forge(src: Path, dst: Path, replace: dict[str, bytes]) -> Path:
    """A copy of checkpoint ``src`` with some files replaced and a manifest whose checksums match."""
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst)
    manifest = json.loads((dst / "manifest.json").read_text())
    for name, data in replace.items():
        (dst / name).write_bytes(data)
        manifest["files"][name] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    (dst / "manifest.json").write_text(json.dumps(manifest))
    return dst


def _tensors(draw_shapes, dtype_names, names):
    from safetensors.torch import save

    tensors = {}
    for name, shape, dt in zip(names, draw_shapes, dtype_names):
        tensors[name] = torch.zeros(shape, dtype=getattr(torch, dt))
    return save(tensors)


@pytest.mark.timeout(90)
def test_fuzz_checkpoint_files(good_ckpt, tmp_path, fault_table):
    from safetensors.torch import load_file

    from smallinit.runs.checkpoint import load_checkpoint

    real = load_file(str(good_ckpt / "model.safetensors"))
    names = sorted(real)
    shapes = st.lists(st.integers(0, 70), min_size=0, max_size=3).map(tuple)
    dtypes = st.sampled_from(["float32", "float16", "bfloat16", "int64", "bool"])

    @st.composite
    def wrong_model(draw):
        kind = draw(st.sampled_from(["bytes", "shapes", "keys"]))
        if kind == "bytes":
            return draw(st.binary(max_size=300))
        if kind == "shapes":  # the right names, some with other shapes or dtypes
            chosen = {n: (tuple(real[n].shape), "float32") for n in names}
            for n in draw(st.lists(st.sampled_from(names), min_size=1, max_size=3)):
                chosen[n] = (draw(shapes), draw(dtypes))
            return _tensors([s for s, _ in chosen.values()], [d for _, d in chosen.values()], list(chosen))
        picked = draw(st.lists(st.sampled_from(names) | st.text(min_size=1, max_size=8), max_size=6, unique=True))
        return _tensors(
            [tuple(real[n].shape) if n in real else (2,) for n in picked], ["float32"] * len(picked), picked
        )

    other = st.sampled_from(["optim.pt", "state.json", "config.yaml"])

    def garbage_for(name):
        base = st.binary(max_size=200) | values.map(lambda v: json.dumps(v).encode())
        if name == "config.yaml":
            return base | values.map(lambda v: json.dumps({"model": v}).encode())
        if name == "optim.pt":

            def saved(v):
                buf = io.BytesIO()
                torch.save(v, buf)
                return buf.getvalue()

            return base | values.map(saved)
        return base

    @FUZZ
    @given(model=st.none() | wrong_model(), target=other, data=st.data())
    def check(model, target, data):
        replace = {} if model is None else {"model.safetensors": model}
        if model is None or data.draw(st.booleans()):
            replace[target] = data.draw(garbage_for(target))
        ck = forge(good_ckpt, tmp_path / "forged", replace)
        outcome("checkpoints", load_checkpoint, ck)

    check()
    record(
        fault_table, "checkpoints", "garbage / wrong-shape checkpoint files behind a valid manifest (load_checkpoint)"
    )


# ---- benchmark files -----------------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_fuzz_benchmark_jsonl(tmp_path, fault_table):
    from smallinit.eval.generation import load_gsm8k, load_math500
    from smallinit.eval.lambada import load_lambada
    from smallinit.eval.multiple_choice import load_arc, load_hellaswag

    fields = st.sampled_from(
        [
            "ctx_a",
            "ctx_b",
            "activity_label",
            "endings",
            "label",
            "question",
            "answer",
            "choices",
            "answerKey",
            "problem",
            "solution",
            "context",
            "continuation",
            "text",
            "label",
        ]
    )
    good = {
        "hellaswag": {
            "ctx_a": "A man",
            "ctx_b": "walks",
            "activity_label": "Walking",
            "endings": ["a", "b"],
            "label": "1",
        },
        "arc": {"question": "Q?", "choices": {"text": ["x", "y"], "label": ["A", "B"]}, "answerKey": "A"},
        "gsm8k": {"question": "1+1?", "answer": "2 #### 2"},
        "math500": {"problem": "1+1", "solution": "\\boxed{2}", "answer": "2"},
        "lambada": {"context": "the cat", "continuation": "sat"},
    }
    loaders = {
        "hellaswag": load_hellaswag,
        "arc": load_arc,
        "gsm8k": load_gsm8k,
        "math500": load_math500,
        "lambada": load_lambada,
    }
    path = tmp_path / "bench.jsonl"

    @st.composite
    def line(draw, task):
        kind = draw(st.sampled_from(["text", "json", "mutated", "mutated", "mutated"]))
        if kind == "text":
            return draw(st.text(max_size=40)).replace("\n", " ")
        if kind == "json":
            return json.dumps(draw(values))
        rec = json.loads(json.dumps(good[task]))
        for k, v in draw(st.lists(st.tuples(fields, values), min_size=1, max_size=3)):
            if draw(st.booleans()):
                rec[k] = v
            else:
                rec.pop(k, None)
        return json.dumps(rec)

    @FUZZ
    @given(task=st.sampled_from(sorted(loaders)), data=st.data())
    def check(task, data):
        lines = data.draw(st.lists(line(task) | st.just(json.dumps(good[task])), min_size=1, max_size=4))
        path.write_text("\n".join(lines) + "\n", encoding="utf-8", errors="surrogatepass")
        outcome("benchmarks", loaders[task], path)

    check()
    record(fault_table, "benchmarks", "malformed benchmark JSONL lines (HellaSwag, ARC, GSM8K, MATH500, LAMBADA)")


# ---- prepared data directories --------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_fuzz_prepared_data_meta(token_dir, tmp_path, fault_table):
    from smallinit.data import TokenData

    meta = json.loads((token_dir / "meta.json").read_text())
    d = tmp_path / "data"
    shutil.copytree(token_dir, d)
    escapes = []

    @FUZZ
    @given(edits=st.lists(st.tuples(st.sampled_from(sorted(meta)), st.none() | values), min_size=1, max_size=3))
    def check(edits):
        m = json.loads(json.dumps(meta))
        for k, v in edits:
            if v is None:
                m.pop(k, None)
            else:
                m[k] = v
        (d / "meta.json").write_text(json.dumps(m))

        def open_data():
            data = TokenData(d)
            return data.vocab_size, data.eot_id, data.bos_id, len(data.train), len(data.val)

        try:
            outcome("meta", open_data)
        except Exception as e:  # noqa: BLE001 - collected, asserted below
            escapes.append(f"{type(e).__name__}: {e}"[:120])

    check()
    record(fault_table, "meta", "malformed meta.json of a prepared data directory (TokenData)")
    assert not escapes, escapes[:5]
