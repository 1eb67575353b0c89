"""Health check of a run directory: what is wrong, and how to recover.

    report = check_run("runs/tiny")
    print(report.format())          # one line per check; problems carry a "fix:" line
    report.healthy                  # True when nothing needs attention

Checks, in order:

- ``config.yaml`` loads and validates (every checkpoint holds a copy to restore it from), and differs from the
  newest checkpoint's copy only where a resume recorded the change (``config_changes.jsonl``, listed as notes);
- ``.lock``: whether a process is training in the directory now (then files in flux are not problems);
- ``checkpoints/``: every ``step_*`` directory has a manifest and every file matches its SHA-256 and size;
  ``state.json`` names the directory's step; partial writes (``.tmp-*``) and incomplete directories
  (no manifest: a killed write or prune) are reported;
- ``metrics.jsonl``: every line parses, steps strictly increase, and no step that should have been
  logged is missing (steps s with s % log_every == 0, s % eval_every == 0 or s == max_steps);
- the data folder (``data.path``): the vocabulary and tokenizer the run trained with, every token id below the
  vocabulary (:func:`smallinit.runs.rundir.data_mismatch`, as ``train --resume`` checks);
- ``probes.jsonl``: every line parses and steps increase;
- ``summary.json``: present and parseable once the run completed (reported as **complete**, naming the step);
  ``diverged.json`` (written when training stopped on a non-finite or diverged loss) is reported as **diverged**,
  naming the first diverged step and the checkpoint kept from before it; otherwise how to resume.

``DoctorReport.status`` sums it up in one word: "complete", "diverged", "training", "failed" or "incomplete".

A problem is something the user should act on (a corrupted checkpoint, a torn log line, an interrupted
run); a note is information (a run in progress, steps to be recomputed on resume).
"""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from smallinit.core.errors import RunDirError, SmallinitError

OK, NOTE, PROBLEM = "ok", "note", "problem"


@dataclass
class Finding:
    level: str
    """"ok", "note" or "problem"."""
    what: str
    fix: str = ""


@dataclass
class DoctorReport:
    run_dir: Path
    findings: list[Finding] = field(default_factory=list)
    active_pid: int | None = None
    """The pid holding the run's lock (a run training now), else None."""
    status: str = "incomplete"
    """"complete", "diverged", "training", "failed" or "incomplete"."""

    @property
    def problems(self) -> list[Finding]:
        return [f for f in self.findings if f.level == PROBLEM]

    @property
    def healthy(self) -> bool:
        return not self.problems

    def add(self, level: str, what: str, fix: str = "") -> None:
        self.findings.append(Finding(level, what, fix))

    def format(self) -> str:
        tag = {OK: "ok      ", NOTE: "note    ", PROBLEM: "PROBLEM "}
        lines = [f"smallinit doctor: {self.run_dir}"]
        for f in self.findings:
            lines.append(f"  {tag[f.level]} {f.what}")
            if f.fix:
                lines.append(f"           fix: {f.fix}")
        n = len(self.problems)
        lines.append(f"status: {self.status}")
        lines.append("healthy" if n == 0 else f"{n} problem{'s' if n > 1 else ''} found")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_dir": str(self.run_dir),
            "healthy": self.healthy,
            "status": self.status,
            "active_pid": self.active_pid,
            "findings": [asdict(f) for f in self.findings],
        }


def lock_holder(run_dir: Path) -> int | None:
    """The pid recorded in ``RUN_DIR/.lock`` if a process holds the lock now (flock probe), else None."""
    path = run_dir / ".lock"
    if not path.is_file():
        return None
    fd = os.open(path, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 32, 0).decode(errors="replace").strip()
            return int(text) if text.isdigit() else -1
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _step_of(p: Path) -> int | None:
    try:
        return int(p.name[5:])
    except ValueError:
        return None


