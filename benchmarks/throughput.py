"""Training throughput vs the machine's own matmul peak, in one process.

1. Peak GFLOP/s of square matmuls (512–2048, fp32 and bf16, best of several).
2. Forward + backward + AdamW steps of our model for several shapes, in fp32/bf16 × eager/compiled,
   ungated and elementwise-gated, plus `small-moe`: tokens/s, achieved GFLOP/s (6N + 12·L·T·d per
   token, gate included), MFU against the same-run peak of the matching dtype, peak RSS, compile time.
   Median of ≥ 5 timed steps after warm-up.
3. Scaling: tokens/s and peak memory vs d_model and vs seq_len (fp32 eager).

    python benchmarks/throughput.py [--json OUT.json] [--quick] [--only SHAPE]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time

import torch
import torch.nn.functional as F

from smallinit import ModelConfig, Transformer
from smallinit.train.loop import param_groups

SHAPES = {  # name: (d_model, n_layers, n_heads, seq_len, batch, vocab)
    "d128-L4-T256": (128, 4, 4, 256, 16, 8192),
    "d384-L6-T256": (384, 6, 6, 256, 16, 8192),
    "d512-L8-T512": (512, 8, 8, 512, 8, 8192),
}


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def matmul_peak(dtype: torch.dtype, sizes=(512, 1024, 2048), reps: int = 5) -> float:
    best = 0.0
    for n in sizes:
        a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
        a @ b
        for _ in range(reps):
            t = time.perf_counter()
            a @ b
            dt = time.perf_counter() - t
            best = max(best, 2 * n**3 / dt / 1e9)
    return best


def time_training(
    cfg: ModelConfig, seq_len: int, batch: int, dtype: str, compile_: bool, steps: int = 5, warmup: int = 2
) -> dict:
    torch.manual_seed(0)
    model = Transformer(cfg)
    opt = torch.optim.AdamW(param_groups(model, 0.1, False), lr=1e-3, fused=True)  # as the Trainer
    fwd = torch.compile(model) if compile_ else model
    x = torch.randint(0, cfg.vocab_size, (batch, seq_len))
    y = torch.randint(0, cfg.vocab_size, (batch, seq_len))
    amp = torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16")

    def step() -> None:
        with amp:
            logits = fwd(x)
        loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
        aux = model.aux_loss()
        (loss + aux if aux is not None else loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    t0 = time.perf_counter()
    step()
    first = time.perf_counter() - t0
    for _ in range(warmup - 1):
        step()
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    med = statistics.median(times)
    tps = batch * seq_len / med
    flops = model.flops_per_token(seq_len)
    return {
        "tokens_per_s": tps,
        "gflops_per_s": tps * flops / 1e9,
        "step_s": med,
        "compile_s": first - med if compile_ else 0.0,
        "peak_rss_mb": peak_rss_mb(),
        "params": model.num_params(),
        "active_params": model.num_params(active=True),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="also write the results as JSON here")
    ap.add_argument("--quick", action="store_true", help="fewer variants (fp32 eager + bf16 compiled, gated/ungated)")
    ap.add_argument("--only", help="only this shape name")
    ap.add_argument("--no-scaling", action="store_true")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--scaling-steps", type=int, default=3)
    args = ap.parse_args()

    out: dict = {"threads": torch.get_num_threads(), "torch": torch.__version__}
    peaks = {"fp32": matmul_peak(torch.float32)}
    peaks["bf16"] = matmul_peak(torch.bfloat16, sizes=(256, 512), reps=2)  # slow CPUs: small sizes first
    # Without native bf16 (AVX-512 BF16 / AMX) bf16 matmuls are emulated and run far below fp32; timing a
    # training step in bf16 would then take minutes and measure the emulation, so those variants are skipped.
    bf16_usable = peaks["bf16"] >= 0.25 * peaks["fp32"]
    if bf16_usable:
        peaks["bf16"] = max(peaks["bf16"], matmul_peak(torch.bfloat16, sizes=(1024, 2048)))
    out["peak_gflops"] = peaks
    print(
        f"matmul peak: fp32 {peaks['fp32']:.1f} GFLOP/s, bf16 {peaks['bf16']:.1f} GFLOP/s ({out['threads']} threads)\n",
        flush=True,
    )
    rows = []
    variants = [("fp32", False), ("fp32", True), ("bf16", False), ("bf16", True)]
    if args.quick:
        variants = [("fp32", False), ("bf16", True)]
    if not bf16_usable:
        print(
            f"bf16 matmul runs at {peaks['bf16']:.1f} GFLOP/s here vs {peaks['fp32']:.1f} fp32 (no native bf16): "
            "bf16 variants skipped\n"
        )
        variants = [v for v in variants if v[0] != "bf16"]
        out["bf16_skipped"] = True
    shapes = {k: v for k, v in SHAPES.items() if not args.only or k == args.only}
    for name, (d, L, H, T, B, V) in shapes.items():
        for gate in ("none", "elementwise"):
            cfg = ModelConfig(
                vocab_size=V, d_model=d, n_layers=L, n_heads=H, max_seq_len=T, gate=gate, tie_embeddings=True
            )
            for dtype, comp in variants:
                r = time_training(cfg, T, B, dtype, comp, steps=args.steps)
                r.update(shape=name, gate=gate, dtype=dtype, compiled=comp, mfu=r["gflops_per_s"] / peaks[dtype])
                rows.append(r)
                print(
                    f"{name:14s} gate={gate:11s} {dtype} {'compiled' if comp else 'eager   '} "
                    f"{r['tokens_per_s']:9.0f} tok/s  {r['gflops_per_s']:6.1f} GFLOP/s  MFU {r['mfu']:.0%}",
                    flush=True,
                )
    if not args.only:
        moe = ModelConfig.from_size("small-moe")
        for dtype, comp in variants[:1]:
            r = time_training(moe, 256, 16, dtype, comp, steps=args.steps)
            r.update(shape="small-moe", gate=moe.gate, dtype=dtype, compiled=comp, mfu=r["gflops_per_s"] / peaks[dtype])
            rows.append(r)
            print(f"small-moe {dtype} {r['tokens_per_s']:.0f} tok/s MFU {r['mfu']:.0%}", flush=True)
    out["runs"] = rows

    print("\n| shape | gate | dtype | mode | tokens/s | GFLOP/s | MFU | peak RSS MB | compile s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['shape']} | {r['gate']} | {r['dtype']} | {'compiled' if r['compiled'] else 'eager'} | "
            f"{r['tokens_per_s']:.0f} | {r['gflops_per_s']:.1f} | {r['mfu']:.0%} | {r['peak_rss_mb']:.0f} | "
            f"{r['compile_s']:.1f} |"
        )

    if not args.no_scaling and not args.only:
        scaling = []
        print("\n| sweep | d_model | seq_len | tokens/s | GFLOP/s | MFU | peak RSS MB |")
        print("|---|---|---|---|---|---|---|")
        for d, T in [
            (128, 256),
            (256, 256),
            (512, 256),
            (768, 256),
            (1024, 256),
            (384, 128),
            (384, 512),
            (384, 1024),
            (384, 2048),
        ]:
            B = max(1, 4096 // T)
            cfg = ModelConfig(
                vocab_size=8192,
                d_model=d,
                n_layers=4,
                n_heads=max(1, d // 64),
                max_seq_len=T,
                gate="elementwise",
                tie_embeddings=True,
            )
            r = time_training(cfg, T, B, "fp32", False, steps=args.scaling_steps, warmup=1)
            r.update(d_model=d, seq_len=T, batch=B, mfu=r["gflops_per_s"] / peaks["fp32"])
            scaling.append(r)
            print(
                f"| {'d' if T == 256 else 'T'} | {d} | {T} | {r['tokens_per_s']:.0f} | {r['gflops_per_s']:.1f} | "
                f"{r['mfu']:.0%} | {r['peak_rss_mb']:.0f} |",
                flush=True,
            )
        out["scaling"] = scaling
    if args.json:
        from smallinit.core.io import atomic_write_json

        atomic_write_json(args.json, out)


if __name__ == "__main__":
    main()
