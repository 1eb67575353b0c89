"""Does AdamW's ε damp small-init updates as width grows? (issue 18, point 6; DESIGN.md §2 "Optimizer ε")

AdamW's update is m̂ / (√v̂ + ε), v̂ = exp_avg_sq / (1 − β2^t). Per weight matrix we measure, from the optimizer
state (``smallinit.probes.optimizer_eps_probes``): the share of entries with √v̂ < ε and the mean damping
ε / (√v̂ + ε) (the share of the update ε removes), plus the median √v̂. After one step √v̂ = |g| exactly, so
step 1 is the gradient at initialization (after the trainer's clipping to norm 1).

Two parts:

``width``        γ ∈ {1, 0.5} × norm ε ∈ {1e-12, 1e-5} × d ∈ {128, 256, 512, 1024}: our Transformer (``tiny``
                 size: elementwise gate, tied embeddings; --layers blocks, 64-dim heads, d_ff ≈ 8d/3), one step
                 (the gradient at init) — and for --train-widths × --train-norm-eps (default d 128 and 512 at
                 norm ε 1e-12) --steps steps — with the Trainer's recipe (AdamW β (0.9, 0.95), ε 1e-8, wd 0.1, clip 1.0,
                 warmup 30 then cosine, lr 3e-3, fp32) on a prepared corpus; the probe at steps 1, 2, 5, 10,
                 20, … Per matrix kind (mean over layers) and for the most affected block matrix. Then, per
                 matrix kind, a log-log fit of the median √v̂ at step 1 vs d; the width where the fitted median
                 reaches 9ε (its entry damped by 10%) and ε (damped by 50%) is an **extrapolation** of that fit.
``sensitivity``  the real Trainer (``cpu`` preset's d512 shape: 2 layers, 8 heads, d_ff 1408, seq 128, batch 8,
                 BOS, warmup 30, lr 3e-3, 240 steps) for arms ``gamma:eps`` (default 1:1e-8, 1:1e-16, 0.5:1e-8),
                 same seed (same batches), probes every 40 steps: final train/val loss, the largest per-step
                 train-loss difference between the two γ = 1 arms, and the probe's damping over training.

    .venv/bin/python benchmarks/optimizer_eps.py width --steps 20 --out /tmp/opt_eps_width.json
    .venv/bin/python benchmarks/optimizer_eps.py sensitivity --d 512 --steps 240 --out /tmp/opt_eps_sens.json

--data DIR uses a prepared corpus (``smallinit prepare``); without it the built-in stdlib corpus is prepared
(BPE 4096, 6 MB) into a temporary folder this script creates. Prints markdown tables; --out writes JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from smallinit.probes import TrainingProbe, matrix_kind, optimizer_eps_probes

EPS = 1e-8
RECORD_STEPS = (1, 2, 5, 10, 20, 30, 50)


def cpu_flags() -> str:
    try:
        flags = next(l for l in Path("/proc/cpuinfo").read_text().splitlines() if l.startswith("flags")).split()
        return " ".join(f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags)
    except (OSError, StopIteration):
        return platform.processor()


def prepare_data(path: str | None) -> Path:
    if path:
        return Path(path)
    from smallinit.data import prepare_corpus

    out = Path(tempfile.mkdtemp(prefix="opt_eps_data_")) / "stdlib"
    prepare_corpus(
        ["builtin:stdlib"],
        out,
        tokenizer="bpe",
        vocab_size=4096,
        val_fraction=0.02,
        progress=False,
        max_bytes=6_000_000,
        num_workers=1,
    )
    return out


def by_kind(rec: dict) -> dict[str, dict[str, float]]:
    """Per matrix kind: mean over layers of damping / frac_below, geometric mean of the median √v̂."""
    groups: dict[str, list[dict]] = {}
    for name, m in rec["matrices"].items():
        groups.setdefault(matrix_kind(name), []).append(m)
    return {
        k: {
            "damping": float(np.mean([m["damping"] for m in ms])),
            "frac_below": float(np.mean([m["frac_below"] for m in ms])),
            "median_sqrt_v": float(np.exp(np.mean([math.log(max(m["median_sqrt_v"], 1e-300)) for m in ms]))),
        }
        for k, ms in groups.items()
    }


def most_affected(rec: dict) -> tuple[str, dict]:
    """The block matrix (embedding excluded: its zero-gradient rows are not ε's doing) with the largest damping."""
    blocks = {n: m for n, m in rec["matrices"].items() if n.startswith("blocks.")}
    name = max(blocks, key=lambda n: blocks[n]["damping"])
    return name, blocks[name]


# ---- width part ----------------------------------------------------------------------------------


def width_run(
    data_dir: Path,
    d: int,
    gamma: float,
    norm_eps: float,
    steps: int,
    layers: int,
    batch: int,
    seq_len: int,
    seed: int,
    lr: float,
) -> dict:
    from smallinit.config import OptimConfig, load_config
    from smallinit.data import BatchLoader, TokenData
    from smallinit.model import Transformer
    from smallinit.train.loop import param_groups
    from smallinit.train.schedule import lr_at

    data = TokenData(data_dir)
    cfg = load_config(
        "tiny",
        [
            f"model.d_model={d}",
            f"model.n_layers={layers}",
            f"model.n_heads={max(1, d // 64)}",
            f"model.d_ff={64 * math.ceil(8 * d / 3 / 64)}",
            f"model.gamma={gamma}",
            f"model.norm_eps={norm_eps}",
            f"model.max_seq_len={seq_len + 1}",
            f"data.seq_len={seq_len}",
        ],
    )
    mc = cfg.model
    mc.vocab_size = data.vocab_size
    ocfg = OptimConfig(lr=lr, warmup_steps=30, eps=EPS)
    torch.manual_seed(seed)
    model = Transformer(mc)
    opt = torch.optim.AdamW(
        param_groups(model, ocfg.weight_decay, ocfg.decay_embeddings),
        lr=lr,
        betas=tuple(ocfg.betas),
        eps=ocfg.eps,
        fused=True,
    )
    loader = BatchLoader(data.train, seq_len, batch, seed, bos_id=data.bos_id)
    out = {"d": d, "gamma": gamma, "norm_eps": norm_eps, "d_ff": mc.d_ff, "steps": {}, "loss": [], "grad_norm": []}
    t0 = time.perf_counter()
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, ocfg)
        x, y = loader.get(step, 0, batch)
        loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
        loss.backward()
        gn = float(torch.nn.utils.clip_grad_norm_(model.parameters(), ocfg.grad_clip))
        opt.step()
        opt.zero_grad(set_to_none=True)
        out["loss"].append(loss.item())
        out["grad_norm"].append(gn)
        if step + 1 in RECORD_STEPS or step + 1 == steps:
            rec = optimizer_eps_probes(model, opt)
            name, worst = most_affected(rec)
            out["steps"][step + 1] = {"kinds": by_kind(rec), "worst": {"name": name, **worst}}
    out["seconds"] = time.perf_counter() - t0
    return out


