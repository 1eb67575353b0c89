"""The residual-flow law at init at the paper's widths (issue #44): ``0.1b`` … ``1.5b`` (d 768, 1024, 1536, 2048; their
heads, KV heads and d_ff), 4 blocks, vocabulary 4096, γ ∈ {0.5, 1, 1.5}, 3 seeds; one forward over random tokens
(2 × 128) per model, no training. Per γ and branch: the fitted exponent of flow on width with its 95% t-interval over
the seeds, against the paper's 1 − γ, and the verdict of :func:`smallinit.audit.flow_law.judge_flow_law`.

    .venv/bin/python benchmarks/flow_law.py --out docs/results/flow-law   # flow-law.json and flow-law.md
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import torch

from smallinit.audit.flow_law import MARGIN, flow_law
from smallinit.core.io import atomic_write_json, atomic_write_text


def markdown(res: dict, seconds: float) -> str:
    lines = [
        "# Residual flow at init vs width: the d^(1−γ) law at the paper's sizes",
        "",
        f"`python benchmarks/flow_law.py --out …` ({time.strftime('%Y-%m-%d')}, {platform.processor() or 'cpu'}, "
        f"torch {torch.__version__}, {seconds:.0f} s). Sizes {', '.join(res['sizes'])} (d "
        f"{', '.join(str(w) for w in res['widths'].values())}), 4 blocks each, vocabulary 4096, gate elementwise, "
        "norm ε 1e-12, random tokens 2 × 128, 3 seeds. Flow = ‖F(norm(h))‖ / ‖h‖ per block (the probes' hooks). "
        f"Rule: the law holds (*supported*) when the 95% t-interval of slope − (1 − γ) lies inside ±{MARGIN}, "
        "*not supported* when wholly outside, else *inconclusive*.",
        "",
        "| γ | branch | exponent [95% t, 3 seeds] | paper 1 − γ | verdict |",
        "|---|---|---|---|---|",
    ]
    for e in res["exponents"]:
        lines.append(
            f"| {e['gamma']:g} | {e['branch']} | {e['value']:+.3f} [{e['lo']:+.3f}, {e['hi']:+.3f}] | "
            f"{e['predicted']:+.2f} | {e['verdict']} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    res = flow_law(seeds=args.seeds, log=print)
    secs = time.perf_counter() - t0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "flow-law.json", res)
    atomic_write_text(out / "flow-law.md", markdown(res, secs))
    print(f"wrote {out / 'flow-law.md'} ({secs:.0f} s)")


if __name__ == "__main__":
    main()
