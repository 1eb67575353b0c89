"""The best use of the machine's cores for many small runs at the reproduction's shape (d 128 × 4 layers, T 256,
B 16, byte-level vocabulary as the cpu preset trains it — ``--shape d128`` for vocab 8192 —, elementwise gate,
fp32): total training tokens per second of the whole machine for

  * ``2x1``: two processes × one thread each (what `reproduce --jobs 2` does),
  * ``1x2``: one process × two threads (one run at a time),
  * ``vmapK``: K runs ("arms", each its own weights and batches) trained in one process with two threads as one
    batched model: ``torch.func.stack_module_state`` + ``vmap`` over the arms, per-arm gradient clipping and
    one fused AdamW over the stacked weights (elementwise, so equal to K separate AdamWs),
  * ``2x1mN``, ``1x2mN``: as ``2x1``/``1x2`` with each step's batch in micro-batches of N sequences, gradients
    accumulated (``train.micro_batch_size`` = N).

Every layout runs the same number of steps per run after a warm-up; throughput = all tokens trained in the timed
sections / (last end − first start). ``--check N`` also trains each arm of the batched model and its separate run
for N steps and prints the largest loss difference.

    python benchmarks/layout_bench.py [--steps 20] [--layouts 2x1,1x2,vmap2,vmap4,2x1m4] [--check 50] [--shape d128b]
        [--keep-freed-memory]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import torch
from bench_common import SHAPES, Transformer, header, ours_config

SHAPE = "d128b"


def _data(seed: int, steps: int):
    _, _, _, _, T, B, V = SHAPES[SHAPE]
    g = torch.Generator().manual_seed(1000 + seed)
    return torch.randint(0, V, (steps, B, T + 1), generator=g)


def batched_trainer(K: int, steps_data: list[torch.Tensor]):
    """A closure training K arms one step (arm k: seed k weights, batches steps_data[k]); returns the K losses."""
    import copy

    from torch.func import functional_call, stack_module_state

    models = []
    for k in range(K):
        torch.manual_seed(k)
        models.append(Transformer(ours_config(SHAPE, "elementwise")))
    params, buffers = stack_module_state(models)
    base = copy.deepcopy(models[0])  # structure only: functional_call supplies the stacked weights
    opt = torch.optim.AdamW(list(params.values()), lr=1e-3, fused=True)

    def one(p, b, x, y):
        return functional_call(base, (p, b), (x,), {"targets": y})

    batched = torch.func.vmap(one)
    state = {"i": 0}

    def step():
        i = state["i"]
        xy = torch.stack([d[i] for d in steps_data])  # (K, B, T + 1)
        losses = batched(params, buffers, xy[..., :-1], xy[..., 1:])
        losses.sum().backward()
        with torch.no_grad():  # per-arm clip_grad_norm_(1.0)
            norms = torch.stack([p.grad.flatten(1).pow(2).sum(1) for p in params.values()]).sum(0).sqrt()
            scale = (1.0 / (norms + 1e-6)).clamp(max=1.0)
            for p in params.values():
                p.grad.mul_(scale.view(-1, *([1] * (p.ndim - 1))))
        opt.step()
        opt.zero_grad(set_to_none=True)
        state["i"] += 1
        return losses.detach()

    return step


def separate_trainer(seed: int, data: torch.Tensor, micro: int = 0):
    """One run's training step; ``micro`` > 0: the batch in micro-batches of that many sequences, gradients
    accumulated (mean of the micro-batch means, as the Trainer's ``train.micro_batch_size`` does)."""
    torch.manual_seed(seed)
    model = Transformer(ours_config(SHAPE, "elementwise"))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    state = {"i": 0}

    def step():
        xy = data[state["i"]]
        parts = xy.split(micro) if micro else (xy,)
        loss = 0.0
        for part in parts:
            part_loss = model(part[:, :-1], targets=part[:, 1:]) / len(parts)
            part_loss.backward()
            loss = loss + part_loss.detach()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        state["i"] += 1
        return loss

    return step


def child(kind: str, threads: int, steps: int, seed: int, micro: int = 0, keep_freed: bool = False) -> dict:
    torch.set_num_threads(threads)
    if keep_freed:
        from smallinit.train.host import keep_freed_memory

        keep_freed_memory()
    warm = 2
    _, _, _, _, T, B, V = SHAPES[SHAPE]
    if kind.startswith("vmap"):
        K = int(kind[4:])
        step = batched_trainer(K, [_data(k, steps + warm) for k in range(K)])
        runs = K
    else:
        step = separate_trainer(seed, _data(seed, steps + warm), micro)
        runs = 1
    for _ in range(warm):
        step()
    t0 = time.time()
    for _ in range(steps):
        step()
    return {"start": t0, "end": time.time(), "tokens": runs * steps * B * T}


def run_layout(layout: str, steps: int, keep_freed: bool = False) -> float:
    """Machine tokens/s of one layout: ``2x1``, ``1x2`` (``mN`` appended: micro-batches of N sequences), ``vmapK``."""
    layout, _, micro = layout.partition("m") if not layout.startswith("vmap") else (layout, "", "")
    mb = ["--micro", micro] if micro else []
    if layout == "2x1":
        cmds = [(["--child", "single", "--threads", "1", "--seed", str(s), *mb]) for s in (0, 1)]
    elif layout == "1x2":
        cmds = [["--child", "single", "--threads", "2", "--seed", "0", *mb]]
    else:
        cmds = [["--child", layout, "--threads", "2"]]
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, *c, "--steps", str(steps), "--shape", SHAPE]
            + ["--keep-freed-memory"] * keep_freed,
            stdout=subprocess.PIPE,
            text=True,
            cwd=os.path.dirname(os.path.abspath(__file__)),
        )
        for c in cmds
    ]
    res = []
    for p in procs:
        out, _ = p.communicate()
        res += [json.loads(line[7:]) for line in out.splitlines() if line.startswith("RESULT ")]
    if len(res) != len(cmds):
        raise RuntimeError(f"{layout}: a child failed")
    return sum(r["tokens"] for r in res) / (max(r["end"] for r in res) - min(r["start"] for r in res))


