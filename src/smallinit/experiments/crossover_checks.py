"""What a crossover (:mod:`smallinit.experiments.crossover`) refuses before it trains: an output folder that is not a
crossover or holds one with other settings, a trunk trained otherwise than the one it would reuse (or without the
checkpoint a new budget starts from), and arms whose data were tokenized differently (their losses are in other
units)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from smallinit.core.errors import RunDirError
from smallinit.experiments.crossover_runs import CrossoverJob

SPEC_FILE = "crossover.spec.json"


def check_output(out: Path, spec: Any, inputs: tuple[str, ...] = (), data: dict[str, Any] | None = None) -> None:
    """OUT must be new, empty, or a crossover with the same base settings, which is then continued: arms and seeds
    may be added and the budgets changed (a larger D extends the trunks; finished runs are reused), but the base
    config, the overrides, the cooldown fraction, every earlier arm's overrides, the declarations made before the
    runs (``enough``, ``effect``) and the data they are scored on (``data``, :func:`data_settings`; not compared
    with a spec written before it was recorded) must stay as they were."""
    from smallinit.core.outputs import check_out_dir as output_policy

    if out.is_dir() and any(p.name != ".lock" for p in out.iterdir()) and not (out / SPEC_FILE).is_file():
        raise RunDirError(f"--out {out} is a non-empty folder that is not a crossover; choose a new folder")
    plan = output_policy(out, "crossover", inputs=inputs, can_continue=True, verb="crossover")
    if plan.state == "continue":
        p = out / SPEC_FILE
        try:
            old = json.loads(p.read_text())
        except ValueError:
            raise RunDirError(f"{p} is damaged; choose a new --out") from None
        new = json.loads(json.dumps(spec.to_dict()))

        def norm(key: str, value: Any) -> Any:
            """Equal settings written differently compare equal: override lists as {key: parsed value} (order-free,
            the last of a repeated key wins as when applied; model.gamma=1 is 1.0), paths (data.path, a YAML base)
            resolved from here, the tuning grid as a sorted set of numbers."""
            from smallinit.config import parse_value

            def path(v: Any) -> Any:
                return os.path.realpath(os.path.abspath(v)) if isinstance(v, str) and v else v

            if key in ("overrides", "arm") and isinstance(value, list):
                out = {}
                for o in value:
                    k, sep, v = str(o).partition("=")
                    k, v = k.strip(), parse_value(v.strip()) if sep else None
                    out[k] = path(v) if k.endswith(".path") else v
                return out
            if key == "base" and isinstance(value, str) and Path(value).suffix in (".yaml", ".yml"):
                return path(value)
            if key == "lrs" and isinstance(value, list):
                try:
                    return sorted({float(x) for x in value})
                except (TypeError, ValueError):
                    return value
            return value

        declared = [k for k in ("enough", "effect") if old.get(k, new.get(k)) != new.get(k)]
        if declared:

            def said(d: dict[str, Any]) -> str:  # "--enough 75, no --effect"
                v = {k: format(d[k], "g") if isinstance(d.get(k), (int, float)) else d.get(k) for k in declared}
                return ", ".join(f"--{k} {v[k]}" if v[k] is not None else f"no --{k}" for k in declared)

            raise RunDirError(
                f"{out} was declared with {said(old)} before its runs; a declaration cannot change after them "
                f"(asked: {said(new)}). To read the runs at another budget "
                f"or effect, use `smallinit crossover-rejudge {out} --enough K [--effect NATS]` (its report says "
                "so)"
            )
        if data is not None and old.get("data") not in (None, data):
            was = old["data"]
            k = next((k for k in data if was.get(k) != data[k]), "prepared")
            raise RunDirError(
                f"{out} was scored on other data (data.{k}: {was.get(k)!r} there, {data.get(k)!r} now); choose a "
                "new --out"
            )
        fixed = ("base", "overrides", "cooldown", "base_config", "lrs", "tune_fraction")
        diff = [k for k in fixed if norm(k, old.get(k, new.get(k))) != norm(k, new.get(k))]
        diff += [
            f"arm {a}"
            for a, ov in (old.get("arms") or {}).items()
            if a in new["arms"] and norm("arm", new["arms"][a]) != norm("arm", ov)
        ]
        if diff:
            raise RunDirError(
                f"{out} holds a crossover with other settings ({', '.join(diff)} differ); choose a new "
                "--out (arms, seeds and budgets may change; the runs' own settings may not)"
            )


def check_reuse(trunks: list[CrossoverJob], branches: list[CrossoverJob]) -> None:
    """Before any work: an existing trunk must be the same run (all settings but its length and kept steps), and a
    new branch that starts at or before a trunk's last step needs the trunk's checkpoint there."""
    from smallinit.runs.checkpoint import CKPT_SUBDIR, ckpt_dir_name
    from smallinit.runs.rundir import config_mismatch, read_config, run_state

    last: dict[Path, int] = {}
    for t in trunks:
        if not (t.run_dir / "config.yaml").is_file():  # new (or failed before it wrote one)
            continue
        have = read_config(t.run_dir)
        diff = {
            k: v
            for k, v in config_mismatch(have, t.config.to_dict()).items()
            if k not in ("train.max_steps", "train.ckpt_steps")
        }
        if diff:
            k, (a, b) = next(iter(diff.items()))
            raise RunDirError(
                f"{t.run_dir} was trained with other settings ({k}: {a!r} there, {b!r} now); choose a new --out"
            )
        last[t.run_dir] = int(have["train"]["max_steps"]) if run_state(t.run_dir) == "done" else -1
    for b in branches:
        end = last.get(b.trunk_dir, -1)
        if run_state(b.run_dir) == "new" and 0 <= b.start <= end:
            if not (b.trunk_dir / CKPT_SUBDIR / ckpt_dir_name(b.start)).is_dir():
                raise RunDirError(
                    f"budget {b.run_dir.name} would start from step {b.start} of {b.trunk_dir}, which "
                    "kept no checkpoint there; choose budgets that reuse its kept steps or a new --out"
                )


def data_settings(config: Any) -> dict[str, Any]:
    """What an arm's loss is measured on: its ``data`` config (path resolved) and what the prepared folder says of
    itself (tokenizer kind, vocabulary, train/val token counts)."""
    from smallinit.runs.rundir import read_json

    d = dict(config.to_dict()["data"])
    d["path"] = os.path.realpath(os.path.abspath(d["path"]))
    meta = read_json(Path(d["path"]) / "meta.json") or {}
    tok = meta.get("tokenizer") if isinstance(meta.get("tokenizer"), dict) else {}
    d["prepared"] = {"tokenizer": tok.get("kind"), "vocab_size": meta.get("vocab_size"), "tokens": meta.get("tokens")}
    return d


def check_same_data(jobs: list[CrossoverJob]) -> dict[str, Any]:
    """Every arm must train and be scored on the same data: same prepared folder, tokenizer, window length, BOS,
    validation and tune batches (checked before any work, dry runs too). Returns those settings, frozen in the spec
    by the first run."""
    from smallinit.core.errors import ConfigError

    first: tuple[str, dict[str, Any]] | None = None
    for j in jobs:
        d = data_settings(j.config)
        if first is None:
            first = (j.arm, d)
            continue
        diff = [k for k in d if d[k] != first[1].get(k)]
        if diff:
            k = diff[0]
            raise ConfigError(
                f"arms {first[0]!r} and {j.arm!r} differ in data.{k} ({first[1].get(k)!r} vs {d[k]!r}): each arm "
                "would be scored on its own data and no gap between them means anything; set data.* for every arm "
                "(--set), not per arm"
            )
    assert first is not None
    return first[1]


def check_data(trunks: list[CrossoverJob]) -> None:
    """Every arm's data directory must be a prepared one, and all of them tokenized alike (checked before any folder
    is made): an arm with its own ``data.path`` on another tokenizer measures its loss in other units (per BPE token
    vs per byte), so its gap to the baseline means nothing — ``compare`` and ``scaling`` refuse such mixes too."""
    from tokenizers import Tokenizer

    from smallinit.core.errors import DataError
    from smallinit.data import TokenData

    seen: dict[str, tuple[str, str]] = {}  # canonical tokenizer -> (data path, description)
    for path in sorted({j.config.data.path for j in trunks}):
        d = TokenData(path)  # DataError naming the problem
        f = d.path / d.meta["files"]["tokenizer"]
        try:
            key = Tokenizer.from_file(str(f)).to_str()
        except Exception as e:  # the library raises plain Exception subclasses
            raise DataError(f"{f}: unreadable tokenizer ({str(e).splitlines()[0][:200] if str(e) else e!r})") from None
        kind = (d.meta.get("tokenizer") or {}).get("kind") if isinstance(d.meta.get("tokenizer"), dict) else None
        what = f"{kind or 'a'} tokenizer of {d.vocab_size:,} tokens"
        for other, (opath, owhat) in seen.items():
            if other != key:
                raise DataError(
                    f"the arms train on data prepared with different tokenizers: {opath} ({owhat}) and "
                    f"{path} ({what}); their losses are in different units and no gap between them means "
                    "anything: prepare every arm's data with the same tokenizer"
                )
        seen.setdefault(key, (path, what))


__all__ = ["SPEC_FILE", "check_data", "check_output", "check_reuse", "check_same_data", "data_settings"]
