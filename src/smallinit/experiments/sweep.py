"""Sweeps: many training runs that differ in a few config fields, run resumably, summarized in one table.

A sweep file (YAML)::

    base: tiny                        # preset name or YAML path; or a nested config mapping
                                      # (optionally with ``config: PRESET``); or a list [PRESET, key=value, ...]
    overrides:                        # optional: applied to every run (mapping or list of key=value)
      data.path: data/stdlib
      train.max_steps: 300
    grid:                             # cartesian product of dotted keys → values ...
      model.gamma: [0.5, 1.0]
      model.norm_eps: [1.0e-5, 1.0e-12]
    # runs:                           # ... or an explicit list of override mappings (optional "name")
    #   - {model.gamma: 0.5, model.gate: none}
    #   - {name: paper, model.gamma: 1.0}

Each run is named by its own settings (``gamma=0.5,norm_eps=1e-05``, sanitized for file names) and lives
in ``OUT/<name>/`` (a normal run directory: ``smallinit train --resume`` works on it). Its resolved config is
written to ``OUT/configs/<name>.yaml`` and trained by a subprocess ``python -m smallinit train`` (a kill of
the sweep kills the child too and leaves every run directory consistent: checkpoints are atomic).

Resumption: a run whose ``summary.json`` says ``completed: true`` is skipped; one with a ``config.yaml`` but
no summary (interrupted) is continued with ``smallinit train --resume`` from its last checkpoint; one that
exited with an error gets ``failed.json`` and is not retried unless asked (``retry_failed``). A run
directory whose config differs from the sweep's is refused, never silently reused.

Outputs: ``OUT/summary.csv`` and ``OUT/summary.md`` — one row per run: its settings, state, final val loss
(and ``tune_loss`` when ``data.tune_batches`` > 0), tokens, parameters, wall time and, when the run wrote
``probes.jsonl``, the last probe record summarized (mean/max first-token attention share, lowest RMSNorm
saturation, mean stable rank and condensation index of the block matrices, largest activation).
"""

from __future__ import annotations

import csv
import ctypes
import functools
import io
import itertools
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from smallinit.errors import ConfigError, RunDirError
from smallinit.io import atomic_write_json, atomic_write_text

SWEEP_KEYS = ("base", "overrides", "grid", "runs")
# config fields a run may change by itself (data decides vocab_size) or that only concern execution
IGNORED_IN_COMPARISON = ("model.vocab_size", "model.max_seq_len", "train.threads", "train.progress")
SAFE_NAME = re.compile(r"[^A-Za-z0-9._=,+\-]")
MAX_NAME = 120


# ---- the sweep file ----------------------------------------------------------------------------

@dataclass
class RunSpec:
    """One run of a sweep: its name, its own overrides (dotted key → value) and the resolved config."""

    name: str
    overrides: dict[str, Any]
    config: dict[str, Any] = field(default_factory=dict)


@dataclass
class SweepSpec:
    """A resolved sweep: the shared base config (nested plain data) and the runs."""

    base: dict[str, Any]
    runs: list[RunSpec]
    source: str = ""

    @property
    def keys(self) -> list[str]:
        """The dotted keys any run sets, in first-seen order (the columns of the summary)."""
        out: list[str] = []
        for r in self.runs:
            for k in r.overrides:
                if k not in out:
                    out.append(k)
        return out


def set_dotted(d: dict[str, Any], key: str, value: Any) -> None:
    """d[a][b][c] = value for key "a.b.c" (creating sections); the value is parsed like a CLI override."""
    from smallinit.train.config import parse_value, set_dotted

    set_dotted(d, key, parse_value(value) if isinstance(value, str) else value, what="sweep key")


def _override_map(value: Any, where: str) -> dict[str, Any]:
    """A mapping {dotted key: value} from a mapping or a list of "key=value" strings."""
    from smallinit.train.config import parse_value

    if value is None:
        return {}
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise ConfigError(f"{where}: key {k!r} must be a dotted string like model.gamma")
            out[k] = parse_value(v) if isinstance(v, str) else v
        return out
    if isinstance(value, list):
        out = {}
        for item in value:
            if not isinstance(item, str) or "=" not in item:
                raise ConfigError(f"{where}: {item!r} must look like section.key=value")
            k, _, v = item.partition("=")
            out[k.strip()] = parse_value(v)
        return out
    raise ConfigError(f"{where}: expected a mapping or a list of key=value, got {type(value).__name__}")