def _read_jsonl(path: Path) -> tuple[list[tuple[int, dict]], list[int]]:
    """([(line number, record)], [line numbers that do not parse as a JSON object])."""
    good, bad = [], []
    with open(path, encoding="utf-8", errors="replace") as f:
        for i, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except ValueError:
                bad.append(i)
                continue
            (good.append((i, r)) if isinstance(r, dict) else bad.append(i))
    return good, bad


def _check_config(rep: DoctorReport, rd: Path, good_ckpts: list[Path]):
    from smallinit.config import config_from_dict, read_config_file

    path = rd / "config.yaml"
    restore = (
        f"restore it from the newest good checkpoint: cp {good_ckpts[-1] / 'config.yaml'} {path}"
        if good_ckpts
        else "no checkpoint holds a copy; recreate it with the run's original settings"
    )
    if not path.is_file():
        rep.add(PROBLEM, "config.yaml is missing", restore)
        return None
    try:
        raw = read_config_file(path)
        cfg = config_from_dict(raw)
    except SmallinitError as e:
        rep.add(PROBLEM, f"config.yaml does not load: {e}", restore)
        return None
    if not raw.get("model") or not raw.get("data"):
        rep.add(PROBLEM, "config.yaml has no model/data sections (emptied or truncated?)", restore)
        return None
    if good_ckpts:  # the checkpoint's own copy says what model its weights are
        whole = read_config_file(good_ckpts[-1] / "config.yaml") if (good_ckpts[-1] / "config.yaml").is_file() else {}
        saved = whole.get("model") or {}
        changed = sorted(k for k in saved if raw["model"].get(k, saved[k]) != saved[k])
        if changed:
            k, more = changed[0], f"; {len(changed) - 1} more" if len(changed) > 1 else ""
            rep.add(
                PROBLEM,
                f"config.yaml's model differs from the newest checkpoint's copy ({k}: "
                f"{raw['model'][k]!r} here, {saved[k]!r} there{more}): a resume cannot load its weights",
                restore,
            )
            return None
        _check_config_changes(rep, rd, good_ckpts[-1], whole, raw, restore)
    t = cfg.train
    rep.add(
        OK,
        f"config.yaml loads (max_steps {t.max_steps}, batch {t.batch_size}, seq_len {cfg.data.seq_len}, "
        f"gamma {cfg.model.gamma})",
    )
    return cfg


def _check_config_changes(rep: DoctorReport, rd: Path, ckpt: Path, saved: dict, raw: dict, restore: str) -> None:
    """Config changes recorded on resumes (notes), and a difference from the newest checkpoint's copy that no record
    allows (a problem: ``train --resume`` refuses it; :mod:`smallinit.runs.config_changes`)."""
    from smallinit.runs.config_changes import format_changes, pending, recorded, unnamed

    for r in recorded(rd):
        rep.add(NOTE, f"config changed from step {r.get('step')} on ({r.get('by')}): {format_changes(r['changes'])}")
    try:
        changes = pending(rd, ckpt, saved, raw)
    except SmallinitError:
        return  # a copy that does not load: the checkpoint check reports it
    keys = unnamed(changes)
    if keys:
        listed = ", ".join(f"{k} ({changes[k][1]!r} here, {changes[k][0]!r} there)" for k in keys)
        rep.add(
            PROBLEM,
            f"config.yaml differs from the newest checkpoint's copy in {listed}, and no resume recorded it: "
            "`train --resume` refuses it",
            f"{restore}; or resume with --allow-change {','.join(keys)} to train on with it (recorded)",
        )


def _check_data(rep: DoctorReport, rd: Path, cfg) -> None:
    """The run's data folder is still the data it trained on (what ``train --resume`` verifies before step 1)."""
    from smallinit.data import TokenData
    from smallinit.runs.rundir import data_mismatch, run_data_path

    d = cfg.to_dict()
    path = run_data_path(rd, d)
    if not path.exists():
        rep.add(NOTE, f"data folder {path} not found (resume, eval and compare need it)")
        return
    try:
        why = data_mismatch(rd, TokenData(path))
    except SmallinitError as e:
        why = str(e)
    if why:
        rep.add(
            PROBLEM,
            f"the run's data does not match it: {why}",
            "restore the data folder the run was trained on before resuming, evaluating or comparing it",
        )
    else:
        rep.add(OK, f"data {path}: same vocabulary and tokenizer as the run, every token id below the vocabulary")