def fit_slope(ds: list[int], ys: list[float]) -> tuple[float, float]:
    """Least squares log y = a + b log d; returns (b, a)."""
    b, a = np.polyfit(np.log(ds), np.log(ys), 1)
    return float(b), float(a)


def width_where(a: float, b: float, target: float) -> float | None:
    """d with exp(a) d^b = target (None when the fit does not fall)."""
    if b >= 0:
        return None
    return float(math.exp((math.log(target) - a) / b))


def width_text(d: float | None) -> str:
    """A :func:`width_where` result for the table."""
    return "never (not falling)" if d is None else f"{d:.3g}"


def run_width(args) -> dict:
    data_dir = prepare_data(args.data)
    results = []
    for norm_eps in args.norm_eps:
        for gamma in args.gammas:
            for d in args.widths:
                trained = d in args.train_widths and norm_eps in args.train_norm_eps
                r = width_run(
                    data_dir,
                    d,
                    gamma,
                    norm_eps,
                    args.steps if trained else 1,
                    args.layers,
                    args.batch,
                    args.seq_len,
                    args.seed,
                    args.lr,
                )
                results.append(r)
                s1 = r["steps"][1]
                print(
                    f"# d={d} γ={gamma} norm ε={norm_eps:g}: {r['seconds']:.0f}s, step-1 grad norm "
                    f"{r['grad_norm'][0]:.3g}, worst {s1['worst']['name']} damping {s1['worst']['damping']:.3g}",
                    flush=True,
                )
    print_width(results, args)
    return {"part": "width", "args": vars(args), "results": results}


