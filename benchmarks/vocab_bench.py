"""Which tokenizer gives the body of the reproduction's model most of the compute: training tokens/s of the
d 128 × 4-layer model (T 256, B 16, elementwise gate, tied head, fp32) with a byte-level vocabulary (~260), BPE
2048 and BPE 8192, timed alternately in one process, and the share of each token's FLOPs spent in the body vs
the LM head (6·V·d of 6N + 12·L·T·d).

Tokens are not the same unit across tokenizers: a BPE token covers several bytes. ``--corpus FILE`` measures
bytes per token of each tokenizer trained on that text (``tokenizers`` BPE / raw bytes), so throughput can also
be read in bytes of text per second.

    python benchmarks/vocab_bench.py [--vocabs 260,2048,8192] [--threads 1] [--rounds 7] [--corpus FILE]
"""

from __future__ import annotations

import argparse

import torch
from bench_common import SHAPES, Transformer, header, make_step, ours_config, time_alternating


def bytes_per_token(path: str, vocab: int, max_bytes: int = 3_000_000) -> float:
    text = open(path, encoding="utf-8", errors="replace").read()[:max_bytes]
    nbytes = len(text.encode("utf-8"))
    if vocab <= 260:
        return 1.0
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(
        [text[i : i + 100_000] for i in range(0, len(text), 100_000)],
        trainers.BpeTrainer(
            vocab_size=vocab, show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    n = sum(len(e.ids) for e in tok.encode_batch([text[i : i + 100_000] for i in range(0, len(text), 100_000)]))
    return nbytes / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocabs", default="260,2048,8192")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--corpus")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(header(args.threads), flush=True)
    _, _, _, _, T, B, _ = SHAPES["d128"]
    steps, cfgs = {}, {}
    for v in [int(x) for x in args.vocabs.split(",")]:
        torch.manual_seed(0)
        cfgs[v] = ours_config("d128", "elementwise", vocab=v)
        steps[v] = make_step(Transformer(cfgs[v]), v, T, B, loss_fn=lambda f, x, y: f(x, targets=y))
    secs = time_alternating(steps, args.rounds)
    bpt = {v: bytes_per_token(args.corpus, v) for v in steps} if args.corpus else {}
    print(
        "\n| vocab | tokens/s | tokens per CPU-s | FLOPs/token (M) | LM head share | body share |"
        + (" bytes/token | text bytes/s |" if bpt else "")
        + "\n|---|---|---|---|---|---|"
        + ("---|---|" if bpt else "")
    )
    for v, s in secs.items():
        c = cfgs[v]
        fpt = c.flops_per_token(T)
        head = 6.0 * c.vocab_size * c.d_model
        tps = B * T / s["wall"]
        row = (
            f"| {v} | {tps:.0f} | {B * T / s['cpu']:.0f} | {fpt / 1e6:.2f} | {head / fpt:.0%} | {1 - head / fpt:.0%} |"
        )
        if bpt:
            row += f" {bpt[v]:.2f} | {tps * bpt[v]:.0f} |"
        print(row, flush=True)


if __name__ == "__main__":
    main()