def _check_checkpoints(rep: DoctorReport, rd: Path) -> list[Path]:
    """Verify every checkpoint; returns the good ones, oldest first."""
    from smallinit.runs.checkpoint import CKPT_SUBDIR, MANIFEST, verify_checkpoint

    root = rd / CKPT_SUBDIR
    if not root.is_dir():
        return []
    active = rep.active_pid is not None
    for tmp in sorted(root.glob(".tmp-*")):
        if active:
            rep.add(NOTE, f"{tmp.name}: a checkpoint being written now")
        else:
            rep.add(
                PROBLEM,
                f"{tmp.name}: partial checkpoint left by a killed process (never used)",
                f"delete it: rm -r {tmp}  (resume also removes it)",
            )
    dirs = sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith("step_") and _step_of(p) is not None)
    good, bad = [], []
    for d in dirs:
        if not (d / MANIFEST).is_file():
            if not active:
                rep.add(
                    PROBLEM,
                    f"{d.name}: incomplete checkpoint (no manifest: a killed write or prune; never used)",
                    f"delete it: rm -r {d}",
                )
            continue
        try:
            verify_checkpoint(d)
            state = json.loads((d / "state.json").read_text())
            if state.get("step") != _step_of(d):
                raise SmallinitError(f"{d / 'state.json'} says step {state.get('step')!r}")
            good.append(d)
        except (SmallinitError, ValueError, AttributeError) as e:
            bad.append((d, str(e)))
    for d, why in bad:
        older = [g for g in good if g.name < d.name]
        if [g for g in good if g.name > d.name]:
            then = f"resume uses {good[-1].name}"
        elif older:
            then = f"resume will use {older[-1].name} (it skips corrupted checkpoints by itself, with a warning)"
        else:
            then = (
                "no good checkpoint is left: the run can only restart from scratch "
                "(delete checkpoints/ and metrics.jsonl)"
            )
        rep.add(PROBLEM, f"checkpoint {d.name} is corrupted: {why}", f"delete it (rm -r {d}); {then}")
    if good:
        steps = ", ".join(str(_step_of(g)) for g in good)
        rep.add(OK, f"{len(good)} checkpoint{'s' if len(good) > 1 else ''} verified (SHA-256): step {steps}")
    return good


def _expected_steps(cfg, upto: int) -> set[int]:
    t = cfg.train
    return {s for s in range(1, upto + 1) if s % t.log_every == 0 or s % t.eval_every == 0 or s == t.max_steps}


