"""Training throughput of the MoE model size vs the dense size with (almost) equal active parameters.

Measures tokens/s of one training step — forward, cross-entropy (+ the MoE auxiliary loss), backward,
AdamW step — on random tokens, fp32, reporting the median over ``--steps`` timed steps after
``--warmup`` untimed ones. The MoE model is run with both expert implementations (``torch._grouped_mm``
and a loop over experts). The variants are interleaved step by step, and this process's CPU time is
reported beside wall time, so that other load on a shared machine biases no variant.

    .venv/bin/python benchmarks/moe_throughput.py                 # small vs small-moe, B=8, T=256, 1 thread
    .venv/bin/python benchmarks/moe_throughput.py --threads 2 --out results.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch
import torch.nn.functional as F

from smallinit.model import ModelConfig, Transformer
from smallinit.model.moe import MoE


def make_step(model: Transformer, batch: int, seq: int):
    """A closure running one training step on fresh random tokens."""
    g = torch.Generator().manual_seed(0)
    V = model.config.vocab_size
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)

    def step() -> None:
        idx = torch.randint(0, V, (batch, seq + 1), generator=g)
        logits = model(idx[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, V), idx[:, 1:].reshape(-1))
        aux = model.aux_loss()
        if aux is not None:
            loss = loss + aux
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def timed(step) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of one call."""
    w0, c0 = time.perf_counter(), time.process_time()
    step()
    return time.perf_counter() - w0, time.process_time() - c0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dense", default="small")
    ap.add_argument("--moe", default="small-moe")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (the CPU is shared)")
    ap.add_argument("--out", help="write the results as JSON here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    runs = [(args.dense, None), (args.moe, "grouped_mm"), (args.moe, "loop")]
    models, steps = [], []
    for size, impl in runs:
        torch.manual_seed(0)
        model = Transformer(ModelConfig.from_size(size, max_seq_len=max(args.seq, 1)))
        for m in model.modules():
            if isinstance(m, MoE):
                m.impl = impl
        models.append(model)
        steps.append(make_step(model, args.batch, args.seq))
    # Interleave the variants step by step (rotating the order) so that load from other processes on a
    # shared machine hits all of them alike; report wall time and this process's CPU time.
    wall: list[list[float]] = [[] for _ in runs]
    cpu: list[list[float]] = [[] for _ in runs]
    for i in range(args.warmup + args.steps):
        for j in range(len(runs)):
            k = (i + j) % len(runs)
            w, c = timed(steps[k])
            if i >= args.warmup:
                wall[k].append(w)
                cpu[k].append(c)
    results = []
    for (size, impl), model, ws, cs in zip(runs, models, wall, cpu):
        med, cmed = statistics.median(ws), statistics.median(cs)
        row = {
            "preset": size,  # the JSON key keeps its old name
            "impl": impl or "dense",
            "params_total": model.num_params(),
            "params_active": model.num_params(active=True),
            "params_active_non_embedding": model.num_params(non_embedding=True, active=True),
            "step_s_median": med,
            "step_s_all": ws,
            "cpu_s_median": cmed,
            "cpu_s_all": cs,
            "tokens_per_s": args.batch * args.seq / med,
            "tokens_per_cpu_s": args.batch * args.seq / cmed,
        }
        results.append(row)
        print(
            f"{size:>10} {row['impl']:>10}  total {row['params_total'] / 1e6:6.2f}M  "
            f"active {row['params_active'] / 1e6:6.2f}M  step {med * 1e3:7.1f} ms  "
            f"{row['tokens_per_s']:6.0f} tok/s  ({row['tokens_per_cpu_s']:6.0f} tok per CPU-s)"
        )
    meta = {
        "batch": args.batch,
        "seq": args.seq,
        "dtype": "float32",
        "threads": args.threads,
        "warmup": args.warmup,
        "steps": args.steps,
        "torch": torch.__version__,
        "step": "fwd+bwd+AdamW",
    }
    if args.out:
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"meta": meta, "results": results}, f, indent=2)
        os.replace(tmp, args.out)


if __name__ == "__main__":
    main()
