"""Training-time probe overhead and the data loader's share of a step, on `small` shapes.

    .venv/bin/python benchmarks/probe_overhead.py --data /tmp/probe_data --steps 60 --every 20 [--seq-len 128]

Runs the real Trainer twice per repeat (probes off, probes on every k steps; alternating, so both see
the same machine load) and reports:

- measured overhead   (T_on - T_off) / T_off, T = wall time from on_train_start to the end of
                      on_train_end (the whole loop: steps, the final eval and checkpoint, the probes);
                      the minimum over repeats of each T is used
- model overhead      c_probe / (k · c_step) for several k, with c_probe the median seconds of one probe
                      (``seconds`` in probes.jsonl, forward + weights) and c_step the median step time of the
                      probes-off run (from metrics.jsonl, log_every=1). Robust to load spikes on a shared
                      machine, where the measured figure is noisy.
- CPU overhead        the same ratio with process CPU time (time.process_time): with --threads 1 it is
                      hardly affected by other processes competing for the cores
- loader share        median seconds of ``BatchLoader.get`` per step / median step time (timed in place)

Prints a table and writes the numbers as JSON (--out).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch


class _Clock:
    """First callback: t0 at on_train_start. Last callback: t1 after on_train_end; times loader.get."""

    def __init__(self, last: bool):
        self.last = last
        self.t0 = self.t1 = self.c0 = self.c1 = None
        self.loader_s: list[float] = []

    def on_train_start(self, trainer):
        if not self.last:
            self.t0, self.c0 = time.perf_counter(), time.process_time()
            return
        loader = trainer.loader
        get = loader.get

        def timed(*a, **k):
            t = time.perf_counter()
            out = get(*a, **k)
            self.loader_s.append(time.perf_counter() - t)
            return out

        loader.get = timed

    def on_train_end(self, trainer):
        if self.last:
            self.t1, self.c1 = time.perf_counter(), time.process_time()


def run_once(args, every: int, root: Path, tag: str) -> dict:
    from smallinit.probes import TrainingProbe
    from smallinit.train import load_config
    from smallinit.train.loop import Trainer

    over = [
        f"data.path={args.data}",
        f"data.seq_len={args.seq_len}",
        f"train.batch_size={args.batch_size}",
        f"train.max_steps={args.steps}",
        "train.log_every=1",
        f"train.eval_every={10 * args.steps}",
        f"train.ckpt_every={10 * args.steps}",
        "train.progress=false",
        f"train.threads={args.threads}",
        "data.val_batches=2",
        f"probe.every={every}",
    ]
    cfg = load_config("small", over)
    first, last = _Clock(False), _Clock(True)
    cbs = [first]
    probe = None
    if every:
        probe = TrainingProbe(cfg.probe)
        cbs.append(probe)
    cbs.append(last)
    run_dir = root / tag
    Trainer(cfg, run_dir, callbacks=cbs).run()
    tok = args.batch_size * args.seq_len
    steps = [tok / json.loads(l)["tokens_per_s"] for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
    probes = [json.loads(l) for l in (run_dir / "probes.jsonl").read_text().splitlines()] if every else []
    return {
        "every": every,
        "total_s": last.t1 - first.t0,
        "cpu_s": last.c1 - first.c0,
        "step_s": steps,
        "step_median_s": statistics.median(steps),
        "loader_median_s": statistics.median(last.loader_s),
        "probe_s": [p["seconds"] for p in probes],
        "probe_steps": [p["step"] for p in probes],
        "probe_total_s": probe.seconds if probe else 0.0,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="prepared data directory")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--every", type=int, default=20, help="probe interval of the measured probes-on run")
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--out", help="JSON file for the numbers")
    args = ap.parse_args(argv)

    results = {"off": [], "on": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            results["off"].append(run_once(args, 0, Path(tmp), f"off{r}"))
            results["on"].append(run_once(args, args.every, Path(tmp), f"on{r}"))
    t_off = min(x["total_s"] for x in results["off"])
    t_on = min(x["total_s"] for x in results["on"])
    cpu_off = min(x["cpu_s"] for x in results["off"])
    cpu_on = min(x["cpu_s"] for x in results["on"])
    c_step = statistics.median(s for x in results["off"] for s in x["step_s"])
    c_probe = statistics.median(s for x in results["on"] for s in x["probe_s"])
    loader = statistics.median(x["loader_median_s"] for x in results["off"])
    model = {k: c_probe / (k * c_step) for k in (10, 20, 25, 50, 100, 200)}
    summary = {
        "shape": {
            "preset": "small",
            "seq_len": args.seq_len,
            "batch_size": args.batch_size,
            "steps": args.steps,
            "threads": args.threads or torch.get_num_threads(),
        },
        "every": args.every,
        "total_off_s": t_off,
        "total_on_s": t_on,
        "measured_overhead": (t_on - t_off) / t_off,
        "cpu_off_s": cpu_off,
        "cpu_on_s": cpu_on,
        "cpu_overhead": (cpu_on - cpu_off) / cpu_off,
        "step_median_s": c_step,
        "probe_median_s": c_probe,
        "probe_over_step": c_probe / c_step,
        "model_overhead": model,
        "loader_median_s": loader,
        "loader_share": loader / c_step,
        "runs": results,
    }
    print(
        f"small shapes, seq {args.seq_len}, batch {args.batch_size}, {args.steps} steps, "
        f"{summary['shape']['threads']} threads, {args.repeats} repeat(s)"
    )
    print(f"  step (median)          {c_step:8.3f} s")
    print(f"  one probe (median)     {c_probe:8.3f} s  = {c_probe / c_step:.2f} steps")
    print(f"  loader.get (median)    {loader * 1e3:8.2f} ms = {100 * loader / c_step:.2f}% of a step")
    print(
        f"  loop time off / on     {t_off:8.1f} s / {t_on:.1f} s (every {args.every}): "
        f"measured overhead {100 * summary['measured_overhead']:+.1f}%"
    )
    print(
        f"  CPU time off / on      {cpu_off:8.1f} s / {cpu_on:.1f} s: "
        f"CPU overhead {100 * summary['cpu_overhead']:+.1f}% "
        "(robust to other processes' load when --threads 1)"
    )
    print("  model overhead c_probe/(k·c_step): " + ", ".join(f"k={k}: {100 * v:.1f}%" for k, v in model.items()))
    if args.out:
        Path(args.out).write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
