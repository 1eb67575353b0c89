"""Sweeps: many training runs that differ in a few config fields, run resumably, summarized in one table.

A sweep file (YAML)::

    base: tiny                        # config name or YAML path; or a nested config mapping
                                      # (optionally with ``config: NAME``); or a list [NAME, key=value, ...]
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
in ``OUT/<name>/`` (a normal run directory: ``smallinit train --resume`` works on it). Each run is a
:class:`~smallinit.experiments.job.Job` (task ``train``, its typed config) run by
:class:`~smallinit.experiments.runner.JobRunner` in a subprocess ``python -m smallinit.experiments.job
OUT/jobs/<name>.json`` (a kill of the sweep kills the child too and leaves every run directory consistent:
checkpoints are atomic).

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

import copy
import csv
import io
import itertools
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from smallinit.config import RunConfig
from smallinit.core.errors import ConfigError
from smallinit.core.io import atomic_write_json, atomic_write_text
from smallinit.experiments.cost import check_gflops, default_threads, fmt_seconds, measure_gflops, model_cost
from smallinit.experiments.job import Job
from smallinit.experiments.runner import JobResult, JobRunner
from smallinit.runs.rundir import collect_run, config_mismatch, read_json, read_jsonl, run_state, summarize_probe_record

SWEEP_KEYS = ("base", "overrides", "grid", "runs")
SAFE_NAME = re.compile(r"[^A-Za-z0-9._=,+\-]")
MAX_NAME = 120
RESERVED_NAMES = ("summary.csv", "summary.md", "jobs", "failed", "sweep.json", "cluster")
"""The sweep's own files and folders in OUT (``jobs/`` holds the runs' job files and logs, ``cluster/`` the jobs of
``--launcher slurm``): a run of that name would collide with them, so :func:`parse_sweep` refuses it up front
(compared case-insensitively)."""


# ---- the sweep file ----------------------------------------------------------------------------


@dataclass
class RunSpec:
    """One run of a sweep: its name, its own overrides (dotted key → value) and the resolved config."""

    name: str
    overrides: dict[str, Any]
    config: RunConfig = field(default_factory=RunConfig)


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
    from smallinit.config import parse_value, set_dotted

    set_dotted(d, key, parse_value(value) if isinstance(value, str) else value, what="sweep key")


def _override_map(value: Any, where: str) -> dict[str, Any]:
    """A mapping {dotted key: value} from a mapping or a list of "key=value" strings."""
    from smallinit.config import parse_value

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
    from smallinit.config import _merge, read_config_file

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
    raise ConfigError(f"sweep base: expected a config name, a mapping or a list, got {type(base).__name__}")


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


def resolve_config(base: dict[str, Any], overrides: dict[str, Any]) -> RunConfig:
    """The validated, fully resolved (typed) config of ``base`` plus dotted ``overrides``."""
    from smallinit.config import load_config

    d = copy.deepcopy(base)
    for k, v in overrides.items():
        set_dotted(d, k, v)
    return load_config(None, [], base=d)


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
        combos = [
            {k: (v if not isinstance(v, str) else _override_map({k: v}, where)[k]) for k, v in c.items()}
            for c in expand_grid(d["grid"])
        ]
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
        if n.lower() in RESERVED_NAMES:
            raise ConfigError(
                f"{where}: run name {n!r} is taken by the sweep's own files in OUT "
                f"({', '.join(RESERVED_NAMES)}); give the run another name"
            )
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
    except UnicodeDecodeError:
        raise ConfigError(f"{p}: not UTF-8 text") from None
    return parse_sweep(d, str(p), here=p.parent)


# ---- sweeps ----------------------------------------------------------------------------------------


def train_job(
    name: str, config: RunConfig, out_dir: Path, *, parallel: int = 1, gflops: float | None = None, label: str = ""
) -> Job:
    """A :class:`Job` that trains ``config`` (typed) into ``out_dir/name``: no progress bar, and cores/parallel
    torch threads when several jobs share the machine (unless train.threads is set)."""
    cfg = copy.deepcopy(config)
    cfg.train.progress = False
    if parallel > 1 and not cfg.train.threads:
        cfg.train.threads = default_threads(parallel)
    est = model_cost(cfg)["flops"] / (gflops * 1e9) if gflops else 0.0
    return Job(
        name, Path(out_dir) / name, "train", cfg, est_seconds=est, total_steps=int(cfg.train.max_steps), label=label
    )


def run_sweep(
    spec: SweepSpec,
    out_dir: str | os.PathLike,
    jobs: int = 1,
    *,
    retry_failed: bool = False,
    gflops: float | None = None,
    log: Callable[[str], None] | None = None,
    inprocess: bool = False,
    launcher: Any = None,
) -> dict[str, JobResult]:
    """Run (or resume) every run of ``spec`` under ``out_dir``; write ``summary.csv`` and ``summary.md``
    (also after each finished run, so the table is current if the sweep is stopped). ``launcher``: the runs are
    cluster jobs (:class:`smallinit.experiments.launcher.Launcher`; no throughput is measured here for them)."""
    from smallinit.core.errors import ConfigError, DataError
    from smallinit.core.outputs import check_out_dir
    from smallinit.train.loop import RunLock

    out = Path(out_dir)
    check_out_dir(out, "sweep", can_continue=True, verb="sweep")
    if jobs < 1:
        raise ConfigError(f"--jobs must be >= 1, got {jobs}")
    check_gflops(gflops)
    for r in spec.runs:  # the data of every run still to train, before the folder and the first run
        if run_state(out / r.name) != "done" and not (Path(r.config.data.path) / "meta.json").is_file():
            raise DataError(
                f"run {r.name}: data.path {r.config.data.path} is not a prepared data directory "
                "(no meta.json); run smallinit prepare"
            )
    out.mkdir(parents=True, exist_ok=True)
    with RunLock(out):  # a second sweep on the same folder is refused with the holder's pid
        return _run_sweep_locked(spec, out, jobs, retry_failed, gflops, log, inprocess, launcher)


def _run_sweep_locked(
    spec: SweepSpec,
    out: Path,
    jobs: int,
    retry_failed: bool,
    gflops: float | None,
    log: Callable[[str], None] | None,
    inprocess: bool,
    launcher: Any = None,
) -> dict[str, JobResult]:
    log = log or (lambda s: print(s, flush=True))
    before = read_json(out / "sweep.json") or {}
    gone = sorted({r.get("name") for r in before.get("runs", []) if isinstance(r, dict)} - {r.name for r in spec.runs})
    if gone:  # another sweep's folder: its runs would drop out of the summary (a grid may grow, not change)
        raise ConfigError(
            f"{out} holds another sweep (from {before.get('source')}; its runs {', '.join(gone[:3])}"
            f"{' …' if len(gone) > 3 else ''} are not in {spec.source}); choose another --out"
        )
    if gflops is None and launcher is None:
        gflops = measure_gflops(spec.runs[0].config, threads=default_threads(jobs))
        log(
            f"[sweep] measured {gflops:.1f} GFLOP/s on this machine in {getattr(gflops, 'dtype', 'fp32')} (for the "
            "time estimates)"
        )
    atomic_write_json(
        out / "sweep.json",
        {
            "source": spec.source,
            "base": spec.base,
            "runs": [{"name": r.name, "overrides": r.overrides} for r in spec.runs],
        },
    )
    job_list = [train_job(r.name, r.config, out, parallel=jobs, gflops=gflops) for r in spec.runs]

    def refresh(job: Job, res: JobResult) -> None:
        write_summary(spec, out)

    runner = JobRunner(
        job_list, jobs, inprocess=inprocess, retry_failed=retry_failed, log=log, on_finish=refresh, launcher=launcher
    )
    results = runner.run()
    write_summary(spec, out)
    done = sum(1 for r in results.values() if r.state == "done")
    log(f"[sweep] {done}/{len(spec.runs)} runs done → {out / 'summary.md'}")
    return results


SUMMARY_COLUMNS = [
    "state",
    "final_val_loss",
    "final_tune_loss",
    "tokens",
    "non_embedding_params",
    "wall_time",
    "tokens_per_s",
    "probe_sink",
    "probe_sink_max",
    "probe_saturation_min",
    "probe_srank_mean",
    "probe_cond_mean",
    "probe_max_act",
]


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
    cols = ["run", *spec.keys] + [
        c
        for c in SUMMARY_COLUMNS
        if any(r.get(c) is not None for r in rows) or c in ("state", "final_val_loss", "tokens", "wall_time")
    ]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in cols})
    atomic_write_text(out / "summary.csv", buf.getvalue())
    md = [
        f"# Sweep summary ({len(rows)} runs)",
        "",
        "| " + " | ".join(cols) + " |",
        "|" + "|".join("---" for _ in cols) + "|",
    ]
    md += ["| " + " | ".join(_cell(r.get(c)) for c in cols) + " |" for r in rows]
    atomic_write_text(out / "summary.md", "\n".join(md) + "\n")
    return rows


__all__ = [
    "RunSpec",
    "SweepSpec",
    "expand_grid",
    "load_sweep",
    "parse_sweep",
    "resolve_config",
    "run_name",
    "run_sweep",
    "sanitize_name",
    "summary_rows",
    "train_job",
    "write_summary",
]
# re-exported for callers of the old layout (these live in cost.py, job.py, runner.py and smallinit.runs.rundir)
__all__ += [
    "Job",
    "JobResult",
    "JobRunner",
    "collect_run",
    "config_mismatch",
    "default_threads",
    "fmt_seconds",
    "measure_gflops",
    "model_cost",
    "read_jsonl",
    "run_state",
    "summarize_probe_record",
]
