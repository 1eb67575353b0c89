"""Ours beside a plain nanoGPT, at both shapes of issue #19, in one process, timed alternately.

Shapes (B 16, T 256, vocab 8192 = the BPE tokenizer the demo/cpu reproduction presets train):
``d384`` = d 384 × 6 layers (d_ff 1024) and ``d128`` = d 128 × 4 layers (d_ff 384, the reproduction's `tiny`).
nanoGPT: learned positions, LayerNorm, GELU MLP of 4·d, fused c_attn, SDPA, tied embeddings. Every model
trains with the Trainer's step (fused AdamW, grad clipping); ours through ``model(idx, targets=...)`` as the
Trainer calls it. Each step closure is timed in turn (round-robin) so that a change of machine load hits
all models alike; the figure is the median. GFLOP/s = tokens/s × each model's own 6N + 12·L·T·d
(N = non-embedding parameters + the LM head V·d, nanoGPT's estimate_mfu count); MFU against the same
process's best fp32 square matmul at the same thread count. Both clocks are reported: wall time, and the
process's CPU time (the steadier measure of work on a contended machine, for one thread; with two threads CPU
time also counts the threads' spin-waits).

    python benchmarks/nanogpt_reference.py [--shapes d384,d128,d128b] [--threads 1,2] [--rounds 7] [--json OUT]
        [--logits-loss] (ours through full logits + cross_entropy)  [--compile]   (also time torch.compile'd models; compile time excluded, warm-up 3 steps)
"""

from __future__ import annotations

import argparse
import json

import torch

from bench_common import (SHAPES, Transformer, cpu_flags, header, load_average, make_step, matmul_peak, nanogpt,
                          ours_config, time_alternating)


def ours_loss(fwd, x, y):
    return fwd(x, targets=y)


def run(shape: str, threads: int, rounds: int, compile_: bool, logits_loss: bool = False) -> list[dict]:
    torch.set_num_threads(threads)
    d, L, H, ff, T, B, V = SHAPES[shape]
    torch.manual_seed(0)
    models = {"nanoGPT": nanogpt(shape)}
    for gate in ("none", "elementwise"):
        models[f"smallinit gate={gate}"] = Transformer(ours_config(shape, gate))
    fpt = {"nanoGPT": models["nanoGPT"].flops_per_token(T)}
    fpt.update({k: m.flops_per_token(T) for k, m in models.items() if k != "nanoGPT"})
    steps = {}
    for k, m in models.items():
        lf = None if k == "nanoGPT" or logits_loss else ours_loss
        steps[k] = make_step(m, V, T, B, loss_fn=lf)
        if compile_:
            steps[k + " compiled"] = make_step(m, V, T, B, forward=torch.compile(m), loss_fn=lf)
            fpt[k + " compiled"] = fpt[k]
    peak = matmul_peak()
    secs = time_alternating(steps, rounds, warmup=3 if compile_ else 2)
    rows = []
    modes = [""] + [" compiled"] * compile_
    for k, s in secs.items():
        mode = " compiled" if k.endswith(" compiled") else ""
        r = {"shape": shape, "threads": threads, "model": k, "peak_gflops": peak, "load": load_average()}
        for clock in ("wall", "cpu"):
            base = {m: B * T / secs["nanoGPT" + m][clock] * fpt["nanoGPT"] / 1e9 for m in modes}
            gf = B * T / s[clock] * fpt[k] / 1e9
            r.update({f"tokens_per_s_{clock}": B * T / s[clock], f"gflops_{clock}": gf,
                      f"ratio_{clock}": gf / base[mode]})
        r["mfu"] = r["gflops_wall"] / peak
        rows.append(r)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="d384,d128")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--logits-loss", action="store_true",
                    help="ours through full logits + F.cross_entropy (the path before the chunked loss)")
    ap.add_argument("--json")
    args = ap.parse_args()
    all_rows = []
    for t in [int(x) for x in args.threads.split(",")]:
        torch.set_num_threads(t)
        print(header(t), flush=True)
        for shape in args.shapes.split(","):
            rows = run(shape, t, args.rounds, args.compile, args.logits_loss)
            all_rows += rows
            print(f"\n{shape} ({SHAPES[shape]}), {t} thread(s), fp32 matmul peak in this run "
                  f"{rows[0]['peak_gflops']:.1f} GFLOP/s, flags {cpu_flags()}")
            print("| model | tokens/s | GFLOP/s | MFU | × nanoGPT (wall) | tokens per CPU-s | × nanoGPT (CPU time) |\n"
                  "|---|---|---|---|---|---|---|")
            for r in rows:
                print(f"| {r['model']} | {r['tokens_per_s_wall']:.0f} | {r['gflops_wall']:.1f} | {r['mfu']:.0%} | "
                      f"{r['ratio_wall']:.3f} | {r['tokens_per_s_cpu']:.0f} | {r['ratio_cpu']:.3f} |", flush=True)
            print(f"(load average at the end: {load_average()})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"flags": cpu_flags(), "rows": all_rows}, f, indent=1)


if __name__ == "__main__":
    main()