def print_width(results: list[dict], args) -> None:
    kinds = ["attn.q", "attn.k", "attn.v", "attn.gate", "attn.o", "mlp.gate", "mlp.up", "mlp.down", "tok_emb"]
    print(
        f"\nPer matrix kind, mean damping ε/(√v̂+ε) over layers [share with √v̂ < ε] at step 1 (= first gradient) "
        f"and after the last trained step; ε = {EPS:g}"
    )
    for norm_eps in args.norm_eps:
        print(f"\nnorm ε = {norm_eps:g}\n")
        print("| γ | d | step | " + " | ".join(kinds) + " | most affected block matrix |")
        print("|---|---|---|" + "---|" * (len(kinds) + 1))
        for r in results:
            if r["norm_eps"] != norm_eps:
                continue
            for s in sorted(set(r["steps"]) & {1, 5, max(r["steps"])}):
                st = r["steps"][s]
                cells = [
                    f"{st['kinds'][k]['damping']:.2g} [{st['kinds'][k]['frac_below']:.2g}]" if k in st["kinds"] else "–"
                    for k in kinds
                ]
                w = st["worst"]
                print(
                    f"| {r['gamma']:g} | {r['d']} | {s} | "
                    + " | ".join(cells)
                    + f" | {w['name']}: {w['damping']:.2g} [{w['frac_below']:.2g}] |"
                )
    print(
        "\nMedian √v̂ at step 1 (geometric mean over layers) vs d; log-log slope; extrapolated width where the "
        "fitted median reaches 9ε (median entry damped 10%) and ε (50%)"
    )
    for norm_eps in args.norm_eps:
        for gamma in args.gammas:
            rs = sorted((r for r in results if r["norm_eps"] == norm_eps and r["gamma"] == gamma), key=lambda r: r["d"])
            ds = [r["d"] for r in rs]
            print(f"\nnorm ε = {norm_eps:g}, γ = {gamma:g}\n")
            print("| kind | " + " | ".join(f"d {d}" for d in ds) + " | slope | d at 10% | d at 50% |")
            print("|---|" + "---|" * (len(ds) + 3))
            for k in kinds:
                ys = [r["steps"][1]["kinds"][k]["median_sqrt_v"] for r in rs if k in r["steps"][1]["kinds"]]
                if len(ys) != len(ds) or min(ys) <= 0:
                    continue
                b, a = fit_slope(ds, ys)
                d10, d50 = width_where(a, b, 9 * EPS), width_where(a, b, EPS)
                cells = f" | {b:.2f} | {width_text(d10)} | {width_text(d50)} |"
                print(f"| {k} | " + " | ".join(f"{y:.2g}" for y in ys) + cells)


# ---- sensitivity part ----------------------------------------------------------------------------


