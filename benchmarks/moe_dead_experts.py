"""Dead experts during a short `small-moe` run, and why: routing statistics on a fixed validation batch.

Trains `small-moe` (seq 128, batch 8, one thread) on a prepared corpus and, every --every steps, runs a fixed
batch of validation tokens (32 × 128 = 4,096 by default) in eval mode and prints one JSON line:

    dead       (layer, expert) slots that received no token of the batch (of n_layers · n_experts)
    max_frac   largest share of the assignments any expert got (1/top_k = every token picks it)
    entropy    mean router entropy (ln E = uniform)
    mean_cos   per MoE layer, ‖mean_t x̂_t‖² with x̂_t the router input of token t scaled to unit length —
               the mean pairwise cosine between tokens: near 1 when the tokens' hidden states are condensed
               onto one direction, so that no router can tell them apart

    python benchmarks/moe_dead_experts.py --data data/stdlib --steps 200 [--name base] [model.key=value ...]
    python benchmarks/moe_dead_experts.py --data data/stdlib --steps 60 \\
        'model.init_overrides={"*.mlp.router.weight": 0.5}'
"""

from __future__ import annotations

import argparse
import json
import tempfile

import torch
import torch.nn.functional as F

from smallinit.config import load_config
from smallinit.data.tokens import TokenData
from smallinit.model.moe import MoE, moe_stats
from smallinit.train.loop import train


class RoutingProbe:
    """A Trainer callback printing the routing statistics of a fixed batch every ``every`` steps."""

    def __init__(self, batch: torch.Tensor, every: int, name: str):
        self.batch, self.every, self.name = batch, every, name
        self.rows: list[dict] = []

    def on_step_end(self, trainer, step: int, record: dict) -> None:
        if step % self.every:
            return
        model = trainer.model
        cos: list[float] = []

        def mean_cos(module, args):
            x = F.normalize(args[0].reshape(-1, args[0].shape[-1]).float(), dim=-1)
            cos.append(round(float(x.mean(0).square().sum()), 3))

        hooks = [m.register_forward_pre_hook(mean_cos) for m in model.modules() if isinstance(m, MoE)]
        model.eval()
        try:
            with torch.no_grad():
                model(self.batch)
        finally:
            model.train()
            for h in hooks:
                h.remove()
        s = moe_stats(model)
        row = {
            "run": self.name,
            "step": step,
            "loss": round(record.get("loss", float("nan")), 3),
            "dead": s["dead_experts"],
            "slots": sum(len(v["expert_fraction"]) for v in s["layers"].values()),
            "max_frac": round(s["max_expert_fraction"], 3),
            "entropy": round(s["router_entropy"], 3),
            "mean_cos": cos,
        }
        self.rows.append(row)
        print(json.dumps(row), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="a directory made by `smallinit prepare`")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--every", type=int, default=20)
    ap.add_argument("--probe-seqs", type=int, default=32, help="validation sequences of 128 tokens in the probe batch")
    ap.add_argument("--name", default="small-moe")
    ap.add_argument("--out", help="run directory (default: a temporary one)")
    ap.add_argument("overrides", nargs="*", help="config overrides, section.key=value")
    args = ap.parse_args()
    torch.set_num_threads(1)
    ov = {
        "data.path": args.data,
        "data.seq_len": 128,
        "model.max_seq_len": 128,
        "train.max_steps": args.steps,
        "train.batch_size": 8,
        "train.log_every": 20,
        "train.eval_every": 10**9,
        "train.ckpt_every": 10**9,
        "train.threads": 1,
        "train.progress": False,
        "optim.warmup_steps": 30,
    }
    cfg = load_config("small-moe", [f"{k}={json.dumps(v)}" for k, v in ov.items()] + args.overrides)
    val = TokenData(args.data).val
    n = args.probe_seqs * 128
    if len(val) < n:
        raise SystemExit(f"moe_dead_experts: {args.data} has {len(val)} validation tokens, fewer than {n}")
    batch = torch.as_tensor(val[:n].astype("int64")).view(args.probe_seqs, 128)
    probe = RoutingProbe(batch, args.every, args.name)
    with tempfile.TemporaryDirectory() as tmp:
        train(cfg, args.out or tmp, callbacks=[probe])
    print("\n| step | loss | dead slots | max share | router entropy | mean cos (layers) |\n|---|---|---|---|---|---|")
    for r in probe.rows:
        print(
            f"| {r['step']} | {r['loss']} | {r['dead']}/{r['slots']} | {r['max_frac']} | {r['entropy']} | "
            f"{', '.join(f'{c:.2f}' for c in r['mean_cos'])} |"
        )


if __name__ == "__main__":
    main()
