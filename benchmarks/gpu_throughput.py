"""Training throughput of the paper-sized model sizes on a GPU: bf16 autocast + torch.compile, MFU vs the device peak.

For each model size (default `0.1b` and `0.3b`): forward + backward + fused AdamW steps at seq_len 2048 with the
size's elementwise gate, timed after warm-up (median of --steps). Reports tokens/s, achieved TFLOP/s
(6N + 12·L·T·d per token, as `Transformer.flops_per_token`), MFU = achieved / the device's dense bf16 peak
(table below, or --peak), peak memory and compile time. One short script: about a minute per size on an
H100/H200 (most of it compiling).

    python benchmarks/gpu_throughput.py [--sizes 0.1b,0.3b] [--batch 8] [--steps 10] [--json OUT.json]
    python benchmarks/gpu_throughput.py --device cpu --sizes tiny --seq 128 --steps 2 --no-compile  # smoke test
(`--presets` is the old name of `--sizes`; the JSON rows keep the key "preset" for the size.)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from smallinit import ModelConfig, Transformer
from smallinit.train.loop import param_groups

# Dense (no sparsity) bf16 tensor-core peaks in TFLOP/s from the vendors' data sheets; matched as substrings of
# torch.cuda.get_device_name(), most specific first.
BF16_PEAK_TFLOPS: list[tuple[str, float]] = [
    ("GB200", 2500.0),
    ("B200", 2250.0),
    ("H200", 989.0),
    ("H100 PCIe", 756.0),
    ("H100", 989.0),  # SXM / NVL per GPU
    ("H800", 989.0),
    ("A100", 312.0),
    ("A800", 312.0),
    ("L40S", 362.0),
    ("L40", 181.0),
    ("A10G", 125.0),
    ("A10", 125.0),
    ("L4", 121.0),
    ("RTX 4090", 165.0),
    ("RTX 3090", 71.0),
    ("MI300X", 1307.0),
    ("MI250X", 383.0),
]


def device_peak_tflops(name: str) -> float | None:
    """The table's dense bf16 peak for a device name (None when unknown)."""
    for key, peak in BF16_PEAK_TFLOPS:
        if key.lower() in name.lower():
            return peak
    return None


