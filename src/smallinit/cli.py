"""One entry point: ``smallinit <verb> ...``.

Each verb lives in ``smallinit.commands.<module>`` and exposes ``HELP`` (one line),
``add_arguments(parser)`` and ``run(args) -> int``. Modules are imported only when
their verb is used, so ``smallinit --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from smallinit.core.errors import Interrupted, SmallinitError

# verb -> module under smallinit.commands
VERBS: dict[str, str] = {
    "prepare": "prepare",
    "train": "train",
    "probe": "probe",
    "plot": "plot",
    "compare": "compare",
    "scaling": "scaling",
    "eval": "evaluate",
    "export": "export",
    "import-hf": "import_hf",
    "sweep": "sweep",
    "anchor": "anchor",
    "reproduce": "reproduce",
    "crossover": "crossover",
    "crossover-widths": "crossover_widths",
    "crossover-rejudge": "crossover_rejudge",
    "doctor": "doctor",
    "init-report": "init_report",
    "audit": "audit",
    "status": "status",
}


EXTRAS: dict[str, str] = {
    "yaml": "train",
    "tqdm": "train",
    "safetensors": "train",
    "tokenizers": "train",
    "scipy": "analysis",
    "matplotlib": "analysis",
    "transformers": "hf",
    "datasets": "hf",
    "pyarrow": "hf",
    "lm_eval": "eval",
    "submitit": "cluster",
    "wandb": "wandb",
}
"""A library a verb needs → the extra that installs it (the core is torch and numpy alone)."""


def missing_extra(e: ModuleNotFoundError) -> str | None:
    """The one line for a library that is not installed: which extra brings it, and the pip command; None when the
    missing module is not one an extra provides (a real bug: the traceback stays)."""
    top = (e.name or "").split(".")[0]
    extra = EXTRAS.get(top)
    if extra is None:
        return None
    return f"this needs {top}, from the [{extra}] extra: pip install 'smallinit[{extra}]' (or 'smallinit[all]')"


def _load(verb: str):
    return importlib.import_module(f"smallinit.commands.{VERBS[verb]}")


class Parser(argparse.ArgumentParser):
    """argparse with our error format: bad arguments are one ``error:`` line that says where the help is (argparse
    prints its usage block first and prefixes the line with the program's name). Exit status 2, as argparse's."""

    def error(self, message: str):
        self.exit(2, f"error: {message} (see '{self.prog} --help')\n")


def build_parser(verbs: list[str] | None = None) -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The ``smallinit`` parser with the sub-parsers of ``verbs`` (None: all), and those sub-parsers by verb."""
    parser = Parser(prog="smallinit", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    verb_parsers = {}
    for verb in verbs if verbs is not None else VERBS:
        try:
            mod = _load(verb)
        except ModuleNotFoundError as e:
            if e.name and e.name.startswith("smallinit.commands"):
                continue  # verb not built yet
            raise
        p = sub.add_parser(verb, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run, verb=verb)
        verb_parsers[verb] = p
    return parser, verb_parsers


def main(argv: list[str] | None = None) -> int:
    import warnings

    python_show = warnings.showwarning
    package = os.path.dirname(os.path.abspath(__file__))

    def show(message, category, filename, lineno, file=None, line=None):
        """Our own warnings as one ``warning:`` line; other libraries' in Python's format."""
        if os.path.abspath(str(filename)).startswith(package + os.sep):
            print(f"warning: {message}", file=sys.stderr)
        else:
            python_show(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    try:
        return _main(argv)
    finally:
        warnings.showwarning = python_show


def _main(argv: list[str] | None) -> int:
    try:
        return _run_verb(argv)
    except ModuleNotFoundError as e:
        line = missing_extra(e)
        if line is None:
            raise
        print(f"error: {line}", file=sys.stderr)
        return 2


def _run_verb(argv: list[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        build_parser([])[0].error("give a verb: " + ", ".join(VERBS))
    if argv[0] not in VERBS:  # --help, or argparse's one error line for an unknown verb
        build_parser()[0].parse_args(argv)
        return 2
    # only the requested verb's parser (fast start, isolated imports); it takes its options and positionals in any
    # order (`train --config tiny model.gamma=0.5 --out runs/x data.path=d`, `crossover A --out X B ...`)
    verb_parser = build_parser([argv[0]])[1][argv[0]]
    args, extra = verb_parser.parse_known_intermixed_args(argv[1:])
    if extra:  # name the unknown options only: a positional after one lands here too
        verb_parser.error("unrecognized arguments: " + " ".join([x for x in extra if x.startswith("-")] or extra))
    if getattr(args, "out", None) is not None and not str(args.out).strip():
        verb_parser.error("argument --out: an empty name (Path('') would mean the current folder)")
    try:
        return int(args._run(args) or 0)
    except Interrupted as e:  # a run stopped by SIGINT/SIGTERM after its checkpoint: 128 + the signal
        print(f"error: {e}", file=sys.stderr)
        return 128 + int(e.signum)
    except SmallinitError as e:
        # under torchrun every rank validates the same config: rank 0 speaks for all
        if os.environ.get("RANK", "0") == "0":
            print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (OSError, UnicodeDecodeError) as e:
        # what the OS or a decoder refused (permissions, a file where a folder belongs, bytes that are not UTF-8):
        # one line naming the file, as for our own errors; SMALLINIT_DEBUG=1 shows the traceback instead
        if os.environ.get("SMALLINIT_DEBUG"):
            raise
        if isinstance(e, UnicodeDecodeError):
            what = f"a file is not UTF-8 text ({e.reason} at byte {e.start})"
        else:
            what = f"{e.filename}: {e.strerror or e}" if e.filename else str(e.strerror or e)
        if os.environ.get("RANK", "0") == "0":
            print(f"error: {what}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