def _check_metrics(rep: DoctorReport, rd: Path, cfg) -> int:
    """Returns the last logged step (0 if none)."""
    path = rd / "metrics.jsonl"
    if path.exists() and not path.is_file():
        rep.add(PROBLEM, "metrics.jsonl is not a file", f"move {path} aside: the run's log cannot be read or written")
        return 0
    if not path.is_file():
        rep.add(NOTE, "no metrics.jsonl yet (nothing logged)")
        return 0
    recs, bad = _read_jsonl(path)
    n_lines = len(recs) + len(bad)
    before = len(rep.problems)
    for i in bad:
        last = i == n_lines
        rep.add(
            PROBLEM,
            f"metrics.jsonl line {i} does not parse" + (" (torn last line: a kill mid-write)" if last else ""),
            "`smallinit train --resume` drops it" if last else f"delete line {i} of {path}",
        )
    steps = []
    for i, r in recs:
        s = r.get("step")
        if not isinstance(s, int) or isinstance(s, bool):
            rep.add(PROBLEM, f"metrics.jsonl line {i} has no integer step", f"delete line {i} of {path}")
            continue
        if steps and s <= steps[-1]:
            rep.add(
                PROBLEM,
                f"metrics.jsonl line {i}: step {s} after step {steps[-1]} (steps must increase: "
                "two runs writing one log?)",
                f"remove the repeated lines from {path}",
            )
        steps.append(s)
    if not steps:
        rep.add(NOTE, "metrics.jsonl holds no records")
        return 0
    last = max(steps)
    if cfg is not None:
        missing = sorted(_expected_steps(cfg, last) - set(steps))
        if missing:
            shown = ", ".join(map(str, missing[:8])) + (", ..." if len(missing) > 8 else "")
            rep.add(
                PROBLEM,
                f"metrics.jsonl misses {len(missing)} logged step(s) (log_every {cfg.train.log_every}): {shown}",
                "the run's log has holes; resuming from a checkpoint before them rewrites the log from there",
            )
    if len(rep.problems) == before:
        rep.add(OK, f"metrics.jsonl: {len(steps)} records, steps {min(steps)}..{last}, strictly increasing, no gaps")
    return last


def _check_probes(rep: DoctorReport, rd: Path) -> None:
    path = rd / "probes.jsonl"
    if not path.is_file():
        return
    recs, bad = _read_jsonl(path)
    n_lines = len(recs) + len(bad)
    for i in bad:
        last = i == n_lines
        rep.add(
            PROBLEM,
            f"probes.jsonl line {i} does not parse" + (" (torn last line)" if last else ""),
            "`smallinit train --resume` drops it" if last else f"delete line {i} of {path}",
        )
    steps = [r.get("step") for _, r in recs]
    if any(not isinstance(s, int) for s in steps) or any(b <= a for a, b in zip(steps, steps[1:])):
        rep.add(
            PROBLEM,
            "probes.jsonl steps are not strictly increasing integers",
            "resume from a checkpoint before the disorder rewrites the probes from there",
        )
    elif not bad:
        rep.add(OK, f"probes.jsonl: {len(steps)} records" + (f", steps {steps[0]}..{steps[-1]}" if steps else ""))


def _check_completion(rep: DoctorReport, rd: Path, cfg, good: list[Path], last_logged: int) -> None:
    """The run's status, the first that applies: complete (summary.json), training (a live lock), diverged,
    failed, else incomplete — each problem with its fix."""
    resume = f"smallinit train --resume {rd}"
    if _check_summary(rep, rd, good, resume):
        return
    if rep.active_pid is not None:
        rep.status = "training"
        rep.add(NOTE, f"training in progress (pid {rep.active_pid} holds the lock); logged up to step {last_logged}")
        return
    if _check_diverged(rep, rd, good) or _check_failed(rep, rd):
        return
    from_ = f"{good[-1].name}" if good else "step 0 (no checkpoint yet)"
    redo = ""
    if good and last_logged > _step_of(good[-1]):
        redo = f"; steps {_step_of(good[-1]) + 1}..{last_logged} will be recomputed"
    rep.add(
        PROBLEM,
        f"run is incomplete: stopped after step {last_logged} (no summary.json)",
        f"{resume}  (continues from {from_}{redo})",
    )