def measured_matmul_tflops(device: torch.device, dtype: torch.dtype, n: int = 8192, reps: int = 10) -> float:
    """Best achieved TFLOP/s of an n×n @ n×n matmul (2n³ FLOPs), for reference beside the data-sheet peak."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    best = 0.0
    for _ in range(reps + 2):
        _sync(device)
        t = time.perf_counter()
        a @ b
        _sync(device)
        best = max(best, 2 * n**3 / (time.perf_counter() - t) / 1e12)
    return best


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_size(
    size: str, device: torch.device, seq_len: int, batch: int, steps: int, warmup: int, compile_: bool, bf16: bool
) -> dict:
    """Median step time of one model size; returns tokens/s, TFLOP/s, memory and compile time."""
    torch.manual_seed(0)
    cfg = ModelConfig.from_size(size)
    cfg.max_seq_len = max(cfg.max_seq_len, seq_len)
    model = Transformer(cfg).to(device)
    opt = torch.optim.AdamW(
        param_groups(model, 0.1, False), lr=1e-4, betas=(0.9, 0.95), fused=device.type in ("cuda", "cpu")
    )
    fwd = torch.compile(model) if compile_ else model
    x = torch.randint(0, cfg.vocab_size, (batch, seq_len), device=device)
    y = torch.randint(0, cfg.vocab_size, (batch, seq_len), device=device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)

    def step() -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            logits = fwd(x)
            loss = F.cross_entropy(logits.flatten(0, 1).float(), y.flatten())
        aux = model.aux_loss()
        (loss + aux if aux is not None else loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    t0 = time.perf_counter()
    step()
    _sync(device)
    first = time.perf_counter() - t0
    for _ in range(max(0, warmup - 1)):
        step()
    times = []
    for _ in range(steps):
        _sync(device)
        t = time.perf_counter()
        step()
        _sync(device)
        times.append(time.perf_counter() - t)
    med = statistics.median(times)
    tps = batch * seq_len / med
    flops = model.flops_per_token(seq_len)
    mem = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else float("nan")
    return {
        "preset": size,  # the JSON key keeps its old name
        "params": model.num_params(),
        "seq_len": seq_len,
        "batch": batch,
        "step_s": med,
        "tokens_per_s": tps,
        "tflops_per_s": tps * flops / 1e12,
        "compile_s": first - med if compile_ else 0.0,
        "peak_mem_gib": mem,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", "--presets", dest="sizes", default="0.1b,0.3b", help="comma-separated model sizes")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--seq", type=int, default=2048, help="sequence length")
    ap.add_argument("--batch", type=int, default=8, help="sequences per step (no accumulation)")
    ap.add_argument("--steps", type=int, default=10, help="timed steps (median reported)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--fp32", action="store_true", help="no bf16 autocast")
    ap.add_argument("--peak", type=float, help="device bf16 peak TFLOP/s (default: from the table)")
    ap.add_argument("--json", help="also write the results as JSON here")
    args = ap.parse_args()

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("gpu_throughput: no CUDA device here (use --device cpu for a smoke test)")
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    peak = args.peak or device_peak_tflops(name)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    bf16 = not args.fp32
    mm = measured_matmul_tflops(
        device,
        torch.bfloat16 if bf16 else torch.float32,
        n=8192 if device.type == "cuda" else 512,
        reps=10 if device.type == "cuda" else 2,
    )
    print(
        f"device: {name}; data-sheet bf16 peak: {f'{peak:.0f} TFLOP/s' if peak else 'unknown (use --peak)'}; "
        f"measured {'bf16' if bf16 else 'fp32'} matmul: {mm:.1f} TFLOP/s; torch {torch.__version__}",
        flush=True,
    )
    rows = []
    for size in [p.strip() for p in args.sizes.split(",") if p.strip()]:
        r = time_size(size, device, args.seq, args.batch, args.steps, args.warmup, not args.no_compile, bf16)
        r["mfu"] = r["tflops_per_s"] / peak if peak else None
        r["mfu_vs_measured_matmul"] = r["tflops_per_s"] / mm if mm else None
        rows.append(r)
        print(
            f"{size}: {r['tokens_per_s']:,.0f} tok/s, {r['tflops_per_s']:.1f} TFLOP/s, MFU {r['mfu']:.1%}"
            if peak
            else f"{size}: {r['tokens_per_s']:,.0f} tok/s",
            flush=True,
        )

    print(
        f"\n| size | params | seq × batch | tokens/s | TFLOP/s | MFU (vs {peak or '?'} TFLOP/s) | "
        "vs measured matmul | peak mem GiB | compile s |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        mfu = f"{r['mfu']:.1%}" if r["mfu"] is not None else "–"
        print(
            f"| {r['preset']} | {r['params'] / 1e6:.1f}M | {r['seq_len']} × {r['batch']} | {r['tokens_per_s']:,.0f} | "
            f"{r['tflops_per_s']:.1f} | {mfu} | {r['mfu_vs_measured_matmul']:.0%} | {r['peak_mem_gib']:.1f} | "
            f"{r['compile_s']:.0f} |"
        )
    if args.json:
        from smallinit.core.io import atomic_write_json

        atomic_write_json(
            args.json,
            {
                "device": name,
                "peak_tflops": peak,
                "measured_matmul_tflops": mm,
                "bf16": bf16,
                "compiled": not args.no_compile,
                "torch": torch.__version__,
                "runs": rows,
            },
        )
        print(json.dumps({"wrote": args.json}))


if __name__ == "__main__":
    main()
