"""The core install is torch and numpy (issue #46 item 2): gamma_init, the recipe and the audit work without any
extra, and a verb whose extra is missing says which `pip install` brings it, in one line."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXTRA_LIBS = ("scipy", "matplotlib", "tqdm", "yaml", "safetensors", "tokenizers", "transformers", "datasets", "pyarrow")
CORE_SCRIPT = textwrap.dedent(
    """
    import sys
    import smallinit
    model = smallinit.Transformer(smallinit.ModelConfig(vocab_size=64, d_model=32, n_layers=1, n_heads=2,
                                                        max_seq_len=16))
    report = smallinit.gamma_init(model, gamma=1.0)
    assert report.max_rel_error() < 0.2, report.max_rel_error()
    if hasattr(smallinit, "apply_recipe"):
        smallinit.apply_recipe(model)
    audit = smallinit.audit(model)
    loaded = sorted(m.split(".")[0] for m in sys.modules if m.split(".")[0] in EXTRA)
    print("extras loaded:", loaded)
    assert not loaded, loaded
    from smallinit.cli import main
    sys.exit(main(["train", "--config", "tiny", "--out", "unused"]))
    """
)


def _blocking_prelude() -> str:
    """Python that makes every extra library unimportable, as if it were not installed."""
    return textwrap.dedent(
        f"""
        import importlib.abc, sys
        EXTRA = set({list(EXTRA_LIBS)!r})
        class Missing(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                if name.split(".")[0] in EXTRA:
                    raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        sys.meta_path.insert(0, Missing())
        """
    )


def test_the_core_imports_and_runs_without_any_extra(tmp_path):
    """gamma_init and the audit (and apply_recipe) run with every extra library unimportable and load none of them;
    a verb that needs one (train: pyyaml) is one error line naming the extra and the pip command, exit 2."""
    script = tmp_path / "core.py"
    script.write_text(_blocking_prelude() + CORE_SCRIPT)
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=240)
    assert p.returncode == 2, p.stderr[-2000:]
    assert "extras loaded: []" in p.stdout
    err = [line for line in p.stderr.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("error: this needs ") and "pip install 'smallinit[" in err[0], err


@pytest.mark.slow
def test_the_wheel_installs_with_torch_and_numpy_alone(tmp_path):
    """Build the wheel, install it with no dependencies into a fresh venv that sees only torch, numpy and torch's own
    requirements (offline: linked from this environment), and run gamma_init, the recipe and the audit there."""
    wheels = tmp_path / "wheels"
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels)]
    subprocess.run([*build, str(ROOT)], check=True, capture_output=True, timeout=600)
    wheel = next(wheels.glob("smallinit-*.whl"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    import zipfile

    with zipfile.ZipFile(wheel) as z:  # install the wheel: its files into site-packages (no pip in this venv)
        z.extractall(site)
    import numpy
    import torch

    here = Path(torch.__file__).parents[1]
    core = tmp_path / "core-deps"
    core.mkdir()
    torch_needs = (
        "torch",
        "torchgen",
        "numpy",
        "numpy.libs",
        "typing_extensions.py",
        "sympy",
        "mpmath",
        "networkx",
        "jinja2",
        "markupsafe",
        "filelock",
        "fsspec",
    )
    for name in torch_needs:
        if (here / name).exists():
            os.symlink(here / name, core / name)
    assert Path(numpy.__file__).parents[1] == here
    (site / "core-deps.pth").write_text(str(core) + "\n")
    script = tmp_path / "core.py"
    script.write_text(f"EXTRA = set({list(EXTRA_LIBS)!r})\n" + CORE_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    p = subprocess.run([str(py), "-I", str(script)], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert p.returncode == 2, p.stderr[-3000:]
    assert "extras loaded: []" in p.stdout
    assert "error: this needs " in p.stderr
