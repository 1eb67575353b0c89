"""What torch.compile buys on this CPU: steady-state speed-up and the cold and cached compile times.

For each shape (bench_common.SHAPES) and mode ("default", "max-autotune-no-cudagraphs") two fresh processes run
one after the other with the same, initially empty, TORCHINDUCTOR_CACHE_DIR: the first compiles cold, the second
finds the inductor/AOT-autograd caches filled (what a second run of a sweep sees when the runs share a cache
folder, as `train.compile` does by default). Each process: compile time = wall time of the first compiled
training step (forward + backward compile + one step) minus one eager step; then eager and compiled steps are
timed alternately (median) for the steady-state speed-up. Gate elementwise (every model size's default), fp32.

    python benchmarks/compile_bench.py [--shapes d384,d128] [--modes default,max-autotune-no-cudagraphs]
        [--threads 2] [--rounds 7] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def child(shape: str, mode: str, threads: int, rounds: int) -> dict:
    import torch
    from bench_common import SHAPES, Transformer, make_step, ours_config, time_alternating

    torch.set_num_threads(threads)
    _, _, _, _, T, B, V = SHAPES[shape]
    torch.manual_seed(0)
    model = Transformer(ours_config(shape, "elementwise"))
    loss_fn = lambda f, x, y: f(x, targets=y)  # noqa: E731
    eager = make_step(model, V, T, B, loss_fn=loss_fn)
    eager()
    t = time.perf_counter()
    eager()
    t_eager = time.perf_counter() - t
    kw = {} if mode == "default" else {"mode": mode}
    compiled = make_step(model, V, T, B, forward=torch.compile(model, **kw), loss_fn=loss_fn)
    t = time.perf_counter()
    compiled()
    first = time.perf_counter() - t
    secs = time_alternating({"eager": eager, "compiled": compiled}, rounds, warmup=2)
    return {
        "shape": shape,
        "mode": mode,
        "threads": threads,
        "compile_s": first - t_eager,
        "eager_s": secs["eager"]["wall"],
        "compiled_s": secs["compiled"]["wall"],
        "speedup": secs["eager"]["wall"] / secs["compiled"]["wall"],
        "speedup_cpu": secs["eager"]["cpu"] / secs["compiled"]["cpu"],
        "tokens": B * T,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="d384,d128")
    ap.add_argument("--modes", default="default,max-autotune-no-cudagraphs")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--json")
    ap.add_argument("--child", nargs=2, metavar=("SHAPE", "MODE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print("RESULT " + json.dumps(child(args.child[0], args.child[1], args.threads, args.rounds)), flush=True)
        return
    from bench_common import header

    print(header(args.threads), flush=True)
    rows = []
    for shape in args.shapes.split(","):
        for mode in args.modes.split(","):
            with tempfile.TemporaryDirectory(prefix="inductor-cache-") as cache:
                env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}
                for run in ("cold", "cached"):
                    out = subprocess.run(
                        [
                            sys.executable,
                            __file__,
                            "--child",
                            shape,
                            mode,
                            "--threads",
                            str(args.threads),
                            "--rounds",
                            str(args.rounds),
                        ],
                        env=env,
                        capture_output=True,
                        text=True,
                        cwd=os.path.dirname(__file__),
                    )
                    res = [json.loads(line[7:]) for line in out.stdout.splitlines() if line.startswith("RESULT ")]
                    if not res:
                        print(f"{shape} {mode} {run}: failed\n{out.stderr[-2000:]}", flush=True)
                        continue
                    r = {**res[0], "cache": run}
                    rows.append(r)
                    print(
                        f"{shape} {mode:27s} {run:6s} compile {r['compile_s']:6.1f} s  eager "
                        f"{r['tokens'] / r['eager_s']:6.0f} tok/s  compiled {r['tokens'] / r['compiled_s']:6.0f} "
                        f"tok/s  speed-up ×{r['speedup']:.3f} (CPU time ×{r['speedup_cpu']:.3f})",
                        flush=True,
                    )
    print("\n| shape | mode | cache | compile s | eager tok/s | compiled tok/s | speed-up |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['shape']} | {r['mode']} | {r['cache']} | {r['compile_s']:.1f} | {r['tokens'] / r['eager_s']:.0f} | "
            f"{r['tokens'] / r['compiled_s']:.0f} | ×{r['speedup']:.3f} |"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