def run_sensitivity(args) -> dict:
    from smallinit.config import load_config
    from smallinit.train.loop import Trainer

    data_dir = prepare_data(args.data)
    root = Path(args.runs) if args.runs else Path(tempfile.mkdtemp(prefix="opt_eps_runs_"))
    heads = max(1, args.d // 64)
    d_ff = {128: 384, 256: 704, 512: 1408}.get(args.d, 64 * math.ceil(11 * args.d / 4 / 64))
    arms = []
    for arm in args.arms:
        gamma, eps = (float(x) for x in arm.split(":"))
        name = f"d{args.d}_g{gamma:g}_eps{eps:g}"
        over = [
            f"data.path={data_dir}",
            "data.seq_len=128",
            "data.val_batches=8",
            "data.bos=true",
            "model.max_seq_len=128",
            f"model.d_model={args.d}",
            f"model.n_layers={args.layers}",
            f"model.n_heads={heads}",
            f"model.d_ff={d_ff}",
            f"model.gamma={gamma}",
            f"model.norm_eps={args.norm_eps}",
            f"optim.eps={eps}",
            f"optim.lr={args.lr}",
            "optim.warmup_steps=30",
            f"train.max_steps={args.steps}",
            "train.batch_size=8",
            "train.log_every=1",
            f"train.eval_every={args.steps // 2}",
            f"train.ckpt_every={args.steps}",
            "train.keep_ckpts=1",
            "train.progress=false",
            f"train.seed={args.seed}",
            f"train.threads={args.threads}",
            f"probe.every={args.probe_every}",
            "probe.heatmaps=[]",
        ]
        cfg = load_config("tiny", over)
        t0 = time.perf_counter()
        Trainer(cfg, root / name, callbacks=[TrainingProbe(cfg.probe)]).run()
        secs = time.perf_counter() - t0
        metrics = [json.loads(l) for l in (root / name / "metrics.jsonl").read_text().splitlines()]
        probes = [json.loads(l) for l in (root / name / "probes.jsonl").read_text().splitlines()]
        losses = [m["loss"] for m in metrics if "loss" in m]
        vals = [(m["step"], m["val_loss"]) for m in metrics if "val_loss" in m]
        traj = []
        for p in probes:
            oe = p.get("optim_eps") or {}
            if oe.get("matrices"):
                w_name, w = most_affected(oe)
                kinds = by_kind(oe)
                traj.append(
                    {
                        "step": p["step"],
                        "worst": w_name,
                        "worst_damping": w["damping"],
                        "worst_frac_below": w["frac_below"],
                        "block_mean_damping": float(
                            np.mean([v["damping"] for k, v in kinds.items() if k != "tok_emb"])
                        ),
                        "kinds": kinds,
                    }
                )
        arms.append(
            {
                "name": name,
                "gamma": gamma,
                "eps": eps,
                "seconds": secs,
                "losses": losses,
                "val": vals,
                "final_loss": losses[-1],
                "final_val": vals[-1][1],
                "finite": all(map(math.isfinite, losses)),
                "trajectory": traj,
            }
        )
        print(f"# {name}: {secs:.0f}s, final loss {losses[-1]:.4f}, val {vals[-1][1]:.4f}", flush=True)
    print(
        f"\nd = {args.d}, {args.layers} layers, norm ε {args.norm_eps:g}, {args.steps} steps of 8×128 tokens, "
        f"seed {args.seed}\n"
    )
    print("| arm | final train loss | final val loss | all losses finite | s |")
    print("|---|---|---|---|---|")
    for a in arms:
        print(
            f"| γ={a['gamma']:g}, optim ε={a['eps']:g} | {a['final_loss']:.4f} | {a['final_val']:.4f} | "
            f"{a['finite']} | {a['seconds']:.0f} |"
        )
    g1 = [a for a in arms if a["gamma"] == 1.0]
    if len(g1) >= 2:
        a, b = g1[0], g1[1]
        diff = [x - y for x, y in zip(a["losses"], b["losses"])]
        print(
            f"\n{a['name']} − {b['name']}: final val {a['final_val'] - b['final_val']:+.4f}, final train "
            f"{diff[-1]:+.4f}, largest per-step |Δ train loss| {max(map(abs, diff)):.4f} "
            f"(step {int(np.argmax(np.abs(diff))) + 1}), mean Δ over the last 40 steps {np.mean(diff[-40:]):+.4f}"
        )
    print("\nProbe over training: mean damping of the block matrices (mean over kinds) / most affected block matrix")
    print("\n| arm | " + " | ".join(f"step {t['step']}" for t in arms[0]["trajectory"]) + " |")
    print("|---|" + "---|" * len(arms[0]["trajectory"]))
    for a in arms:
        print(
            f"| {a['name']} | "
            + " | ".join(
                f"{t['block_mean_damping']:.2g} / {t['worst_damping']:.2g} ({t['worst'].split('.', 2)[-1]})"
                for t in a["trajectory"]
            )
            + " |"
        )
    return {"part": "sensitivity", "args": vars(args), "arms": arms, "runs": str(root)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="part", required=True)
    w = sub.add_parser("width")
    w.add_argument("--widths", type=int, nargs="+", default=[128, 256, 512, 1024])
    w.add_argument("--gammas", type=float, nargs="+", default=[1.0, 0.5])
    w.add_argument("--norm-eps", type=float, nargs="+", default=[1e-12, 1e-5])
    w.add_argument("--steps", type=int, default=20)
    w.add_argument(
        "--train-widths",
        type=int,
        nargs="+",
        default=[128, 512],
        help="widths trained for --steps steps (the others: step 1 only, the gradient at init)",
    )
    w.add_argument(
        "--train-norm-eps",
        type=float,
        nargs="+",
        default=[1e-12],
        help="norm ε values trained for --steps steps (the others: step 1 only)",
    )
    w.add_argument("--layers", type=int, default=2)
    w.add_argument("--batch", type=int, default=8)
    w.add_argument("--seq-len", type=int, default=128)
    w.add_argument("--lr", type=float, default=3e-3)
    s = sub.add_parser("sensitivity")
    s.add_argument("--d", type=int, default=512)
    s.add_argument("--layers", type=int, default=2)
    s.add_argument("--steps", type=int, default=240)
    s.add_argument("--arms", nargs="+", default=["1:1e-8", "1:1e-16", "0.5:1e-8"], help="gamma:optim_eps")
    s.add_argument("--norm-eps", type=float, default=1e-12)
    s.add_argument("--lr", type=float, default=3e-3)
    s.add_argument("--probe-every", type=int, default=40)
    s.add_argument("--runs", help="folder for the run directories (default: a new temporary folder)")
    for p in (w, s):
        p.add_argument("--data", help="a prepared corpus folder (default: prepare the built-in stdlib corpus)")
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--threads", type=int, default=2)
        p.add_argument("--out", help="write the results as JSON here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"# torch {torch.__version__}, {torch.get_num_threads()} threads, CPU flags: {cpu_flags()}", flush=True)
    res = run_width(args) if args.part == "width" else run_sensitivity(args)
    if args.out:
        from smallinit.core.io import atomic_write_json

        atomic_write_json(Path(args.out), res)


if __name__ == "__main__":
    main()
