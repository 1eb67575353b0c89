"""The import graph of src/smallinit: no cycles (imports inside functions count — they only hide a cycle), and the
library never imports the command line (only cli.py, __main__.py and commands/ may)."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
CLI_ALLOWED = ("smallinit.cli", "smallinit.__main__")


def module_files() -> dict[str, Path]:
    """{dotted module name: file} for every .py under src/smallinit (packages by their __init__.py)."""
    out = {}
    for f in sorted((SRC / "smallinit").rglob("*.py")):
        parts = list(f.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = f
    return out


def imports_of(name: str, path: Path, modules: set[str]) -> set[str]:
    """The smallinit modules a file imports anywhere in it (``from P import x`` counts as P.x when that is a
    module, else as P; relative imports resolved; the implicit import of parent packages is not counted)."""
    tree = ast.parse(path.read_text(), str(path))
    is_pkg = path.name == "__init__.py"
    here = name.split(".") if is_pkg else name.split(".")[:-1]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in modules else mod for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in modules:  # `import a.b.c` of a non-module attribute path: its module
                t = t.rpartition(".")[0]
            if t.startswith("smallinit") and t != name:
                out.add(t)
    return out


def import_graph() -> dict[str, set[str]]:
    files = module_files()
    return {name: imports_of(name, path, set(files)) for name, path in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_checker_finds_a_cycle_and_resolves_relative_imports():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    graph = import_graph()
    assert "smallinit.experiments.claims.rules" in graph["smallinit.experiments.claims.loss_claims"]
    assert "smallinit.runs.rundir" in graph["smallinit.experiments.sweep"]


def test_no_import_cycle_in_src():
    found = cycles(import_graph())
    assert not found, "import cycles: " + "; ".join(" ↔ ".join(c) for c in found)


def test_the_library_never_imports_the_command_line():
    bad = [
        m
        for m, deps in import_graph().items()
        if "smallinit.cli" in deps and m not in CLI_ALLOWED and not m.startswith("smallinit.commands")
    ]
    assert not bad, f"library modules importing smallinit.cli: {bad}"


def test_no_module_in_src_over_500_lines():
    big = {
        str(f.relative_to(SRC)): n
        for f in (SRC / "smallinit").rglob("*.py")
        if (n := len(f.read_text().splitlines())) > 500
    }
    assert not big, big


# ---- long functions: over 80 lines only where splitting would hurt reading (docs/layout.md lists them) ------------

MAX_FUNCTION_LINES = 80
LONG_FUNCTIONS = {  # "path under src/smallinit:qualified name": why splitting would hurt reading
    "data/prepare.py:prepare_corpus": (
        "a numbered recipe (1 tokenizer, 2 encode, 3 mix, 4 write, 5 meta) inside the one try block that fills a "
        "temporary folder and installs it; each step is already one call, the rest is meta.json's fields in one place"
    ),
    "experiments/anchor.py:train_anchor": (
        "a training loop read top to bottom: model, optimizer, the steps with evaluation, logging and early stop, "
        "the result (the folder check, the data sets and the files written are apart)"
    ),
}


def function_lengths(path: Path) -> dict[str, int]:
    """{qualified name: lines from ``def`` to its last line} of every function and method in a file (nested
    functions as ``outer.inner``)."""
    out: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    out[name] = child.end_lineno - child.lineno + 1
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(path.read_text(), str(path)), "")
    return out


def long_functions(limit: int = MAX_FUNCTION_LINES) -> dict[str, int]:
    """{"path under src/smallinit:qualified name": lines} of every function in src longer than ``limit`` lines."""
    root = SRC / "smallinit"
    return {
        f"{f.relative_to(root).as_posix()}:{name}": n
        for f in sorted(root.rglob("*.py"))
        for name, n in function_lengths(f).items()
        if n > limit
    }


def test_the_function_length_check_measures_def_to_last_line(tmp_path):
    f = tmp_path / "m.py"
    lines = ["class A:", "    def m(self):", "        def inner():", "            pass", "", "        return 1", ""]
    f.write_text("\n".join([*lines, "", "def g():", "    x = 1", ""]))
    assert function_lengths(f) == {"A.m": 5, "A.m.inner": 2, "g": 2}


def test_functions_over_80_lines_are_the_listed_ones():
    """A function over 80 lines is split into well-named pieces, or listed in LONG_FUNCTIONS with the reason a split
    would hurt reading (and in docs/layout.md)."""
    found = long_functions()
    new = {k: n for k, n in found.items() if k not in LONG_FUNCTIONS}
    gone = sorted(k for k in LONG_FUNCTIONS if k not in found)
    assert not new, f"functions over {MAX_FUNCTION_LINES} lines: {new} — split them, or list them with the reason"
    assert not gone, f"listed in LONG_FUNCTIONS but no longer over {MAX_FUNCTION_LINES} lines: {gone}"
    assert all(why.strip() for why in LONG_FUNCTIONS.values())
    layout = (SRC.parent / "docs" / "layout.md").read_text()
    assert not [k for k in LONG_FUNCTIONS if k not in layout], "docs/layout.md names every one"


# ---- layers: each package imports only from its own layer and the ones below it -----------------------------------

LAYERS = (  # bottom first; a module belongs to the layer of the longest prefix that names it
    ("smallinit.core",),  # errors, atomic IO, paths, devices, output folders, figures, stats
    ("smallinit.init", "smallinit.model"),  # the γ-rule and the decoder
    ("smallinit.data",),  # corpora, tokenizers, token files, the loader
    ("smallinit.config",),  # the typed run config (model + data + optim + train + probe)
    ("smallinit.runs",),  # a run directory: its files, checkpoints, heatmaps, doctor
    ("smallinit.probes", "smallinit.eval"),  # measurements of a model or a run
    ("smallinit.train",),  # the loop and what it needs
    ("smallinit.analysis",),  # comparison, scaling fits, the crossing
    ("smallinit.audit", "smallinit.interop"),  # audits of init rules; Hugging Face interop
    ("smallinit.experiments",),  # jobs, sweeps, crossovers, claims, reproduce
    ("smallinit.commands",),  # the command line's thin layer
    ("smallinit.cli", "smallinit.__main__", "smallinit"),
)


def layer_of(module: str) -> int:
    """The index in LAYERS of the longest prefix (whole dotted parts) naming ``module``."""
    best, depth = None, -1
    for i, prefixes in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and p.count(".") > depth:
                best, depth = i, p.count(".")
    assert best is not None, f"{module} is in no layer: add it to LAYERS"
    return best


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a module from a higher layer than the importer's, as "importer -> imported"."""
    return sorted(f"{m} -> {d}" for m, deps in graph.items() for d in deps if layer_of(d) > layer_of(m))


