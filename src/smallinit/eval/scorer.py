"""LMScorer: the three requests every benchmark is built from, for any causal LM.

Protocol of the wrapped model: a ``torch.nn.Module`` called as ``model(idx)`` with ``idx`` a
LongTensor [B, T] that returns logits [B, T, V] (a tuple's first element or an output's ``.logits``
are accepted too, so Hugging Face models work); the context length is ``model.config.max_seq_len``
(or ``max_position_embeddings``, or the ``max_length`` argument). The tokenizer is a Hugging Face
``tokenizers.Tokenizer``; text is encoded without special tokens, and ``<|endoftext|>`` (the
"eot" token) stands in for an empty context.

Requests (the same three as lm-evaluation-harness):

* ``loglikelihood([(context, continuation), ...]) -> [(logprob, is_greedy), ...]``:
  logprob = sum_i log p(c_i | context, c_<i) over the continuation's tokens c, and is_greedy = every
  c_i is the argmax of its distribution. Tokenization follows lm-evaluation-harness: trailing
  whitespace of the context is moved to the front of the continuation, then ``context +
  continuation`` is encoded as one string and split at the token length of the encoded context,
  so that the continuation's tokens are those a model sees in running text (a BPE merge across
  the boundary is attributed to the continuation). An empty context becomes ``[eot]``.
* ``loglikelihood_rolling([text, ...]) -> [logprob, ...]``: log p(text | eot), the total
  log-likelihood used for perplexity.
* ``generate_until([(context, {"until": [...], "max_gen_toks": N}), ...]) -> [text, ...]``:
  greedy decoding until the eot token, a stop string (the text is cut before it) or N new tokens.

Windows and truncation. A sequence that does not fit in L = max_seq_len tokens is left-truncated:
the prediction of the target tokens ``S[a:b]`` uses the L tokens before ``S[b-1]`` (inclusive).
A continuation longer than L is scored in disjoint chunks of L targets, each chunk conditioned on
the L tokens before its end, as lm-evaluation-harness's rolling windows do. Generation slides a
window of the last L tokens.

Batching. Requests are sorted by length (longest first, so that an out-of-memory error shows at
once), right-padded and run in batches of ``batch_size``; since the model is causal, right padding
never changes the logits at real positions. Generation runs a batch of prompts together and
re-runs the whole window at each step (the protocol has no KV cache), reading each row's logits at
its own last position; finished rows leave the batch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from smallinit.core.errors import ConfigError

EOT = "<|endoftext|>"


@dataclass
class _Window:
    req: int  # index of the request the window belongs to
    tokens: list[int]  # model input, len <= L
    targets: list[int]  # next tokens of the last len(targets) input positions


def _logits(out: Any) -> torch.Tensor:
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (tuple, list)):
        return out[0]
    if hasattr(out, "logits"):
        return out.logits
    raise TypeError(f"model returned {type(out).__name__}, expected logits [B, T, V]")


def _context_length(model: torch.nn.Module) -> int | None:
    cfg = getattr(model, "config", None)
    for name in ("max_seq_len", "max_position_embeddings", "n_positions"):
        v = getattr(cfg, name, None)
        if isinstance(v, int) and v > 0:
            return v
    return None


class LMScorer:
    """Log-likelihood and greedy-generation requests over a causal LM (see module docstring).

    Args:
        model: ``model(idx[B, T]) -> logits[B, T, V]``; moved to ``device`` and put in eval mode.
        tokenizer: a ``tokenizers.Tokenizer``.
        batch_size: sequences per forward pass.
        device: torch device for the inputs (and the model).
        max_length: context length L; default ``model.config.max_seq_len``.
        eot_id: id of the end-of-text token; default ``tokenizer.token_to_id("<|endoftext|>")``.
        max_gen_toks: default limit of new tokens for ``generate_until``.
        progress: show a tqdm bar per call (``progress_desc`` labels it).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Any,
        batch_size: int = 16,
        device: str | torch.device = "cpu",
        max_length: int | None = None,
        eot_id: int | None = None,
        max_gen_toks: int = 256,
        progress: bool = False,
    ):
        if batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
        self.device = torch.device(device)
        self.model = model.to(self.device).eval()
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.max_length = max_length or _context_length(model)
        if not self.max_length or self.max_length < 2:
            raise ConfigError(
                "cannot tell the model's context length: pass max_length (model.config.max_seq_len missing)"
            )
        self.eot_id = eot_id if eot_id is not None else tokenizer.token_to_id(EOT)
        if self.eot_id is None:
            raise ConfigError(f"tokenizer has no {EOT} token; pass eot_id")
        self.max_gen_toks = max_gen_toks
        self.progress = progress
        self.progress_desc = "eval"

    # ------------------------------------------------------------------ tokenization

    def encode(self, text: str) -> list[int]:
        try:
            return list(self.tokenizer.encode(text, add_special_tokens=False).ids)
        except TypeError:  # tokenizer-like objects without the keyword
            return list(self.tokenizer.encode(text).ids)

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids))

    def encode_pair(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """Context and continuation tokens, split as lm-evaluation-harness does (module docstring)."""
        n_spaces = len(context) - len(context.rstrip())
        if n_spaces > 0:
            continuation = context[-n_spaces:] + continuation
            context = context[:-n_spaces]
        if not context:
            return [self.eot_id], self.encode(continuation)
        whole = self.encode(context + continuation)
        n_ctx = len(self.encode(context))
        ctx, cont = whole[:n_ctx], whole[n_ctx:]
        if not cont:  # the whole string encodes to no more tokens than the context alone
            cont = self.encode(continuation)
        return ctx, cont

    # ------------------------------------------------------------------ scoring

    def _windows(self, req: int, ctx: list[int], cont: list[int]) -> list[_Window]:
        """Disjoint target chunks of at most L tokens, each with up to L tokens of input (left-truncated)."""
        L, seq, c = self.max_length, ctx + cont, len(ctx)
        out = []
        for a in range(c, len(seq), L):
            b = min(a + L, len(seq))
            out.append(_Window(req, seq[max(0, b - 1 - L) : b - 1], seq[a:b]))
        return out

    def _bar(self, total: int, desc: str):
        from tqdm.auto import tqdm

        return tqdm(total=total, desc=f"{self.progress_desc}: {desc}", disable=not self.progress, leave=False)

    @torch.inference_mode()
    def _forward(self, rows: list[list[int]]) -> torch.Tensor:
        T = max(len(r) for r in rows)
        idx = torch.zeros(len(rows), T, dtype=torch.long)
        for i, r in enumerate(rows):
            idx[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        return _logits(self.model(idx.to(self.device)))

    def _score_pairs(self, pairs: list[tuple[list[int], list[int]]], desc: str) -> list[tuple[float, bool]]:
        windows = [w for i, (ctx, cont) in enumerate(pairs) for w in self._windows(i, ctx, cont)]
        windows.sort(key=lambda w: -len(w.tokens))
        logprob = [0.0] * len(pairs)
        greedy = [True] * len(pairs)
        with self._bar(len(windows), desc) as bar:
            for s in range(0, len(windows), self.batch_size):
                batch = windows[s : s + self.batch_size]
                logits = self._forward([w.tokens for w in batch])
                # one log-softmax over every target position of the batch
                rows = [i for i, w in enumerate(batch) for _ in w.targets]
                cols = [p for w in batch for p in range(len(w.tokens) - len(w.targets), len(w.tokens))]
                tgt = torch.tensor([t for w in batch for t in w.targets], device=logits.device)
                lp = F.log_softmax(logits[rows, cols].float(), dim=-1)
                tok_lp = lp.gather(-1, tgt[:, None])[:, 0]
                hit = lp.argmax(-1) == tgt
                tok_lp, hit, k = tok_lp.double().tolist(), hit.tolist(), 0
                for w in batch:
                    n = len(w.targets)
                    logprob[w.req] += sum(tok_lp[k : k + n])
                    greedy[w.req] = greedy[w.req] and all(hit[k : k + n])
                    k += n
                bar.update(len(batch))
        return list(zip(logprob, greedy))

    def loglikelihood(self, requests: Sequence[tuple[str, str]]) -> list[tuple[float, bool]]:
        """[(sum log p(continuation | context), continuation is the greedy decode)] per request."""
        pairs = []
        for context, continuation in requests:
            ctx, cont = self.encode_pair(context, continuation)
            if not cont:
                raise ConfigError(f"empty continuation for context {context[-40:]!r}")
            pairs.append((ctx, cont))
        return self._score_pairs(pairs, "loglikelihood")

    def loglikelihood_rolling(self, texts: Sequence[str]) -> list[float]:
        """[log p(text | eot)] per text, summed over all its tokens (disjoint windows when longer than L)."""
        pairs = [([self.eot_id], self.encode(t)) for t in texts]
        scored = self._score_pairs([p for p in pairs if p[1]], "rolling")
        it = iter(scored)
        return [next(it)[0] if p[1] else 0.0 for p in pairs]

    # ------------------------------------------------------------------ generation

    @torch.inference_mode()
    def generate_until(self, requests: Sequence[tuple[str, dict]]) -> list[str]:
        """Greedy continuation of each context, cut at the first stop string (module docstring)."""
        items = []
        for i, (context, kwargs) in enumerate(requests):
            kwargs = dict(kwargs or {})
            if kwargs.get("do_sample"):
                raise ConfigError("generate_until is greedy only (do_sample=True requested)")
            until = kwargs.get("until") or []
            until = [u for u in ([until] if isinstance(until, str) else until) if u]
            max_new = int(kwargs.get("max_gen_toks", self.max_gen_toks))
            ctx = self.encode(context) if context else [self.eot_id]
            items.append((i, ctx or [self.eot_id], until, max_new))
        items.sort(key=lambda it: -len(it[1]))
        out: list[str] = [""] * len(items)
        L = self.max_length
        with self._bar(len(items), "generate") as bar:
            for s in range(0, len(items), self.batch_size):
                batch = items[s : s + self.batch_size]
                gen: list[list[int]] = [[] for _ in batch]
                active = [k for k, it in enumerate(batch) if it[3] > 0]
                while active:
                    rows = [(batch[k][1] + gen[k])[-L:] for k in active]
                    logits = self._forward(rows)
                    last = torch.tensor([len(r) - 1 for r in rows], device=logits.device)
                    nxt = logits[torch.arange(len(rows), device=logits.device), last].argmax(-1).tolist()
                    still = []
                    for k, tok in zip(active, nxt):
                        if tok == self.eot_id:
                            continue
                        gen[k].append(tok)
                        until = batch[k][2]
                        if len(gen[k]) >= batch[k][3] or (until and any(u in self.decode(gen[k]) for u in until)):
                            continue
                        still.append(k)
                    active = still
                for k, it in enumerate(batch):
                    text = self.decode(gen[k])
                    for u in it[2]:
                        if u in text:
                            text = text[: text.index(u)]
                    out[it[0]] = text
                bar.update(len(batch))
        return out


def perplexity(logprobs: Sequence[float], n_units: int) -> float:
    """exp(-sum(logprobs) / n_units), e.g. per word or per token; inf on overflow."""
    try:
        return math.exp(-sum(logprobs) / max(n_units, 1))
    except OverflowError:
        return float("inf")
