"""Does a training step slow down as the model trains, because of float32 subnormals, and does flushing them help?

Trains the reproduction's crossover shape (d 128 × 4 layers, T 256, B 16, byte-level vocabulary, fp32, one thread)
on the bytes of ``--text`` files (default: the standard library's source) for ``--steps`` steps, for each arm:

  * ``paper``: γ = 1, ε = 1e-12, elementwise gate (the small-init arm),
  * ``baseline``: γ = 0.5, ε = 1e-5, no gate.

Training itself runs with denormals flushed (as the Trainer now does, `smallinit.train.host.flush_denormals`;
``--train-kept``: kept, as before). Every ``--every`` steps the next steps are timed in turn with IEEE subnormals
kept (``torch.set_flush_denormal(False)``) and flushed, ``--pairs`` times each (two steps per timing, the minimum
reported). Where the time goes is `torch.profiler`'s to say (RESULTS.md, 2026-12-01: the flash-attention backward).
On Intel CPUs subnormal arithmetic takes a microcode assist; the AMD EPYC of earlier sessions ran the benchmarks'
subnormal-heavy nanoGPT head (PyTorch's default N(0, 1) embedding init) at full speed.

    python benchmarks/denormals.py [--steps 600] [--every 100] [--pairs 2] [--arms paper,baseline] [--train-kept]
        [--text FILE ...]   (e.g. ../shared/data/gutenberg-nltk-tok/*.txt ../shared/data/tinyshakespeare/*)
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch
from bench_common import SHAPES, Transformer, header, ours_config

from smallinit.data.sources import stdlib_files

ARMS = {
    "paper": dict(gamma=1.0, norm_eps=1e-12, gate="elementwise"),
    "baseline": dict(gamma=0.5, norm_eps=1e-5, gate="none"),
}


def text_bytes(files: list | None = None, limit: int = 8 << 20) -> torch.Tensor:
    """The first ``limit`` bytes of ``files`` (default: the standard library's ``*.py`` files, sorted) as token ids
    0–255."""
    chunks, n = [], 0
    for f in files or stdlib_files():
        f = Path(f)
        b = f.read_bytes()
        chunks.append(b)
        n += len(b)
        if n >= limit:
            break
    return torch.from_numpy(np.frombuffer(b"".join(chunks)[:limit], dtype=np.uint8).astype(np.int64))


def train_arm(arm: str, data: torch.Tensor, steps: int, every: int, pairs: int, train_flush: bool = True) -> list[dict]:
    d, L, H, ff, T, B, V = SHAPES["d128b"]
    kw = dict(ARMS[arm])
    gate = kw.pop("gate")
    torch.manual_seed(0)
    model = Transformer(ours_config("d128b", gate, **kw))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1, fused=True)
    g = torch.Generator().manual_seed(0)

    def step() -> float:
        ix = torch.randint(0, len(data) - T - 1, (B,), generator=g)
        batch = torch.stack([data[i : i + T + 1] for i in ix])
        loss = model(batch[:, :-1], targets=batch[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    rows = []
    for s in range(1, steps + 1):
        torch.set_flush_denormal(train_flush)
        loss = step()
        if s % every == 0:
            ms: dict[bool, list[float]] = {False: [], True: []}
            for _ in range(pairs):
                for flush in (False, True):
                    torch.set_flush_denormal(flush)
                    t = time.perf_counter()
                    step()
                    step()
                    ms[flush].append((time.perf_counter() - t) / 2 * 1e3)
            rows.append({"arm": arm, "step": s, "loss": loss, "kept": min(ms[False]), "flushed": min(ms[True])})
            r = rows[-1]
            print(
                f"| {arm} | {s} | {loss:.3f} | {r['kept']:.0f} | {r['flushed']:.0f} | {r['kept'] / r['flushed']:.2f} |",
                flush=True,
            )
    torch.set_flush_denormal(False)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--every", type=int, default=100)
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--arms", default="paper,baseline")
    ap.add_argument("--train-kept", action="store_true", help="train (between timings) with subnormals kept")
    ap.add_argument("--text", nargs="+", help="text files to train on (default: the standard library's source)")
    args = ap.parse_args()
    torch.set_num_threads(1)  # the flush mode is per thread: one thread toggles it exactly
    print(header(1))
    data = text_bytes(args.text)
    print(
        f"{len(data):,} bytes of {'the standard library' if not args.text else f'{len(args.text)} file(s)'}; "
        f"training between timings with subnormals {'kept' if args.train_kept else 'flushed'}"
    )
    print(
        "| arm | step | loss | ms/step, subnormals kept | ms/step, flushed | kept ÷ flushed |\n"
        "|---|---|---|---|---|---|"
    )
    for arm in args.arms.split(","):
        train_arm(arm, data, args.steps, args.every, args.pairs, train_flush=not args.train_kept)


if __name__ == "__main__":
    main()