def _read_base(base: Any, here: Path | None) -> dict[str, Any]:
    """The ``base:`` entry → a nested config dict (not yet validated)."""
    from smallinit.train.config import _merge, read_config_file

    def read(name: str) -> dict[str, Any]:
        if here is not None and name.endswith((".yaml", ".yml")) and not Path(name).is_absolute():
            cand = here / name
            if cand.is_file():
                return read_config_file(cand)
        return read_config_file(name)

    if base is None:
        return {}
    if isinstance(base, str):
        return read(base)
    if isinstance(base, list):
        d: dict[str, Any] = {}
        items = list(base)
        if items and isinstance(items[0], str) and "=" not in items[0]:
            d = read(items.pop(0))
        for k, v in _override_map(items, "base").items():
            set_dotted(d, k, v)
        return d
    if isinstance(base, dict):
        base = dict(base)
        start = base.pop("config", None)
        d = read(start) if start else {}
        return _merge(d, base)
    raise ConfigError(f"sweep base: expected a preset name, a mapping or a list, got {type(base).__name__}")


def expand_grid(grid: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Cartesian product of a {key: [values]} grid, in order (the last key varies fastest)."""
    if not isinstance(grid, dict) or not grid:
        raise ConfigError("sweep grid: expected a non-empty mapping of dotted key -> list of values")
    keys, values = [], []
    for k, v in grid.items():
        vals = v if isinstance(v, list) else [v]
        if not vals:
            raise ConfigError(f"sweep grid: {k} has no values")
        keys.append(k)
        values.append(vals)
    return [dict(zip(keys, combo)) for combo in itertools.product(*values)]


def format_value(v: Any) -> str:
    """Compact text of an override value for run names: 1e-05, 0.5, none, 3-4."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, (list, tuple)):
        return "-".join(format_value(x) for x in v)
    if isinstance(v, dict):
        return "-".join(f"{k}{format_value(x)}" for k, x in v.items())
    return str(v)


def sanitize_name(name: str) -> str:
    """A file-name-safe run name: characters outside [A-Za-z0-9._=,+-] become '_'; long names are cut
    and suffixed with a short hash so they stay unique."""
    import hashlib

    s = SAFE_NAME.sub("_", name).strip(".") or "run"
    if len(s) > MAX_NAME:
        s = s[: MAX_NAME - 9] + "~" + hashlib.sha1(name.encode()).hexdigest()[:8]
    return s


def run_name(overrides: dict[str, Any], all_keys: list[str]) -> str:
    """``short=value,...`` for the run's overrides; short = the key's last part unless two keys of the
    sweep share it (then the full dotted key)."""
    if not overrides:
        return "base"
    last = [k.rsplit(".", 1)[-1] for k in all_keys]
    short = {k: (k.rsplit(".", 1)[-1] if last.count(k.rsplit(".", 1)[-1]) == 1 else k) for k in all_keys}
    return sanitize_name(",".join(f"{short.get(k, k)}={format_value(v)}" for k, v in overrides.items()))


def resolve_config(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """The validated, fully resolved config (plain nested data) of ``base`` plus dotted ``overrides``."""
    import copy

    from smallinit.train.config import load_config

    d = copy.deepcopy(base)
    for k, v in overrides.items():
        set_dotted(d, k, v)
    return load_config(None, [], base=d).to_dict()


def parse_sweep(d: Any, where: str = "sweep", here: Path | None = None) -> SweepSpec:
    """A :class:`SweepSpec` from the plain data of a sweep file (see the module docstring)."""
    if not isinstance(d, dict):
        raise ConfigError(f"{where}: a sweep file must be a mapping with base: and grid: or runs:")
    unknown = sorted(set(d) - set(SWEEP_KEYS))
    if unknown:
        raise ConfigError(f"{where}: unknown sweep key {unknown[0]!r}; known keys: {', '.join(SWEEP_KEYS)}")
    if ("grid" in d) == ("runs" in d):
        raise ConfigError(f"{where}: give exactly one of grid: (a cartesian product) or runs: (a list)")
    base = _read_base(d.get("base"), here)
    for k, v in _override_map(d.get("overrides"), f"{where}: overrides").items():
        set_dotted(base, k, v)
    explicit: list[str | None] = []
    if "grid" in d:
        combos = [{k: (v if not isinstance(v, str) else _override_map({k: v}, where)[k]) for k, v in c.items()}
                  for c in expand_grid(d["grid"])]
        explicit = [None] * len(combos)
    else:
        if not isinstance(d["runs"], list) or not d["runs"]:
            raise ConfigError(f"{where}: runs: must be a non-empty list of override mappings")
        combos = []
        for i, r in enumerate(d["runs"]):
            r = dict(r) if isinstance(r, dict) else r
            name = r.pop("name", None) if isinstance(r, dict) else None
            combos.append(_override_map(r, f"{where}: runs[{i}]"))
            explicit.append(str(name) if name is not None else None)
    all_keys: list[str] = []
    for c in combos:
        all_keys += [k for k in c if k not in all_keys]
    runs, seen = [], {}
    for c, name in zip(combos, explicit):
        n = sanitize_name(name) if name else run_name(c, all_keys)
        if n in seen:
            raise ConfigError(f"{where}: two runs are both named {n!r}; give them distinct settings or names")
        seen[n] = True
        try:
            cfg = resolve_config(base, c)
        except ConfigError as e:
            raise ConfigError(f"{where}: run {n}: {e}") from None
        runs.append(RunSpec(n, c, cfg))
    return SweepSpec(base, runs, where)


def load_sweep(path: str | os.PathLike) -> SweepSpec:
    """Read and resolve a sweep YAML file (every run's config is validated here, before anything runs)."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"sweep file not found: {p}")
    try:
        d = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        raise ConfigError(f"{p}: not valid YAML ({str(e).splitlines()[0]})") from None
    return parse_sweep(d, str(p), here=p.parent)


# ---- run directories -------------------------------------------------------------------------------

def read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def run_state(run_dir: str | os.PathLike) -> str:
    """"done" (summary.json says completed), "failed" (failed.json), "partial" (config.yaml, no summary:
    interrupted, resumable) or "new"."""
    rd = Path(run_dir)
    s = read_json(rd / "summary.json")
    if s and s.get("completed"):
        return "done"
    if (rd / "failed.json").exists():
        return "failed"
    if (rd / "config.yaml").exists():
        return "partial"
    return "new"


from smallinit.io import read_jsonl  # noqa: E402,F401  (re-exported for callers)


def last_step(run_dir: Path) -> int:
    """The last step logged in ``metrics.jsonl`` (cheap: reads only the file's tail)."""
    p = Path(run_dir) / "metrics.jsonl"
    try:
        with open(p, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - 4096))
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return 0
    for line in reversed(lines):
        try:
            return int(json.loads(line)["step"])
        except (ValueError, KeyError, TypeError):
            continue
    return 0


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _with_defaults(cfg: dict[str, Any]) -> dict[str, Any]:
    """``cfg`` with every field the code knows filled in (unchanged when it is not a valid config)."""
    from smallinit.train.config import config_from_dict

    try:
        return config_from_dict(cfg).to_dict()
    except Exception:  # noqa: BLE001 - a broken config is reported by the comparison itself
        return cfg


def config_mismatch(existing: dict[str, Any], wanted: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Dotted keys whose values differ between a run's saved config and the wanted one (execution-only
    fields and data-decided ones ignored). Both go through the config dataclasses first, so a field added
    to the code since the run was written compares at its default instead of as missing."""
    a, b = _flat(_with_defaults(existing)), _flat(_with_defaults(wanted))
    out = {}
    for k in sorted(set(a) | set(b)):
        if k in IGNORED_IN_COMPARISON:
            continue
        va, vb = a.get(k), b.get(k)
        if isinstance(va, (list, tuple)) and isinstance(vb, (list, tuple)):
            va, vb = list(va), list(vb)
        if va != vb:
            out[k] = (va, vb)
    return out


def summarize_probe_record(rec: dict[str, Any]) -> dict[str, float | None]:
    """Key numbers of one probes.jsonl record: ``sink`` (mean over layers of the first-token attention
    share), ``sink_max``, ``uniform_sink``, ``saturation_min`` (lowest RMSNorm saturation over all norms),
    ``srank_mean`` / ``cond_mean`` (mean stable rank / condensation index over block matrices),
    ``max_act`` (largest residual activation)."""
    layers = rec.get("layers") or []

    def vals(xs):
        return [x for x in xs if isinstance(x, (int, float)) and math.isfinite(x)]

    sinks = vals([l.get("sink") for l in layers])
    sats = vals([(l.get(n) or {}).get("saturation") for l in layers for n in ("attn_norm", "mlp_norm")]
                + [(rec.get("final_norm") or {}).get("saturation")])
    mats = {k: v for k, v in (rec.get("matrices") or {}).items() if k.startswith("blocks.")}
    sr = vals([m.get("srank") for m in mats.values()])
    co = vals([m.get("cond") for m in mats.values()])
    acts = vals([l.get("max_act") for l in layers])

    def mean(xs):
        return sum(xs) / len(xs) if xs else None

    return {"sink": mean(sinks), "sink_max": max(sinks) if sinks else None, "uniform_sink": rec.get("uniform_sink"),
            "saturation_min": min(sats) if sats else None, "srank_mean": mean(sr), "cond_mean": mean(co),
            "max_act": max(acts) if acts else None}


def collect_run(run_dir: str | os.PathLike) -> dict[str, Any]:
    """What a finished (or partial) run directory says: state, final/best losses, tokens, parameters,
    wall time, and the last probe record summarized (``probe_*`` keys)."""
    rd = Path(run_dir)
    out: dict[str, Any] = {"state": run_state(rd)}
    s = read_json(rd / "summary.json") or {}
    metrics = read_jsonl(rd / "metrics.jsonl")
    vals = [m for m in metrics if m.get("val_loss") is not None]
    tunes = [m for m in metrics if m.get("tune_loss") is not None]
    out["final_val_loss"] = s.get("final_val_loss", vals[-1]["val_loss"] if vals else None)
    out["final_tune_loss"] = tunes[-1]["tune_loss"] if tunes else None
    out["step"] = s.get("step", metrics[-1]["step"] if metrics else 0)
    out["tokens"] = s.get("tokens", metrics[-1].get("tokens") if metrics else 0)
    out["wall_time"] = s.get("wall_time", metrics[-1].get("wall_time") if metrics else None)
    out["params"] = s.get("params")
    out["non_embedding_params"] = s.get("non_embedding_params")
    tps = [m["tokens_per_s"] for m in metrics if m.get("tokens_per_s")]
    out["tokens_per_s"] = sorted(tps)[len(tps) // 2] if tps else None
    probes = read_jsonl(rd / "probes.jsonl")
    if probes:
        out.update({f"probe_{k}": v for k, v in summarize_probe_record(probes[-1]).items()})
    failed = read_json(rd / "failed.json")
    if failed:
        out["error"] = failed.get("error")
    return out


# ---- jobs ------------------------------------------------------------------------------------------

@dataclass
class Job:
    """One unit of work for :class:`JobRunner`: a ``smallinit`` command that fills ``run_dir``.

    ``argv`` starts the run from scratch, ``resume_argv`` (None: restart instead) continues a partial one.
    ``expected_config`` (optional) is compared with an existing ``run_dir/config.yaml`` first.
    ``est_seconds`` is the planned cost; ``total_steps`` lets the runner read progress from metrics.jsonl.
    """

    name: str
    run_dir: Path
    argv: list[str]
    resume_argv: list[str] | None = None
    est_seconds: float = 0.0
    total_steps: int = 0
    expected_config: dict[str, Any] | None = None
    label: str = ""


@dataclass
class JobResult:
    name: str
    state: str  # done | failed | interrupted
    seconds: float = 0.0
    resumed: bool = False
    skipped: bool = False
    rc: int | None = None


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    """In the child: receive SIGKILL when the parent dies (Linux), so a killed sweep leaves no orphan
    training that would hold the run directory's lock."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def fmt_seconds(s: float | None) -> str:
    """12s, 3m05s, 1h02m."""
    if s is None or not math.isfinite(s):
        return "?"
    s = max(0, int(round(s)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


class JobRunner:
    """Run jobs sequentially or ``parallel`` at a time, skipping finished ones, resuming partial ones, with a
    progress display (which job of how many, estimated time left).

    Each job runs as ``python -m smallinit ARGV`` with its output in ``run_dir/job.log`` (``inprocess=True``
    calls the CLI in this process instead — for tests). The estimate of time left is the planned cost of
    the remaining work scaled by (actual / planned) of the jobs finished so far, divided by ``parallel``.
    """

    def __init__(self, jobs: list[Job], parallel: int = 1, *, inprocess: bool = False, retry_failed: bool = False,
                 log: Callable[[str], None] | None = None, status_every: float = 60.0, title: str = "sweep",
                 on_finish: Callable[[Job, JobResult], None] | None = None, index_offset: int = 0,
                 total: int | None = None, later_seconds: float = 0.0):
        if parallel < 1:
            raise ConfigError(f"--jobs must be >= 1, got {parallel}")
        names = [j.name for j in jobs]
        if len(set(names)) != len(names):
            raise ConfigError("two jobs share a name")
        self.jobs = jobs
        self.parallel = 1 if inprocess else parallel
        self.inprocess = inprocess
        self.retry_failed = retry_failed
        self.log = log or (lambda s: print(s, flush=True))
        self.status_every = status_every
        self.title = title
        self.on_finish = on_finish
        self.index_offset = index_offset  # numbering across several runners (phases): job i of total
        self.total = total
        self.later_seconds = later_seconds  # planned cost of work after this runner (for the ETA)
        self.results: dict[str, JobResult] = {}
        self._ratio_num = 0.0  # actual seconds of jobs run from scratch
        self._ratio_den = 0.0  # their planned seconds

    # -- estimates
    def _factor(self) -> float:
        return self._ratio_num / self._ratio_den if self._ratio_den > 0 else 1.0

    def _progress(self, job: Job) -> float:
        if job.total_steps <= 0:
            return 0.0
        return min(1.0, last_step(job.run_dir) / job.total_steps)

    def eta(self, pending: list[Job], running: dict[str, tuple[Job, Any, float]]) -> float:
        f = self._factor()
        if self._ratio_den == 0:  # nothing finished yet: judge the running jobs' pace (actual vs planned)
            live = []
            for j, _, t0 in running.values():
                frac = self._progress(j)
                if frac >= 0.05 and j.est_seconds > 0:
                    live.append((time.time() - t0) / frac / j.est_seconds)
            if live:
                f = sum(live) / len(live)
        left = (sum(j.est_seconds for j in pending) + self.later_seconds) * f
        left += sum(j.est_seconds * (1 - self._progress(j)) * f for j, _, _ in running.values())
        return left / max(1, self.parallel)

    # -- checks
    def _check_config(self, job: Job) -> None:
        if job.expected_config is None:
            return
        p = job.run_dir / "config.yaml"
        if not p.is_file():
            return
        try:
            existing = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError:
            return
        diff = config_mismatch(existing, job.expected_config)
        if diff:
            k, (a, b) = next(iter(diff.items()))
            raise RunDirError(f"{job.run_dir} holds a run with another config ({k}: {a!r} there, {b!r} wanted"
                              f"{f'; {len(diff) - 1} more' if len(diff) > 1 else ''}); delete it or choose another --out")

    # -- execution
    def _launch(self, job: Job, resume: bool):
        argv = job.resume_argv if resume else job.argv
        job.run_dir.mkdir(parents=True, exist_ok=True)
        if self.inprocess:
            return None
        logf = open(job.run_dir / "job.log", "ab")
        logf.write(f"\n$ smallinit {' '.join(argv)}\n".encode())
        logf.flush()
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        proc = subprocess.Popen([sys.executable, "-m", "smallinit", *argv], stdout=logf, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env,
                                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None)
        logf.close()
        return proc

    def _run_inprocess(self, job: Job, resume: bool) -> int:
        from contextlib import redirect_stderr, redirect_stdout

        from smallinit.cli import main

        argv = job.resume_argv if resume else job.argv
        buf = io.StringIO()
        with redirect_stdout(buf), redirect_stderr(buf):
            try:
                rc = main(list(argv))
            except Exception as e:  # noqa: BLE001 - reported like a failed subprocess
                print(f"error: {type(e).__name__}: {e}", file=buf)
                rc = 1
        with open(job.run_dir / "job.log", "a") as f:
            f.write(f"\n$ smallinit {' '.join(argv)}\n{buf.getvalue()}")
        return rc

    def _finish(self, job: Job, rc: int, started: float, resumed: bool) -> JobResult:
        secs = time.time() - started
        state = run_state(job.run_dir)
        if rc == 0 and state == "done":
            res = JobResult(job.name, "done", secs, resumed, rc=rc)
            if not resumed and job.est_seconds > 0:
                self._ratio_num += secs
                self._ratio_den += job.est_seconds
        elif rc is not None and (rc < 0 or rc == 130):
            res = JobResult(job.name, "interrupted", secs, resumed, rc=rc)
        else:
            tail = ""
            try:
                tail = "\n".join((job.run_dir / "job.log").read_text(errors="replace").splitlines()[-15:])
            except OSError:
                pass
            err = next((l[len("error: "):] for l in reversed(tail.splitlines()) if l.startswith("error: ")), None)
            atomic_write_json(job.run_dir / "failed.json", {"rc": rc, "error": err or f"exit status {rc}",
                                                            "log_tail": tail, "time": time.time()})
            res = JobResult(job.name, "failed", secs, resumed, rc=rc)
        self.results[job.name] = res
        if self.on_finish:
            self.on_finish(job, res)
        return res

    def run(self) -> dict[str, JobResult]:
        n = self.total or len(self.jobs)
        index = {j.name: self.index_offset + i + 1 for i, j in enumerate(self.jobs)}
        self._by_name = {j.name: j for j in self.jobs}
        pending: list[Job] = []
        for j in self.jobs:
            self._check_config(j)
            st = run_state(j.run_dir)
            if st == "done":
                self.results[j.name] = JobResult(j.name, "done", skipped=True)
            elif st == "failed" and not self.retry_failed:
                self.results[j.name] = JobResult(j.name, "failed", skipped=True)
            else:
                if st == "failed":
                    (j.run_dir / "failed.json").unlink()
                pending.append(j)
        skipped = len(self.jobs) - len(pending)
        if skipped:
            nf = sum(1 for r in self.results.values() if r.state == "failed")
            self.log(f"[{self.title}] {skipped}/{len(self.jobs)} already finished ({nf} failed earlier; "
                     f"{'retrying' if self.retry_failed else 'not retried'}) — skipped")
        if pending:
            self.log(f"[{self.title}] {len(pending)} to run, {self.parallel} at a time; "
                     f"planned ≈ {fmt_seconds(self.eta(pending, {}))}")
        running: dict[str, tuple[Job, Any, float, bool]] = {}
        last_status = time.time()
        try:
            while pending or running:
                while pending and len(running) < self.parallel:
                    job = pending.pop(0)
                    resume = run_state(job.run_dir) == "partial" and job.resume_argv is not None
                    where = f" (resuming from step {last_step(job.run_dir)})" if resume else ""
                    self.log(f"[{self.title}] {index[job.name]}/{n} start {job.label or job.name}{where} · planned "
                             f"{fmt_seconds(job.est_seconds * self._factor())} · ETA "
                             f"{fmt_seconds(self.eta(pending + [job], {k: v[:3] for k, v in running.items()}))}")
                    t0 = time.time()
                    if self.inprocess:
                        self._launch(job, resume)
                        rc = self._run_inprocess(job, resume)
                        self._report(self._finish(job, rc, t0, resume), index, n, pending, running)
                    else:
                        running[job.name] = (job, self._launch(job, resume), t0, resume)
                for name in list(running):
                    job, proc, t0, resume = running[name]
                    rc = proc.poll()
                    if rc is not None:
                        del running[name]
                        self._report(self._finish(job, rc, t0, resume), index, n, pending, running)
                if running:
                    time.sleep(0.5)
                    if time.time() - last_status >= self.status_every:
                        last_status = time.time()
                        parts = [f"{j.label or j.name} step {last_step(j.run_dir)}/{j.total_steps}"
                                 for j, _, _, _ in running.values()]
                        done = sum(1 for r in self.results.values() if r.state == "done")
                        self.log(f"[{self.title}] running: {'; '.join(parts)} · {done}/{n} done · ETA "
                                 f"{fmt_seconds(self.eta(pending, {k: v[:3] for k, v in running.items()}))}")
        except BaseException:
            for job, proc, _, _ in running.values():
                if proc is not None and proc.poll() is None:
                    proc.send_signal(signal.SIGINT)
            deadline = time.time() + 10
            for job, proc, _, _ in running.values():
                if proc is None:
                    continue
                try:
                    proc.wait(timeout=max(0.1, deadline - time.time()))
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            raise
        return self.results

    def _report(self, res: JobResult, index, n, pending, running) -> None:
        extra = ""
        job = self._by_name[res.name]
        if res.state == "done":
            s = read_json(job.run_dir / "summary.json") or {}
            if s.get("final_val_loss") is not None:
                extra = f" · val_loss {s['final_val_loss']:.4f}"
            if s.get("heldout_acc") is not None:
                extra += f" · held-out acc {s['heldout_acc']:.3f}"
        elif res.state == "failed":
            f = read_json(job.run_dir / "failed.json") or {}
            extra = f" · {f.get('error')}"
        self.log(f"[{self.title}] {index[res.name]}/{n} {res.state} {job.label or job.name} in "
                 f"{fmt_seconds(res.seconds)}{extra} · ETA "
                 f"{fmt_seconds(self.eta(pending, {k: v[:3] for k, v in running.items()}))}")


# ---- cost ------------------------------------------------------------------------------------------

def model_cost(config: dict[str, Any]) -> dict[str, float]:
    """Parameters and training FLOPs of a resolved run config (model built on the meta device, so even
    paper-sized models cost nothing): ``params``, ``non_embedding_params``, ``active_params``,
    ``flops_per_token`` (6N + 12·L·T·d, see Transformer.flops_per_token), ``tokens`` and ``flops``
    (training plus the forward passes of the evaluations)."""
    m = dict(config["model"])
    meta = read_json(Path(str(config["data"].get("path", ""))) / "meta.json")
    if meta and meta.get("vocab_size"):
        m["vocab_size"] = int(meta["vocab_size"])  # the data decides the vocabulary, as in training
    T = int(config["data"]["seq_len"])
    m["max_seq_len"] = max(int(m.get("max_seq_len", 0)), T)
    params, non_emb, active, fpt = _model_numbers(json.dumps(m, sort_keys=True), T)
    tr = config["train"]
    steps, B = int(tr["max_steps"]), int(tr["batch_size"])
    tokens = steps * B * T
    n_evals = steps // int(tr["eval_every"]) + 1
    eval_tokens = n_evals * (int(config["data"]["val_batches"]) + int(config["data"].get("tune_batches", 0))) * B * T
    return {"params": params, "non_embedding_params": non_emb, "active_params": active, "flops_per_token": fpt,
            "tokens": tokens, "flops": fpt * tokens + fpt / 3 * eval_tokens}


@functools.lru_cache(maxsize=256)
def _model_numbers(model_json: str, seq_len: int) -> tuple[int, int, int, float]:
    from smallinit.model import ModelConfig

    model = _meta_model(ModelConfig.from_dict(json.loads(model_json)))
    return (model.num_params(), model.num_params(non_embedding=True), model.num_params(active=True),
            model.flops_per_token(seq_len))


def _meta_model(mc):
    """A Transformer on the meta device (no memory, no init work)."""
    import torch

    from smallinit.model import Transformer

    orig = Transformer.reset_parameters
    try:
        Transformer.reset_parameters = lambda self, generator=None: None  # type: ignore[assignment]
        with torch.device("meta"):
            return Transformer(mc)
    finally:
        Transformer.reset_parameters = orig  # type: ignore[assignment]


def measure_gflops(config: dict[str, Any] | None = None, steps: int = 3, threads: int = 0) -> float:
    """Training throughput of this machine in GFLOP/s (counted as in ``flops_per_token``), timed on a few
    AdamW steps of the ``config``'s model (default: the tiny preset shape) on random tokens."""
    import torch
    import torch.nn.functional as F

    from smallinit.model import ModelConfig, Transformer

    if config is None:
        mc = ModelConfig.from_preset("tiny", max_seq_len=128)
        T, B = 128, 16
    else:
        mc = ModelConfig.from_dict(dict(config["model"]))
        T, B = int(config["data"]["seq_len"]), int(config["train"]["batch_size"])
    old = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        torch.manual_seed(0)
        model = Transformer(mc)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        x = torch.randint(0, mc.vocab_size, (B, T))

        def step():
            loss = F.cross_entropy(model(x).flatten(0, 1), x.flatten())
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        step()
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        dt = (time.perf_counter() - t0) / steps
        return model.flops_per_token(T) * B * T / dt / 1e9
    finally:
        torch.set_num_threads(old)


# ---- sweeps ----------------------------------------------------------------------------------------

def default_threads(parallel: int) -> int:
    """torch threads per job when ``parallel`` jobs share this machine's cores (0 = PyTorch default)."""
    if parallel <= 1:
        return 0
    return max(1, (os.cpu_count() or 1) // parallel)


def train_job(name: str, config: dict[str, Any], out_dir: Path, *, parallel: int = 1, gflops: float | None = None,
              label: str = "", write: bool = True) -> Job:
    """A :class:`Job` that trains ``config`` into ``out_dir/name`` (config written to ``out_dir/configs`` unless
    ``write`` is False, e.g. for a dry run)."""
    import copy

    cfg = copy.deepcopy(config)
    cfg["train"]["progress"] = False
    if parallel > 1 and not cfg["train"].get("threads"):
        cfg["train"]["threads"] = default_threads(parallel)
    cfg_path = out_dir / "configs" / f"{name}.yaml"
    if write:
        atomic_write_text(cfg_path, yaml.safe_dump(cfg, sort_keys=False))
    run_dir = out_dir / name
    est = model_cost(cfg)["flops"] / (gflops * 1e9) if gflops else 0.0
    return Job(name, run_dir, ["train", "--config", str(cfg_path), "--out", str(run_dir)],
               ["train", "--resume", str(run_dir)], est_seconds=est, total_steps=int(cfg["train"]["max_steps"]),
               expected_config=cfg, label=label)


def run_sweep(spec: SweepSpec, out_dir: str | os.PathLike, jobs: int = 1, *, retry_failed: bool = False,
              gflops: float | None = None, log: Callable[[str], None] | None = None,
              inprocess: bool = False) -> dict[str, JobResult]:
    """Run (or resume) every run of ``spec`` under ``out_dir``; write ``summary.csv`` and ``summary.md``
    (also after each finished run, so the table is current if the sweep is stopped)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    log = log or (lambda s: print(s, flush=True))
    if gflops is None:
        gflops = measure_gflops(spec.runs[0].config, threads=default_threads(jobs))
        log(f"[sweep] measured {gflops:.1f} GFLOP/s on this machine (for the time estimates)")
    atomic_write_json(out / "sweep.json", {"source": spec.source, "base": spec.base,
                                           "runs": [{"name": r.name, "overrides": r.overrides} for r in spec.runs]})
    job_list = [train_job(r.name, r.config, out, parallel=jobs, gflops=gflops) for r in spec.runs]

    def refresh(job: Job, res: JobResult) -> None:
        write_summary(spec, out)

    runner = JobRunner(job_list, jobs, inprocess=inprocess, retry_failed=retry_failed, log=log, on_finish=refresh)
    results = runner.run()
    write_summary(spec, out)
    done = sum(1 for r in results.values() if r.state == "done")
    log(f"[sweep] {done}/{len(spec.runs)} runs done → {out / 'summary.md'}")
    return results


SUMMARY_COLUMNS = ["state", "final_val_loss", "final_tune_loss", "tokens", "non_embedding_params", "wall_time",
                   "tokens_per_s", "probe_sink", "probe_sink_max", "probe_saturation_min", "probe_srank_mean",
                   "probe_cond_mean", "probe_max_act"]


def summary_rows(spec: SweepSpec, out_dir: Path) -> list[dict[str, Any]]:
    rows = []
    for r in spec.runs:
        info = collect_run(Path(out_dir) / r.name)
        row = {"run": r.name, **{k: r.overrides.get(k) for k in spec.keys}}
        row.update({k: info.get(k) for k in SUMMARY_COLUMNS})
        if info.get("error"):
            row["state"] = f"failed: {info['error']}"
        rows.append(row)
    return rows


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1e5 else f"{v:.3e}"
    return str(v)


def write_summary(spec: SweepSpec, out_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """Write ``summary.csv`` and ``summary.md`` (one row per run; probe columns only when some run has them)."""
    out = Path(out_dir)
    rows = summary_rows(spec, out)
    cols = ["run", *spec.keys] + [c for c in SUMMARY_COLUMNS if any(r.get(c) is not None for r in rows)
                                  or c in ("state", "final_val_loss", "tokens", "wall_time")]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in cols})
    atomic_write_text(out / "summary.csv", buf.getvalue())
    md = [f"# Sweep summary ({len(rows)} runs)", "", "| " + " | ".join(cols) + " |",
          "|" + "|".join("---" for _ in cols) + "|"]
    md += ["| " + " | ".join(_cell(r.get(c)) for c in cols) + " |" for r in rows]
    atomic_write_text(out / "summary.md", "\n".join(md) + "\n")
    return rows


__all__ = ["Job", "JobResult", "JobRunner", "RunSpec", "SweepSpec", "collect_run", "config_mismatch",
           "default_threads", "expand_grid", "fmt_seconds", "load_sweep", "measure_gflops", "model_cost",
           "parse_sweep", "read_jsonl", "resolve_config", "run_name", "run_state", "run_sweep", "sanitize_name",
           "summarize_probe_record", "train_job", "write_summary"]