def _check_summary(rep: DoctorReport, rd: Path, good: list[Path], resume: str) -> bool:
    """Whether summary.json decides the status: it does not parse, or says complete (checked against its values
    and the checkpoints left). False when there is none or it says not complete."""
    path = rd / "summary.json"
    if not path.is_file():
        return False
    try:
        s = json.loads(path.read_text())
    except ValueError:
        s = None
    if not isinstance(s, dict):
        rep.add(PROBLEM, "summary.json does not parse", f"{resume}  (rewrites it from the last checkpoint)")
        return True
    if not s.get("completed"):
        return False
    missing = [k for k in ("step", "final_loss", "final_val_loss") if s.get(k) is None]
    if missing:
        rep.add(
            PROBLEM,
            f"summary.json says complete but has no value for {', '.join(missing)}",
            f"a resume of a finished run by an older smallinit blanked them: delete {path} and run "
            f"`{resume}` (it rewrites the summary from metrics.jsonl and the final checkpoint)",
        )
        return True
    if not good:
        rep.add(
            PROBLEM,
            f"summary.json says complete (step {s.get('step')}) but no good checkpoint is "
            f"left: the trained weights are gone (eval, export, probe and compare need them)",
            f"restore {rd / 'checkpoints'} from a copy, or train the run again into a new folder",
        )
        return True
    rep.status = "complete"
    rep.add(OK, f"run complete: step {s.get('step')}, final val loss {s.get('final_val_loss')}")
    if _step_of(good[-1]) != s.get("step"):
        rep.add(NOTE, f"the newest good checkpoint is {good[-1].name}, not the final step {s.get('step')}")
    return True


def _check_diverged(rep: DoctorReport, rd: Path, good: list[Path]) -> bool:
    """Whether diverged.json is there (status "diverged", with where and what, and the checkpoint to go back to)."""
    div = rd / "diverged.json"
    if not div.is_file():
        return False
    try:
        d = json.loads(div.read_text())
        d = d if isinstance(d, dict) else {}
    except ValueError:
        d = {}
    rep.status = "diverged"
    kept = d.get("checkpoint") or (good[-1].name if good else None)
    what = (
        "a non-finite loss or gradient"
        if d.get("kind") == "non-finite"
        else f"the loss above {d.get('threshold', float('nan')):.2f} (ln V + margin)"
    )
    rep.add(
        PROBLEM,
        f"run diverged at step {d.get('step', '?')}: {what}; stopped at step {d.get('stopped_at', '?')}",
        f"the newest checkpoint from before it is {kept or 'none'}; lower optim.lr (or raise warmup) and "
        "train a new run from it or from scratch; `--resume` would repeat the same steps",
    )
    return True


def _check_failed(rep: DoctorReport, rd: Path) -> bool:
    """Whether failed.json is there (written by `smallinit sweep` when the run exited with an error): status
    "failed", with the recorded error."""
    failed = rd / "failed.json"
    if not failed.is_file():
        return False
    rep.status = "failed"
    try:
        err = json.loads(failed.read_text()).get("error")
    except (ValueError, AttributeError):
        err = None
    rep.add(
        PROBLEM,
        f"the sweep recorded this run as failed: {err or 'see its log, ../jobs/<run>.log'}",
        "fix the cause, then rerun the sweep with --retry-failed (or resume this run directly)",
    )
    return True


def check_run(run_dir: str | os.PathLike) -> DoctorReport:
    """Check a run directory (see the module docstring); raises RunDirError if it is not one."""
    rd = Path(run_dir)
    if not rd.is_dir():
        raise RunDirError(f"{rd}: no such directory")
    markers = ("config.yaml", "metrics.jsonl", "checkpoints", "summary.json")
    if not any((rd / m).exists() for m in markers):
        raise RunDirError(f"{rd}: not a run directory (none of {', '.join(markers)})")
    rep = DoctorReport(rd)
    rep.active_pid = lock_holder(rd)
    if rep.active_pid is not None:
        rep.add(NOTE, f"a process (pid {rep.active_pid}) holds {rd / '.lock'}: a run is training here now")
    ckpts = DoctorReport(rd, active_pid=rep.active_pid)  # checked first (config.yaml's fix needs them) ...
    good = _check_checkpoints(ckpts, rd)
    cfg = _check_config(rep, rd, good)
    rep.findings += ckpts.findings  # ... but reported after the config
    if cfg is not None:
        _check_data(rep, rd, cfg)
    last = _check_metrics(rep, rd, cfg)
    _check_probes(rep, rd)
    _check_completion(rep, rd, cfg, good, last)
    return rep


__all__ = ["DoctorReport", "Finding", "check_run", "lock_holder"]