def test_the_layer_check_finds_an_upward_import():
    assert upward_imports({"smallinit.runs.rundir": {"smallinit.probes.training"}}) == [
        "smallinit.runs.rundir -> smallinit.probes.training"
    ]
    assert upward_imports({"smallinit.probes.training": {"smallinit.runs.rundir"}}) == []
    assert layer_of("smallinit.config") < layer_of("smallinit.runs.rundir") < layer_of("smallinit.train.loop")
    assert layer_of("smallinit") == layer_of("smallinit.cli") > layer_of("smallinit.commands.train")


def test_no_import_runs_up_a_layer():
    """Imports inside functions count: they would only hide the upward edge."""
    bad = upward_imports(import_graph())
    assert not bad, "imports from a higher layer: " + "; ".join(bad)


def test_at_most_eight_modules_loose_in_the_package_root():
    loose = sorted(f.name for f in (SRC / "smallinit").glob("*.py"))
    assert len(loose) <= 8, loose


# ---- the claims package: a registry without import-time side effects, claims that never import each other ----

CLAIMS_PKG = "smallinit.experiments.claims"
CLAIM_MODULE = re.compile(rf"^{re.escape(CLAIMS_PKG)}\.c\d+_\w+$")


def test_importing_the_claims_machinery_imports_no_claim_module():
    """Importing the package, rules, context, plots or any other shared module of it (in a fresh interpreter) loads
    no ``cNN_*`` claim module; only calling ``registry()`` (or reading ``CLAIMS``) does."""
    shared = sorted(
        m for m in module_files() if (m == CLAIMS_PKG or m.startswith(CLAIMS_PKG + ".")) and not CLAIM_MODULE.match(m)
    )
    assert f"{CLAIMS_PKG}.rules" in shared and f"{CLAIMS_PKG}.context" in shared
    code = (
        f"import importlib, json, re, sys\n"
        f"pat = re.compile({CLAIM_MODULE.pattern!r})\n"
        f"loaded = lambda: sorted(m for m in sys.modules if pat.match(m))\n"
        f"importlib.import_module({CLAIMS_PKG + '.rules'!r})\n"
        f"after_rules = loaded()\n"
        f"for m in {shared!r}: importlib.import_module(m)\n"
        f"after_all = loaded()\n"
        f"from {CLAIMS_PKG} import registry\n"
        f"n = len(registry())\n"
        f"print(json.dumps([after_rules, after_all, n, len(loaded())]))\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(SRC)},
    )
    assert res.returncode == 0, res.stderr
    after_rules, after_all, n, loaded = json.loads(res.stdout.strip().splitlines()[-1])
    assert after_rules == [], f"importing {CLAIMS_PKG}.rules imported claim modules: {after_rules}"
    assert after_all == [], f"importing {', '.join(shared)} imported claim modules: {after_all}"
    assert n == loaded >= 11  # and registry() does import them all


def test_claim_modules_never_import_each_other():
    """Claims share code through the shared modules of the package (rules, context, plots, loss_claims), not
    sideways; nor does a shared module import a claim (static: every import in the file, inside functions too)."""
    graph = import_graph()
    claims = {m for m in graph if CLAIM_MODULE.match(m)}
    assert len(claims) >= 11
    sideways = {
        m: sorted(graph[m] & claims)
        for m in sorted(graph)
        if (m == CLAIMS_PKG or m.startswith(CLAIMS_PKG + ".")) and graph[m] & claims
    }
    assert not sideways, f"imports of claim modules: {sideways}"
