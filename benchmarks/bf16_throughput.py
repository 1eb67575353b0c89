"""bf16 on this CPU: tokens/s of smallinit training steps in fp32 vs bf16 autocast, eager vs compiled, in one sitting.

Issue #31 ("bf16 where the CPU has it"). Shapes (byte vocabulary 257, T 256, B 16, 4 layers, d_ff 3·d, tied
embeddings, the default elementwise gate — ``--gate`` changes it): ``d64`` (2 heads), ``d128`` (4 heads, the cpu
crossover's shape), ``d384`` (6 heads). Every variant trains with the Trainer's step (``model(idx, targets=...)``,
the chunked loss eager / full logits compiled, clipping, fused AdamW; bf16 = forward and loss under
``torch.autocast("cpu", dtype=torch.bfloat16)`` as ``train.dtype=bf16`` does). For each shape the variants take
turns, round-robin (``bench_common.time_alternating``), so the bf16/fp32 and compiled/eager ratios come from one
sitting; the figure is the median per variant. Compile time (the first steps) is excluded and printed.

Every line carries the CPU flags (avx2 / avx512_bf16 / amx_bf16) and the same-run fp32 and bf16 matmul peaks, measured
right before that shape's rounds; MFU is against the peak of the variant's dtype. Without native bf16 (neither
avx512_bf16 nor amx_bf16) the bf16 variants are skipped (emulated bf16 matmuls would take minutes and measure the
emulation) unless ``--force-bf16``.

    python benchmarks/bf16_throughput.py [--shapes d64,d128,d384] [--threads 1,2] [--rounds 5] [--per-round 2]
        [--modes eager,compiled] [--gate elementwise] [--json OUT]

The lead runs it for real; a smoke run: ``--shapes d64 --threads 1 --rounds 1 --per-round 1 --modes eager``.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from bench_common import (
    bf16_peak,
    cpu_flags,
    cpu_model,
    load_average,
    make_step,
    matmul_peak,
    native_bf16,
    time_alternating,
)

from smallinit import ModelConfig, Transformer

VOCAB, SEQ, BATCH, LAYERS = 257, 256, 16, 4
SHAPES = {"d64": (64, 2), "d128": (128, 4), "d384": (384, 6)}  # name: (d_model, heads)


def flags_text() -> str:
    have = set(cpu_flags().split())
    return " ".join(f"{f}{'+' if f in have else '-'}" for f in ("avx2", "avx512_bf16", "amx_bf16"))


def config(shape: str, gate: str) -> ModelConfig:
    d, h = SHAPES[shape]
    return ModelConfig(
        vocab_size=VOCAB,
        d_model=d,
        n_layers=LAYERS,
        n_heads=h,
        d_ff=3 * d,
        max_seq_len=SEQ,
        gate=gate,
        tie_embeddings=True,
    )


def ours_loss(fwd, x, y):
    return fwd(x, targets=y)


def run_shape(
    shape: str, threads: int, rounds: int, per_round: int, modes: list[str], dtypes: list[str], gate: str
) -> list[dict]:
    torch.set_num_threads(threads)
    torch._dynamo.reset()  # each shape compiles afresh: past dynamo's cache limit (8) a compiled variant ran eager
    cfg = config(shape, gate)
    steps, compile_s, fpt = {}, {}, 0.0
    for mode in modes:
        for dtype in dtypes:
            torch.manual_seed(0)
            model = Transformer(cfg)
            fpt = model.flops_per_token(SEQ)
            fwd = torch.compile(model) if mode == "compiled" else None
            step = make_step(model, VOCAB, SEQ, BATCH, forward=fwd, loss_fn=ours_loss, dtype=dtype)
            name = f"{dtype} {mode}"
            t0 = time.perf_counter()
            step()  # compiles a compiled variant (excluded from the timing, reported)
            compile_s[name] = time.perf_counter() - t0
            steps[name] = step
    peaks = {"fp32": matmul_peak(), "bf16": bf16_peak()}
    secs = time_alternating(steps, rounds, warmup=2, per_round=per_round)
    rows = []
    for name, s in secs.items():
        dtype, mode = name.split()
        tps = BATCH * SEQ / s["wall"]
        r = {
            "shape": shape,
            "d_model": cfg.d_model,
            "threads": threads,
            "dtype": dtype,
            "mode": mode,
            "gate": gate,
            "tokens_per_s": tps,
            "tokens_per_cpu_s": BATCH * SEQ / s["cpu"],
            "gflops": tps * fpt / 1e9,
            "peak_fp32": peaks["fp32"],
            "peak_bf16": peaks["bf16"],
            "first_step_s": compile_s[name],
            "flags": cpu_flags(),
            "load": load_average(),
        }
        r["mfu"] = r["gflops"] / peaks[dtype]
        base = secs.get(f"fp32 {mode}")
        r["x_fp32_same_mode"] = base["wall"] / s["wall"] if base else None
        eager = secs.get(f"{dtype} eager")
        r["x_eager_same_dtype"] = eager["wall"] / s["wall"] if eager else None
        rows.append(r)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="d64,d128,d384")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--per-round", type=int, default=2, help="steps of each variant per round")
    ap.add_argument("--modes", default="eager,compiled")
    ap.add_argument("--gate", default="elementwise", choices=("none", "headwise", "elementwise"))
    ap.add_argument("--force-bf16", action="store_true", help="time bf16 even without native bf16 (emulated)")
    ap.add_argument("--json")
    args = ap.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    if not set(modes) <= {"eager", "compiled"}:
        ap.error("--modes takes eager and/or compiled")
    unknown = [s for s in args.shapes.split(",") if s not in SHAPES]
    if unknown:
        ap.error(f"unknown shape(s) {', '.join(unknown)}; choose from {', '.join(SHAPES)}")
    dtypes = ["fp32", "bf16"]
    if not native_bf16() and not args.force_bf16:
        print(f"no native bf16 on this CPU ({flags_text()}): bf16 variants skipped (--force-bf16 times the emulation)")
        dtypes = ["fp32"]
    print(
        f"CPU: {cpu_model()}; flags {flags_text()} (all: {cpu_flags()}); torch {torch.__version__}; B {BATCH} × "
        f"T {SEQ}, byte vocabulary {VOCAB}, {LAYERS} layers, gate {args.gate}; load average {load_average()}",
        flush=True,
    )
    rows = []
    print(
        "| shape | threads | dtype | mode | tokens/s | × fp32 (same mode) | × eager (same dtype) | MFU | "
        "fp32 peak | bf16 peak | flags | first step s |\n|---|---|---|---|---|---|---|---|---|---|---|---|",
        flush=True,
    )
    for t in [int(x) for x in args.threads.split(",")]:
        for shape in args.shapes.split(","):
            for r in run_shape(shape, t, args.rounds, args.per_round, modes, dtypes, args.gate):
                rows.append(r)
                fmt = lambda v: f"{v:.3f}" if v is not None else "–"  # noqa: E731
                print(
                    f"| {r['shape']} | {t} | {r['dtype']} | {r['mode']} | {r['tokens_per_s']:,.0f} | "
                    f"{fmt(r['x_fp32_same_mode'])} | {fmt(r['x_eager_same_dtype'])} | {r['mfu']:.0%} | "
                    f"{r['peak_fp32']:.1f} | {r['peak_bf16']:.1f} | {flags_text()} | {r['first_step_s']:.1f} |",
                    flush=True,
                )
    print(f"(load average at the end: {load_average()})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"flags": cpu_flags(), "cpu": cpu_model(), "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
