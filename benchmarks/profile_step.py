"""Where a training step's time goes: torch.profiler table by op for ours and nanoGPT at one shape.

python benchmarks/profile_step.py [--shape d128|d384] [--threads 2] [--steps 4] [--rows 25]
    [--models none,elementwise,nanogpt] [--logits-loss]
"""

from __future__ import annotations

import argparse

import torch
from bench_common import SHAPES, Transformer, header, make_step, nanogpt, ours_config
from torch.profiler import ProfilerActivity, profile


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="d128", choices=list(SHAPES))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--rows", type=int, default=25)
    ap.add_argument("--models", default="none,elementwise,nanogpt")
    ap.add_argument("--logits-loss", action="store_true", help="ours through full logits + F.cross_entropy")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(header(args.threads))
    _, _, _, _, T, B, V = SHAPES[args.shape]
    for name in args.models.split(","):
        torch.manual_seed(0)
        model = nanogpt(args.shape) if name == "nanogpt" else Transformer(ours_config(args.shape, name))
        # ours trains as the Trainer does: model(x, targets=y) (chunked LM-head loss); --logits-loss: the old path
        lf = None if name == "nanogpt" or args.logits_loss else (lambda f, x, y: f(x, targets=y))
        step = make_step(model, V, T, B, loss_fn=lf)
        for _ in range(2):
            step()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(args.steps):
                step()
        total = sum(e.self_cpu_time_total for e in prof.key_averages())
        print(
            f"\n## {args.shape} {'nanoGPT' if name == 'nanogpt' else 'smallinit gate=' + name}: "
            f"{total / args.steps / 1e3:.1f} ms self-CPU per step ({args.steps} steps)"
        )
        print("| op | self CPU ms/step | share | calls/step |\n|---|---|---|---|")
        rows = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[: args.rows]
        for e in rows:
            print(
                f"| {e.key} | {e.self_cpu_time_total / args.steps / 1e3:.2f} | "
                f"{e.self_cpu_time_total / total:.1%} | {e.count / args.steps:.0f} |"
            )


if __name__ == "__main__":
    main()
