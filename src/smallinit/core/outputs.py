"""One output-folder policy for every verb that writes (train, prepare, export, import-hf, eval, probe, plot,
compare, scaling, anchor, sweep, reproduce).

The rule, checked **before any work starts** (:func:`check_out_dir`, :func:`check_out_file`):

1. A new output goes only into a folder that does not exist or is empty.
2. A folder that already holds an output of the *same kind* (recognised by :func:`output_kind`) is accepted
   only when the verb can continue it (``can_continue``: ``sweep``/``reproduce`` resume, ``train --resume``)
   or, with ``--force``, replaced.
3. Anything else (a file, a prepared dataset given to ``train --out``, a user folder with its own files) is
   refused with one line; ``--force`` does not change that: it only replaces a previous output of the same kind,
   and only when that folder holds nothing but what the command writes (:data:`OWN_NAMES`: a ``notes.txt`` or
   ``mine/`` added to it is named and the folder refused, never deleted with it).
4. An output that is or contains an input is refused; ``--force`` never replaces a folder that is, contains, or
   lies inside any input of the command: ``export RUN RUN --force``, ``export RUN PARENT --force`` and
   ``export RUN RUN/sub --force`` are refused (a *new* folder inside an input, without ``--force``, is fine:
   ``plot RUN --out RUN/plots``).
5. The destination's parent must be writable (a read-only filesystem is refused up front, not after the work).
6. Everything is written beside the destination (``.NAME.tmp-PID.HOST-*``; those of a process that is gone are
   removed by the next one, :func:`stale_tmp_dirs`) and renamed into place
   (:func:`staged_dir`, :func:`install_dir`); a replaced output is moved aside first and removed only after the
   new one is in place.

A file output (``eval --out FILE.json``, ``probe --out FILE``) may not be a directory; an existing file is
replaced only when it is an output of the same kind (a JSON file with that kind's keys).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from smallinit.core.errors import ConfigError

# what each kind of output folder holds (all listed names present = that kind)
_DIR_KINDS: dict[str, tuple[tuple[str, ...], ...]] = {
    # a run: its config plus any trace of training (an import-hf run has a step-0 checkpoint)
    "run": (("config.yaml", "metrics.jsonl"), ("config.yaml", "checkpoints"), ("config.yaml", "summary.json")),
    "data": (("meta.json", "train.bin", "val.bin"),),
    "export": (("config.json", "model.safetensors", "README.md"),),
    "sweep": (("sweep.json",),),
    "reproduce": (("plan.json",),),
    "compare": (("compare.json",),),
    "scaling": (("scaling.json",),),
    "anchor": (("anchor.json",),),
    "crossover": (("crossover.spec.json",),),
    "rejudge": (("crossover.json", "crossover.md"),),
    "widths": (("widths.json",),),
    "audit": (("audit.json",),),
    "plot": (("index.html",),),  # last: a reproduce folder has an index.html too; ours carry GENERATOR
}
OWN_NAMES: dict[str, frozenset[str]] = {
    "data": frozenset({"meta.json", "train.bin", "val.bin", "tokenizer.json"}),  # smallinit prepare
    "export": frozenset(
        {
            "config.json",
            "generation_config.json",
            "model.safetensors",
            "tokenizer.json",  # export
            "tokenizer_config.json",
            "special_tokens_map.json",
            "README.md",
            "configuration_smallinit.py",
            "modeling_smallinit.py",
        }
    ),
    "run": frozenset({"config.yaml", "tokenizer.json", "hf_config.json", "checkpoints"}),  # import-hf
    "widths": frozenset({"widths.json", "widths.md", "widths.png"}),  # crossover-widths
    "rejudge": frozenset({"crossover.json", "crossover.md", "crossover.png"}),  # crossover-rejudge
}
"""Everything a ``--force`` replacement of each kind writes (top-level names). ``--force`` replaces a folder only
when it holds nothing else: a file or folder the user added (``notes.txt``, ``mine/``; for a run, a trained run's
log) is never deleted with the output — the folder is refused, naming them (:func:`foreign_entries`)."""
GENERATOR = '<meta name="generator" content="smallinit">'
"""In the head of every HTML page we write (figures.html_page): an index.html without it is not ours."""
# keys a JSON file output of each kind carries
_FILE_KINDS: dict[str, tuple[str, ...]] = {"eval": ("tasks", "config"), "probe": ("step", "layers")}

KIND_NAMES = {
    "run": "a run directory",
    "data": "a prepared data directory",
    "export": "a Hugging Face export",
    "sweep": "a sweep folder",
    "reproduce": "a reproduce folder",
    "eval": "an eval results file",
    "probe": "a probe results file",
    "compare": "a compare folder",
    "scaling": "a scaling folder",
    "anchor": "an anchor run",
    "plot": "a plot folder",
    "crossover": "a crossover folder",
    "audit": "an audit output",
    "widths": "a crossover-widths folder",
    "rejudge": "a crossover-rejudge folder",
}


def output_kind(path: str | os.PathLike) -> str | None:
    """The kind of output ``path`` (a folder) holds, or None. Recognised from its files: a run
    (config.yaml + metrics.jsonl/checkpoints/summary.json), prepared data (meta.json + train.bin + val.bin), a
    Hugging Face export written by us (config.json + model.safetensors + a README.md of ``smallinit export``),
    a sweep or reproduce folder."""
    p = Path(path)
    if not p.is_dir():
        return None
    for kind, alternatives in _DIR_KINDS.items():
        for names in alternatives:
            if all((p / n).exists() for n in names):
                try:
                    if kind == "export" and not (p / "README.md").read_text(errors="replace").startswith(
                        "# smallinit export"
                    ):
                        continue
                    if kind == "plot" and GENERATOR not in (p / "index.html").read_text(errors="replace")[:2000]:
                        continue
                except OSError:
                    continue
                return kind
    return None


def _file_kind(path: Path) -> str | None:
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    if not isinstance(obj, dict):
        return None
    for kind, keys in _FILE_KINDS.items():
        if all(k in obj for k in keys):
            return kind
    return None


def _resolved(p: str | os.PathLike) -> Path:
    return Path(os.path.abspath(os.path.realpath(p)))


def overlaps(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """True when ``a`` is ``b``, contains it, or lies inside it (symlinks resolved)."""
    ra, rb = _resolved(a), _resolved(b)
    return ra == rb or ra in rb.parents or rb in ra.parents


def _check_writable(folder: Path) -> None:
    """ConfigError unless a file can be created in ``folder``, or in its nearest existing ancestor when it does not
    exist yet (the folder and the ones above it will be made)."""
    anc = folder
    while not anc.exists() and anc != anc.parent:
        anc = anc.parent
    path = folder
    if not anc.is_dir():
        raise ConfigError(f"{path}: cannot be created: {anc} is a file, not a folder")
    try:
        fd, probe = tempfile.mkstemp(dir=anc, prefix=".smallinit-write-test-")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise ConfigError(f"{path}: cannot write in {anc} ({e.strerror or e})") from None


def foreign_entries(folder: Path, kind: str) -> list[str]:
    """The names in ``folder`` that a ``--force`` output of ``kind`` does not write (:data:`OWN_NAMES`), sorted;
    the lock file is not counted."""
    own = OWN_NAMES.get(kind)
    if own is None:
        return []
    return sorted(
        c.name + ("/" if c.is_dir() else "") for c in folder.iterdir() if c.name not in own and c.name != ".lock"
    )


def _refuse_foreign(out: Path, kind: str, verb: str) -> None:
    foreign = foreign_entries(out, kind)
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise ConfigError(
            f"{out}: also holds {shown}, which {verb or 'this command'} did not write; --force replaces "
            f"only {KIND_NAMES.get(kind, kind)} and never deletes other files: move them out first or "
            "choose another folder"
        )


def _is_empty_dir(p: Path) -> bool:
    """A folder with nothing in it but possibly a ``.lock`` file (a lock holds no output)."""
    return p.is_dir() and not any(c.name != ".lock" for c in p.iterdir())


@dataclass
class OutputPlan:
    """What :func:`check_out_dir` decided: ``state`` is "new" (absent or empty), "continue" (an output of the
    same kind the verb continues) or "replace" (an output of the same kind, ``--force``)."""

    path: Path
    kind: str
    state: str


def check_out_dir(
    out: str | os.PathLike,
    kind: str,
    *,
    inputs: Iterable[str | os.PathLike] = (),
    force: bool = False,
    can_continue: bool = False,
    verb: str = "",
    has_force: bool = True,
) -> OutputPlan:
    """Apply the policy (module docstring) to the output folder ``out`` of ``kind``; ConfigError when refused
    (``has_force``: whether the verb has a ``--force`` for the refusal to mention).

    ``inputs``: every path the command reads (run dirs, data dirs, checkpoints, files). An output that is,
    contains or lies inside one of them is refused whatever ``force`` says — unless the verb continues that very
    output (``can_continue`` and ``out`` is itself an input, as in ``train --resume``)."""
    out = Path(out)
    if out.name in ("", ".."):  # ".", "..", "a/..": name the folder itself, so
        out = _resolved(out)  # that its temporary sibling lies beside it, not inside it
    what = KIND_NAMES.get(kind, kind)
    for src in inputs:
        if src is None or str(src) == "":
            continue
        ro, rs = _resolved(out), _resolved(src)
        if ro == rs or ro in rs.parents:  # the output is, or holds, an input
            if not (can_continue and ro == rs and output_kind(out) == kind):
                raise ConfigError(
                    f"{out}: the output folder would be or contain the input {src}; "
                    "choose an output folder outside every input"
                )
        elif rs in ro.parents and force:  # --force never replaces anything inside an input
            raise ConfigError(
                f"{out}: lies inside the input {src}; --force never replaces a folder inside an "
                "input: choose an output folder outside it"
            )
    if out.is_symlink():  # a link to a folder (e.g. on a scratch disk): the output goes to the folder, the link stays
        target = _resolved(out)
        if not target.exists():
            raise ConfigError(
                f"{out}: is a symbolic link to {target}, which does not exist; create that folder "
                "or choose another name"
            )
        out = target
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{out}: exists and is a file, not a folder; choose a folder name")
    if not out.exists() or _is_empty_dir(out):
        _check_writable(out)
        return OutputPlan(out, kind, "new")
    found = output_kind(out)
    if found == kind:
        if can_continue:
            _check_writable(out)
            return OutputPlan(out, kind, "continue")
        if force:
            _refuse_foreign(out, kind, verb)  # only what the command itself wrote is replaced
            _check_writable(out.parent)  # the replacement is written beside and renamed into place
            return OutputPlan(out, kind, "replace")
        hint = {"run": f"use `smallinit train --resume {out}` or a new --out"}.get(
            kind, "choose a new folder or pass --force to replace it"
        )
        raise ConfigError(f"{out} already holds {'a run' if kind == 'run' else what}; {hint}")
    held = f" (it holds {KIND_NAMES[found]})" if found else ""
    force_hint = " or over a previous one with --force" if has_force and not can_continue else ""
    raise ConfigError(
        f"{out}: folder exists and is not empty{held}; {verb + ' ' if verb else ''}writes {what} only "
        f"into a new or empty folder{force_hint}; choose another folder"
    )


def check_out_file(out: str | os.PathLike, kind: str, *, inputs: Iterable[str | os.PathLike] = ()) -> Path:
    """Apply the policy to a file output: not a folder, not an input, a writable parent; an existing file is
    replaced only when it is an output of the same ``kind`` (JSON with that kind's keys). Returns the path."""
    out = Path(out)
    for src in inputs:
        if src is not None and str(src) and _resolved(out) == _resolved(src):
            raise ConfigError(f"{out}: the output file is the input {src}; choose another name")
    if out.is_dir():
        raise ConfigError(f"{out}: is a folder; give a file name (e.g. {out / (kind + '.json')})")
    if out.exists():
        if _file_kind(out) != kind:
            raise ConfigError(
                f"{out}: exists and is not {KIND_NAMES.get(kind, kind)}; refusing to overwrite it "
                "(choose another name or remove it)"
            )
    _check_writable(out.parent)  # written beside and renamed into place
    return out


def install_dir(tmp: Path, plan: OutputPlan) -> Path:
    """Rename the finished ``tmp`` folder to ``plan.path``; a replaced output is moved aside first and removed
    only once the new one is in place."""
    from smallinit.core.io import fsync_dir

    out = plan.path
    old = None
    if out.exists():
        if _is_empty_dir(out):
            shutil.rmtree(out)
        elif plan.state == "replace" and output_kind(out) == plan.kind:
            _refuse_foreign(out, plan.kind, "")  # a file added while the output was being written is kept too
            old = out.with_name(f".{out.name}.old-{os.getpid()}")
            os.replace(out, old)
        else:  # something appeared meanwhile: never delete it
            raise ConfigError(
                f"{out}: appeared while the output was being written; it is left as it is and the "
                "new output was not installed"
            )
    os.replace(tmp, out)
    fsync_dir(out.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return out


def _host_tag() -> str:
    import hashlib
    import socket

    return hashlib.sha1(socket.gethostname().encode()).hexdigest()[:8]


def _pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this machine (unknown counts as alive: nothing is removed then)."""
    if pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: it exists, under another user
        return True
    return True


def stale_tmp_dirs(out: Path) -> list[Path]:
    """Temporary folders beside ``out`` that :func:`tmp_dir_for` made for it in a process that is gone (a SIGKILL,
    a power cut): named ``.NAME.tmp-PID.HOST-*`` with this machine's HOST tag and a PID no process has now. Nothing
    else matches: a folder of another machine, of a live process or named otherwise is never reported."""
    import re

    pat = re.compile(rf"\.{re.escape(out.name)}\.tmp-(\d+)\.([0-9a-f]{{8}})-[A-Za-z0-9_]+")
    host, found = _host_tag(), []
    try:
        entries = list(out.parent.iterdir())
    except OSError:
        return []
    for p in entries:
        m = pat.fullmatch(p.name)
        if (
            m
            and m.group(2) == host
            and int(m.group(1)) != os.getpid()
            and not _pid_alive(int(m.group(1)))
            and p.is_dir()
            and not p.is_symlink()
        ):
            found.append(p)
    return sorted(found)


def tmp_dir_for(out: Path) -> Path:
    """A fresh temporary folder beside ``out`` (same filesystem, so the final rename is atomic), named
    ``.NAME.tmp-PID.HOST-*`` after this process; those an interrupted earlier one left for ``out`` (its process gone,
    :func:`stale_tmp_dirs`) are removed first."""
    from smallinit.core.io import umask

    out.parent.mkdir(parents=True, exist_ok=True)
    for stale in stale_tmp_dirs(out):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-{os.getpid()}.{_host_tag()}-", dir=out.parent))
    os.chmod(tmp, 0o777 & ~umask())
    return tmp


@contextlib.contextmanager
def staged_dir(plan: OutputPlan) -> Iterator[Path]:
    """Yield a temporary folder beside ``plan.path``; on success it is renamed into place (:func:`install_dir`),
    on any error it is removed and ``plan.path`` is left as it was."""
    tmp = tmp_dir_for(plan.path)
    try:
        yield tmp
        install_dir(tmp, plan)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


__all__ = [
    "OWN_NAMES",
    "OutputPlan",
    "check_out_dir",
    "check_out_file",
    "foreign_entries",
    "install_dir",
    "output_kind",
    "overlaps",
    "stale_tmp_dirs",
    "staged_dir",
    "tmp_dir_for",
]
