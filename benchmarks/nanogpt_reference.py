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

``--isolated``: every model alone in a fresh process per round (the models still take turns, round-robin, and each
process times ``--steps`` steps after a 2-step warm-up), as a training run has its process to itself. Timed in one
process, models with different allocation patterns share glibc's heap (a model with 134 MB logits beside one with
32 MB chunks), which moved a same-process A/B by up to 10% in the fifth pass of RESULTS.md.

    python benchmarks/nanogpt_reference.py [--shapes d384,d128,d128b] [--threads 1,2] [--rounds 7] [--json OUT]
        [--logits-loss] (ours through full logits + cross_entropy)
        [--compile]     (also time torch.compile'd models; compile time excluded, warm-up 3 steps; with --isolated
                         each in its own process too)
        [--isolated [--steps 4] [--keep-freed-memory] [--bound]]
        [--dtype bf16]  (every model, nanoGPT and ours alike, under the same torch.autocast("cpu", dtype=torch.bfloat16)
                         around forward + loss, as the Trainer's train.dtype=bf16; MFU against the same-run bf16
                         matmul peak, the fp32 peak printed beside it)

``--bound`` (with ``--isolated``) adds a lower bound on what any eager implementation of our block could reach with
PyTorch's own matmul and attention kernels (the ones nanoGPT uses): both of our models again, with their elementwise
work made (nearly) free — RMSNorm the identity, q and k not rotated (views, as nanoGPT's split), the SwiGLU product
silu(a)⊙b replaced by a + b (one pass forward; autograd passes an add's gradient through untouched). Every matmul, the
attention, the gate, the loss and the optimizer stay as they are. These are not our model (they do less work); a fused
kernel for any of the removed ops still reads and writes its tensors at least once each way, so the real model cannot
beat them. Their GFLOP/s are counted with our model's FLOPs, as if the removed work were done.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch
from bench_common import (
    SHAPES,
    Transformer,
    bf16_peak,
    cpu_flags,
    header,
    load_average,
    make_step,
    matmul_peak,
    nanogpt,
    ours_config,
    time_alternating,
)


def ours_loss(fwd, x, y):
    return fwd(x, targets=y)


MODELS = ("nanoGPT", "smallinit gate=none", "smallinit gate=elementwise")
FREE = ", elementwise free"
BOUND_MODELS = tuple(m + FREE for m in MODELS[1:])
COMPILED = " compiled"


def build(name: str, shape: str) -> torch.nn.Module:
    """The model ``name`` names, not compiled (a ``COMPILED`` name is compiled by its caller)."""
    torch.manual_seed(0)
    name = name.removesuffix(COMPILED).removesuffix(FREE)
    if name == "nanoGPT":
        return nanogpt(shape)
    return Transformer(ours_config(shape, name.split("=")[1]))


def make_elementwise_free() -> None:
    """Patch this process's model code for ``--bound``: RMSNorm → the identity; SplitRope's rotation → none (q and k
    are views of the projection as in nanoGPT, and the backward's one pass writing their gradients into one buffer
    stays: the pass nanoGPT's split pays too); silu(a)⊙b → a + b (the forward's one pass stays, the backward is free).
    Refuses to patch a name the model code no longer has (a silent no-op would time the real model)."""
    import torch.nn.functional as F

    from smallinit.model import fused, mlp, norm

    def swiglu_as_sum(self, x):
        w_gate, w_up = self.w_gate_up.weight.split([self.d_ff, self.d_ff], dim=0)
        return self.w_down(F.linear(x, w_gate) + F.linear(x, w_up))

    def no_rotation(x, cos, sin, sign, out=None):
        return x if out is None else out.copy_(x)

    for owner, attr, replacement in (
        (norm.RMSNorm, "forward", lambda self, h: h),
        (fused, "rotate", no_rotation),
        (mlp.SwiGLU, "forward", swiglu_as_sum),
    ):
        if not hasattr(owner, attr):
            raise SystemExit(f"error: --bound: {owner.__name__}.{attr} is gone; update make_elementwise_free")
        setattr(owner, attr, replacement)


def child(
    shape: str, name: str, threads: int, steps: int, logits_loss: bool, keep_freed: bool = False, dtype: str = "fp32"
) -> dict:
    """One model alone in this process: median wall and CPU seconds per step over ``steps`` after 2 warm-up steps
    (3 for a ``COMPILED`` name, whose first step compiles: compile time excluded)."""
    torch.set_num_threads(threads)
    if keep_freed:
        from smallinit.train.host import keep_freed_memory

        keep_freed_memory()
    if name.endswith(FREE):
        make_elementwise_free()
    _, _, _, _, T, B, V = SHAPES[shape]
    model = build(name, shape)
    compiled = name.endswith(COMPILED)
    lf = None if name.startswith("nanoGPT") or logits_loss else ours_loss
    step = make_step(model, V, T, B, forward=torch.compile(model) if compiled else None, loss_fn=lf, dtype=dtype)
    for _ in range(3 if compiled else 2):
        step()
    wall, cpu = [], []
    for _ in range(steps):
        t, c = time.perf_counter(), time.process_time()
        step()
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return {"wall": statistics.median(wall), "cpu": statistics.median(cpu)}


def time_isolated(
    shape: str,
    threads: int,
    rounds: int,
    steps: int,
    logits_loss: bool,
    keep_freed: bool = False,
    models: tuple[str, ...] = MODELS,
    dtype: str = "fp32",
) -> dict[str, dict[str, float]]:
    """Median over rounds of each model's per-process median step time; each round runs every model in turn, each
    in a fresh process."""
    per: dict[str, list[dict]] = {k: [] for k in models}
    for _ in range(rounds):
        for k in models:
            cmd = (
                [
                    sys.executable,
                    os.path.abspath(__file__),
                    "--child",
                    k,
                    "--shapes",
                    shape,
                    "--threads",
                    str(threads),
                    "--steps",
                    str(steps),
                ]
                + ["--logits-loss"] * logits_loss
                + ["--keep-freed-memory"] * keep_freed
                + ["--dtype", dtype]
            )
            out = subprocess.run(
                cmd, capture_output=True, text=True, check=True, cwd=os.path.dirname(os.path.abspath(__file__))
            ).stdout
            per[k].append(json.loads(next(ln[7:] for ln in out.splitlines() if ln.startswith("RESULT "))))
    return {k: {c: statistics.median(r[c] for r in v) for c in ("wall", "cpu")} for k, v in per.items()}


def run(
    shape: str,
    threads: int,
    rounds: int,
    compile_: bool,
    logits_loss: bool = False,
    isolated_steps: int = 0,
    keep_freed: bool = False,
    bound: bool = False,
    dtype: str = "fp32",
) -> list[dict]:
    torch.set_num_threads(threads)
    torch._dynamo.reset()  # each shape compiles afresh (dynamo's cache limit: 8 compiles per code object)
    d, L, H, ff, T, B, V = SHAPES[shape]
    names = MODELS + BOUND_MODELS * bound + tuple(m + COMPILED for m in MODELS) * (compile_ and bool(isolated_steps))
    models = {k: build(k, shape) for k in names}  # unpatched here: the FLOP count of the model as shipped
    fpt = {k: m.flops_per_token(T) for k, m in models.items()}
    steps = {}
    if not isolated_steps:
        for k, m in models.items():
            lf = None if k == "nanoGPT" or logits_loss else ours_loss
            steps[k] = make_step(m, V, T, B, loss_fn=lf, dtype=dtype)
            if compile_:
                steps[k + " compiled"] = make_step(m, V, T, B, forward=torch.compile(m), loss_fn=lf, dtype=dtype)
                fpt[k + " compiled"] = fpt[k]
    peaks = {"fp32": matmul_peak()}
    if dtype == "bf16":
        peaks["bf16"] = bf16_peak()
    peak = peaks[dtype]  # MFU against the peak of the dtype the matmuls run in
    if isolated_steps:
        secs = time_isolated(shape, threads, rounds, isolated_steps, logits_loss, keep_freed, names, dtype)
    else:
        secs = time_alternating(steps, rounds, warmup=3 if compile_ else 2)
    rows = []
    modes = [""] + [" compiled"] * compile_
    for k, s in secs.items():
        mode = " compiled" if k.endswith(" compiled") else ""
        r = {
            "shape": shape,
            "threads": threads,
            "model": k,
            "dtype": dtype,
            "peak_gflops": peak,
            "peaks_gflops": peaks,
            "load": load_average(),
        }
        for clock in ("wall", "cpu"):
            base = {m: B * T / secs["nanoGPT" + m][clock] * fpt["nanoGPT"] / 1e9 for m in modes}
            gf = B * T / s[clock] * fpt[k] / 1e9
            r.update(
                {f"tokens_per_s_{clock}": B * T / s[clock], f"gflops_{clock}": gf, f"ratio_{clock}": gf / base[mode]}
            )
        r["mfu"] = r["gflops_wall"] / peak
        rows.append(r)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="d384,d128")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument(
        "--logits-loss",
        action="store_true",
        help="ours through full logits + F.cross_entropy (the path before the chunked loss)",
    )
    ap.add_argument("--json")
    ap.add_argument("--isolated", action="store_true", help="each model alone in a fresh process per round")
    ap.add_argument("--steps", type=int, default=4, help="timed steps per process with --isolated")
    ap.add_argument(
        "--keep-freed-memory",
        action="store_true",
        help="with --isolated: every model's process keeps freed blocks for reuse, as the Trainer does",
    )
    ap.add_argument(
        "--bound",
        action="store_true",
        help="with --isolated: also our models with norms, RoPE and the SwiGLU product made free",
    )
    ap.add_argument(
        "--dtype",
        choices=("fp32", "bf16"),
        default="fp32",
        help="bf16: every model under the same torch.autocast('cpu', dtype=torch.bfloat16)",
    )
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(
            "RESULT "
            + json.dumps(
                child(
                    args.shapes,
                    args.child,
                    int(args.threads),
                    args.steps,
                    args.logits_loss,
                    args.keep_freed_memory,
                    args.dtype,
                )
            ),
            flush=True,
        )
        return
    if args.keep_freed_memory and not args.isolated:
        ap.error("--keep-freed-memory needs --isolated (a process setting: every model gets its own process)")
    if args.bound and not args.isolated:
        ap.error("--bound needs --isolated (it patches the model classes of the process it runs in)")
    all_rows = []
    for t in [int(x) for x in args.threads.split(",")]:
        torch.set_num_threads(t)
        print(header(t, bf16=args.dtype == "bf16") + f"; models in {args.dtype}", flush=True)
        for shape in args.shapes.split(","):
            rows = run(
                shape,
                t,
                args.rounds,
                args.compile,
                args.logits_loss,
                args.steps if args.isolated else 0,
                args.keep_freed_memory,
                args.bound,
                args.dtype,
            )
            all_rows += rows
            print(
                f"\n{shape} ({SHAPES[shape]}), {t} thread(s), "
                f"{'each model alone in its process, ' if args.isolated else ''}{args.dtype}, matmul peak in this "
                f"run "
                + ", ".join(f"{k} {v:.1f}" for k, v in rows[0]["peaks_gflops"].items())
                + f" GFLOP/s (MFU against {args.dtype}'s), flags {cpu_flags()}"
            )
            print(
                "| model | tokens/s | GFLOP/s | MFU | × nanoGPT (wall) | tokens per CPU-s | × nanoGPT (CPU time) |\n"
                "|---|---|---|---|---|---|---|"
            )
            for r in rows:
                print(
                    f"| {r['model']} | {r['tokens_per_s_wall']:.0f} | {r['gflops_wall']:.1f} | {r['mfu']:.0%} | "
                    f"{r['ratio_wall']:.3f} | {r['tokens_per_s_cpu']:.0f} | {r['ratio_cpu']:.3f} |",
                    flush=True,
                )
            print(f"(load average at the end: {load_average()})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"flags": cpu_flags(), "rows": all_rows}, f, indent=1)


if __name__ == "__main__":
    main()