def check(K: int, steps: int) -> float:
    """Largest |loss_batched − loss_separate| over K arms and ``steps`` steps."""
    datas = [_data(k, steps) for k in range(K)]
    b = batched_trainer(K, datas)
    seps = [separate_trainer(k, datas[k]) for k in range(K)]
    worst = 0.0
    for i in range(steps):
        lb = b()
        for k in range(K):
            ls = seps[k]()
            worst = max(worst, abs(lb[k].item() - ls.item()))
    return worst


def main() -> None:
    global SHAPE
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--layouts", default="2x1,1x2,vmap2,vmap4")
    ap.add_argument("--repeats", type=int, default=2, help="each layout this many times, interleaved; best kept")
    ap.add_argument("--check", type=int, default=0)
    ap.add_argument("--shape", default="d128b", choices=list(SHAPES))
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--micro", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument(
        "--keep-freed-memory",
        action="store_true",
        help="glibc keeps freed blocks for reuse, as the Trainer sets it (smallinit.train.host)",
    )
    args = ap.parse_args()
    SHAPE = args.shape
    if args.child:
        print(
            "RESULT "
            + json.dumps(child(args.child, args.threads, args.steps, args.seed, args.micro, args.keep_freed_memory)),
            flush=True,
        )
        return
    print(header(2), f"shape {SHAPE} {SHAPES[SHAPE]}", flush=True)
    layouts = args.layouts.split(",")
    best: dict[str, list[float]] = {k: [] for k in layouts}
    for rep in range(args.repeats):
        for lay in layouts:
            tps = run_layout(lay, args.steps, args.keep_freed_memory)
            best[lay].append(tps)
            print(f"repeat {rep}: {lay:6s} {tps:8.0f} tokens/s (machine total)", flush=True)
    print("\n| layout | machine tokens/s (best of repeats) | all repeats |\n|---|---|---|")
    for lay, v in best.items():
        print(f"| {lay} | {max(v):.0f} | {', '.join(f'{x:.0f}' for x in v)} |")
    if args.check:
        torch.set_num_threads(2)
        print(f"\nbatched vs separate, 2 arms, {args.check} steps: max |Δloss| = {check(2, args.check):.2e}")


if __name__ == "__main__":
    main()
