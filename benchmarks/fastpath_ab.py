"""Whole training steps with and without the eager fast paths of ``smallinit.model.fused`` (SplitRope, the
hand-written RMSNorm backward), A/B in one process, beside nanoGPT.

"before" is the code these replaced, patched onto the model's instances at run time: attention's q/k/v/gate as
slices of the fused projection with the joint q/k ``Rope`` function (autograd builds a zero-filled full-size
gradient per slice and adds them), RMSNorm through ``F.rms_norm``'s composite ops. "after" is the model as shipped.
Each step closure is timed in turn (``time_alternating``), so load changes hit both alike; several rounds are
needed — a 5-round A/B could not tell a 3% change from noise here. ``--procs 2`` runs two copies at once, one
thread each: the reproduction's layout, where two processes share the memory bandwidth.

    python benchmarks/fastpath_ab.py [--shape d128b] [--threads 1] [--gate none] [--rounds 21] [--procs 1]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import types

import torch
import torch.nn.functional as F
from bench_common import SHAPES, Transformer, header, make_step, nanogpt, ours_config, time_alternating

from smallinit.model.attention import Attention
from smallinit.model.fused import Rope
from smallinit.model.norm import RMSNorm


def project_before(self, x, cos, sin):
    """Attention._project before SplitRope: slices of the fused projection, q and k rotated together."""
    B, T, _ = x.shape
    qkvg = self.w_qkvg(x)
    qk_dim = self.q_dim + self.kv_dim
    h = self.head_dim // 2
    qk = qkvg[..., :qk_dim].view(B, T, self.n_heads + self.n_kv_heads, self.head_dim)
    qk = Rope.apply(qk, cos[:, None, :h].to(qk.dtype), sin[:, None, :h].to(qk.dtype))
    q, k = qk[:, :, : self.n_heads].transpose(1, 2), qk[:, :, self.n_heads :].transpose(1, 2)
    v = qkvg[..., qk_dim : qk_dim + self.kv_dim].view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
    return q, k, v, qkvg[..., qk_dim + self.kv_dim :]


def norm_before(self, h):
    """RMSNorm.forward before the hand-written backward: autograd through F.rms_norm."""
    return F.rms_norm(h, (h.shape[-1],), self.weight, self.eps)


def as_before(model: Transformer) -> Transformer:
    for m in model.modules():
        if isinstance(m, Attention):
            m._project = types.MethodType(project_before, m)
        elif isinstance(m, RMSNorm):
            m.forward = types.MethodType(norm_before, m)
    return model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="d128b", choices=list(SHAPES))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--gate", default="none", choices=["none", "headwise", "elementwise"])
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--procs", type=int, default=1, help="run this many copies at once (one output block each)")
    args = ap.parse_args()
    if args.procs > 1:
        cmd = [
            sys.executable,
            __file__,
            "--shape",
            args.shape,
            "--threads",
            str(args.threads),
            "--gate",
            args.gate,
            "--rounds",
            str(args.rounds),
        ]
        procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) for _ in range(args.procs)]
        for i, p in enumerate(procs):
            out, _ = p.communicate()
            print(f"--- copy {i + 1} of {args.procs} (all running at once)\n{out}", end="", flush=True)
        sys.exit(max(p.returncode for p in procs))
    torch.set_num_threads(args.threads)
    print(header(args.threads))
    _, _, _, _, T, B, V = SHAPES[args.shape]
    torch.manual_seed(0)
    nano = nanogpt(args.shape)
    steps = {"nanoGPT": make_step(nano, V, T, B)}
    fpt = {"nanoGPT": nano.flops_per_token(T)}
    for name, prepare in (("before", as_before), ("after", lambda m: m)):
        torch.manual_seed(0)
        model = prepare(Transformer(ours_config(args.shape, args.gate)))
        steps[name] = make_step(model, V, T, B, loss_fn=lambda f, x, y: f(x, targets=y))
        fpt[name] = model.flops_per_token(T)
    secs = time_alternating(steps, args.rounds)
    print(
        f"| {args.shape} gate={args.gate}, {args.threads} thread(s), {args.rounds} rounds | ms per step (wall) | "
        f"ms (CPU) | GFLOP/s × nanoGPT (wall) |\n|---|---|---|---|"
    )
    for k, s in secs.items():
        ratio = (fpt[k] / s["wall"]) / (fpt["nanoGPT"] / secs["nanoGPT"]["wall"])
        print(f"| {k} | {s['wall'] * 1e3:.1f} | {s['cpu'] * 1e3:.1f} | {ratio:.3f} |")
    print(
        f"speed-up (step time before ÷ after): ×{secs['before']['wall'] / secs['after']['wall']:.3f} (wall), "
        f"×{secs['before']['cpu'] / secs['after']['cpu']:.3f} (CPU)",
        flush=True,
    )


if __name__ == "__main__":
    main()
