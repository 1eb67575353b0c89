"""The HTML reports in a real browser: ``smallinit plot``'s (and ``reproduce --preset test``'s) ``index.html``
rendered by headless Chromium. Fails on an image that does not load, a console message from the page (an
error, a failed resource), or a blank page. Skips when no Chromium is installed (Debian:
``apt-get install -y chromium``).

How: one Chromium run takes a screenshot of the page (blank = fewer than 1% of pixels differ from the page's
background colour); a second loads the page in an iframe of a throw-away wrapper page (beside it, in a temporary
folder; ``--allow-file-access-from-files``) whose script lists every ``<img>`` that is not complete with a
natural width > 0, and prints it through ``--dump-dom``. Console messages come from ``--enable-logging=stderr``.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import tiny_overrides

from smallinit.cli import main as cli

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium installed (apt-get install -y chromium)")

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--hide-scrollbars",
    "--allow-file-access-from-files",
    "--enable-logging=stderr",
    "--v=0",
    "--virtual-time-budget=8000",
]

WRAPPER = """<!doctype html><html><body>
<iframe id="f" style="width:1280px;height:2000px" src="{src}"></iframe>
<script>
document.getElementById("f").addEventListener("load", function () {{
  var d = this.contentDocument, out = document.createElement("pre");
  var imgs = Array.prototype.slice.call(d.images);
  var bad = imgs.filter(function (i) {{ return !(i.complete && i.naturalWidth > 0); }})
                .map(function (i) {{ return i.getAttribute("src"); }});
  out.id = "result";
  out.textContent = JSON.stringify({{images: imgs.length, broken: bad, text: d.body.innerText.length}});
  document.body.appendChild(out);
}});
</script></body></html>
"""


def chromium(args: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, *FLAGS, *args], capture_output=True, text=True, timeout=timeout)


def console_messages(stderr: str, page: Path) -> list[str]:
    """Console lines Chromium logged for ``page`` (any message at all: our reports run no scripts)."""
    return [l for l in stderr.splitlines() if "CONSOLE" in l and (page.name in l or "Uncaught" in l)]


def check_page(index: Path, shot: Path, tmp: Path) -> dict:
    """Render ``index`` headless; assert no broken image, no console message, not blank. Returns the stats."""
    import numpy as np
    from matplotlib.image import imread

    r = chromium([f"--screenshot={shot}", "--window-size=1280,2000", index.resolve().as_uri()])
    assert shot.is_file(), r.stderr[-2000:]
    img = imread(str(shot))[..., :3]
    bg = img[2, 2]
    differ = float((np.abs(img - bg).sum(axis=-1) > 0.05).mean())
    assert differ > 0.01, f"blank page: {differ:.4f} of pixels differ from the background"

    wrapper = tmp / "check.html"
    wrapper.write_text(WRAPPER.format(src=index.resolve().as_uri()))
    r = chromium(["--dump-dom", wrapper.as_uri()])
    m = re.search(r'<pre id="result">(.*?)</pre>', r.stdout, re.S)
    assert m, f"the wrapper page reported nothing:\n{r.stdout[-1000:]}\n{r.stderr[-2000:]}"
    res = json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    assert res["images"] > 0 and res["broken"] == [], res
    assert res["text"] > 100, res
    msgs = console_messages(r.stderr, index)
    assert msgs == [], msgs
    return {**res, "differ": differ}


@pytest.mark.timeout(600)
def test_plot_report_renders_in_chromium(tmp_path, token_dir):
    runs = []
    for g in ("1.0", "0.5"):
        out = tmp_path / f"g{g}"
        assert (
            cli(
                [
                    "train",
                    "--config",
                    "tiny",
                    "--out",
                    str(out),
                    *tiny_overrides(
                        token_dir, **{"train.max_steps": 10, "model.gamma": g, "probe.every": 5, "train.eval_every": 5}
                    ),
                ]
            )
            == 0
        )
        runs.append(str(out))
    report = tmp_path / "report"
    assert cli(["plot", *runs, "--out", str(report)]) == 0
    stats = check_page(report / "index.html", tmp_path / "plot.png", tmp_path)
    assert stats["images"] >= 3

    # the check can fail: a missing image is caught
    broken = tmp_path / "broken"
    shutil.copytree(report, broken)
    next(broken.glob("*.png")).unlink()
    with pytest.raises(AssertionError, match="broken"):
        check_page(broken / "index.html", tmp_path / "broken.png", tmp_path)
