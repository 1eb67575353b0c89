"""The anchor-function reasoning probe (DESIGN.md §2): does the model compose rules or memorise pairs?

Task. A sequence of ``seq_len`` random tokens from the key range [key_low, key_high] holds, at a random
position p, a key x followed by two anchors a1, a2 ∈ {1, 2, 3, 4}: ``... x a1 a2 ...``. The model reads the
whole sequence and must output, at the last position, the token

    y = x + s(a1) + s(a2),      s = {1: +5, 2: +1, 3: −2, 4: −8}.

Both orders of one pair, (3, 4) and (4, 3), never appear in training (addition commutes, so a model that
had seen (4, 3) could answer (3, 4) by recalling that pair's sum). A model that learned each anchor's
shift and composes them answers the held-out pairs correctly (the *inferential* solution,
x − 10); a model that memorised whole pairs answers something else — typically one anchor's shift only
(x − 2 or x − 8) or the sum of some trained pair. The evaluator reports the in-distribution accuracy, the
held-out-pair accuracy, and for the held-out questions the share of answers matching each candidate:

    inferential  x + s(a1) + s(a2)           first_only   x + s(a1)
    second_only  x + s(a2)                   seen_pair    x + s(i) + s(j) for a trained pair (i, j)
    key          x                           other        anything else

(first match in this order). The model is this project's :class:`~smallinit.model.Transformer` trained
with AdamW and :func:`~smallinit.train.schedule.lr_at` (warmup + cosine), cross-entropy on the last
position only, on a fixed training set of ``n_train`` sequences, for ``steps`` steps (or, with ``stop_in_acc``
set, until an evaluation's in-distribution accuracy reaches it, ``steps`` being the cap); a disjoint
in-distribution set gives ``val_loss`` (for learning-rate selection) — the held-out pairs are never used for any
choice.

    result = train_anchor(AnchorConfig(gamma=1.0, steps=1500), out_dir="out/anchor-g1")
    result["final"]["heldout_acc"], result["final"]["answers"]["inferential"]

Files written to ``out_dir``: ``anchor.json`` (the config), ``metrics.jsonl`` (one line per evaluation),
``result.json`` (final numbers, per-example held-out correctness) and ``summary.json`` (``completed: true``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from smallinit.core.errors import ConfigError
from smallinit.runs.rundir import read_json

SHIFTS: dict[int, int] = {1: 5, 2: 1, 3: -2, 4: -8}
ANCHORS: tuple[int, ...] = (1, 2, 3, 4)
ANSWER_KINDS = ("inferential", "first_only", "second_only", "seen_pair", "key", "other")


@dataclass
class AnchorConfig:
    """Task, model and training settings of one anchor-function run.

    Flat on purpose, not a ModelConfig and an OptimConfig: the model's vocabulary and length are the task's
    ``vocab_size`` and ``seq_len`` and its head is untied (:func:`model_config` builds the ModelConfig from these
    fields), and the optimizer decays every matrix, embedding and head too (OptimConfig's ``decay_embeddings`` is
    off by default); anchor.json, result.json, a preset's ``anchor`` settings and ``smallinit anchor --set`` all
    use these flat names."""

    gamma: float = 1.0
    """Initialization exponent of every weight matrix (σ = fan_in^(−γ))."""
    steps: int = 2000
    seed: int = 0
    lr: float = 1e-3
    batch_size: int = 128
    weight_decay: float = 0.0
    warmup_steps: int = 50
    seq_len: int = 9
    vocab_size: int = 100
    key_low: int = 21
    """Keys x and filler tokens are drawn uniformly from [key_low, key_high]."""
    key_high: int = 80
    held_out: list[list[int]] = field(default_factory=lambda: [[3, 4], [4, 3]])
    """Anchor pairs (a1, a2) kept out of training."""
    n_train: int = 8192
    """Size of the fixed training set (sequences)."""
    n_test: int = 2000
    """Sequences in each evaluation set (in-distribution tune set, in-distribution test, held-out test)."""
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    d_ff: int = 256
    norm_eps: float = 1e-12
    gate: str = "none"
    eval_every: int = 100
    threads: int = 0
    stop_in_acc: float = 0.0
    """Stop at the first evaluation (every ``eval_every`` steps) whose in-distribution accuracy ``in_acc`` is
    >= this (0 = off: always train ``steps``). ``steps`` stays the cap and sets the learning-rate schedule; the
    steps actually run are ``result["steps_run"]``. The held-out pairs never enter the decision."""

    def validate(self) -> None:
        shifts = sorted(SHIFTS.values())
        lo_t, hi_t = self.key_low + 2 * shifts[0], self.key_high + 2 * shifts[-1]
        if self.key_low > self.key_high:
            raise ConfigError(f"anchor: key_low={self.key_low} > key_high={self.key_high}")
        if lo_t <= max(ANCHORS) or hi_t >= self.vocab_size:
            raise ConfigError(
                f"anchor: targets span [{lo_t}, {hi_t}]; they must lie in ({max(ANCHORS)}, "
                f"vocab_size={self.vocab_size}) — raise key_low or vocab_size"
            )
        if self.seq_len < 3:
            raise ConfigError(f"anchor: seq_len must be >= 3 (key and two anchors), got {self.seq_len}")
        for p in self.held_out:
            if len(p) != 2 or any(a not in ANCHORS for a in p):
                raise ConfigError(f"anchor: held-out pair {p} must be two anchors from {list(ANCHORS)}")
        if len(train_pairs(self.held_out)) == 0:
            raise ConfigError("anchor: every pair is held out; nothing to train on")
        for name in ("steps", "batch_size", "n_train", "n_test", "eval_every", "d_model", "n_layers", "n_heads"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"anchor: {name} must be > 0, got {getattr(self, name)}")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ConfigError(f"anchor: lr must be > 0, got {self.lr}")
        if not (0.0 <= self.stop_in_acc <= 1.0):
            raise ConfigError(f"anchor: stop_in_acc must be in [0, 1] (0 = off), got {self.stop_in_acc}")
        if self.threads < 0:
            raise ConfigError(f"anchor: threads must be >= 0 (0 = PyTorch's default), got {self.threads}")
        if not 0 <= self.seed < 2**32:  # the data generator's seed is 1_000_003·seed + 17, within 64 bits
            raise ConfigError(f"anchor: seed must be an integer in [0, 2^32), got {self.seed}")
        try:
            model_config(self).validate()  # gamma, norm_eps, gate, heads: the model's own checks, before any work
        except ValueError as e:
            raise ConfigError(f"anchor: {e}") from None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AnchorConfig:
        """A validated AnchorConfig from plain data (a job file, ``--set`` values): unknown keys and values of the
        wrong type are a ConfigError; an integer is accepted where a float is expected."""
        import typing

        hints = typing.get_type_hints(cls)
        kw: dict[str, Any] = {}
        for k, v in d.items():
            if k not in hints:
                raise ConfigError(f"unknown anchor setting {k!r}; known: {', '.join(sorted(hints))}")
            tp = hints[k]
            if tp is float and isinstance(v, int) and not isinstance(v, bool):
                v = float(v)
            ok = (
                (isinstance(v, list) and all(isinstance(p, list) for p in v))
                if k == "held_out"
                else (isinstance(v, tp) and not (tp is not bool and isinstance(v, bool)))
            )
            if not ok:
                raise ConfigError(f"anchor setting {k}: expected {getattr(tp, '__name__', tp)}, got {v!r}")
            kw[k] = v
        cfg = cls(**kw)
        cfg.validate()
        return cfg


def target_of(key: int | torch.Tensor, a1: int | torch.Tensor, a2: int | torch.Tensor):
    """y = x + s(a1) + s(a2) (works on ints and on int tensors)."""
    if isinstance(a1, torch.Tensor):
        table = torch.zeros(max(ANCHORS) + 1, dtype=torch.long)
        for a, s in SHIFTS.items():
            table[a] = s
        return key + table[a1] + table[a2]
    return key + SHIFTS[int(a1)] + SHIFTS[int(a2)]


def train_pairs(held_out: list[list[int]] | tuple = ((3, 4), (4, 3))) -> list[tuple[int, int]]:
    """All ordered anchor pairs except the held-out ones."""
    ho = {tuple(p) for p in held_out}
    return [(a, b) for a in ANCHORS for b in ANCHORS if (a, b) not in ho]


@dataclass
class AnchorData:
    """A set of anchor sequences: tokens (n, seq_len), targets (n,), anchor pairs (n, 2), keys (n,), positions (n,)."""

    tokens: torch.Tensor
    targets: torch.Tensor
    pairs: torch.Tensor
    keys: torch.Tensor
    positions: torch.Tensor

    def __len__(self) -> int:
        return int(self.tokens.shape[0])


def make_data(
    n: int, pairs: list[tuple[int, int]] | list[list[int]], cfg: AnchorConfig, generator: torch.Generator
) -> AnchorData:
    """``n`` sequences whose anchor pair is drawn uniformly from ``pairs`` (key, position, fillers uniform)."""
    pt = torch.tensor([list(p) for p in pairs], dtype=torch.long)
    which = torch.randint(0, len(pt), (n,), generator=generator)
    pr = pt[which]
    toks = torch.randint(cfg.key_low, cfg.key_high + 1, (n, cfg.seq_len), generator=generator)
    pos = torch.randint(0, cfg.seq_len - 2, (n,), generator=generator)
    rows = torch.arange(n)
    keys = toks[rows, pos]
    toks[rows, pos + 1] = pr[:, 0]
    toks[rows, pos + 2] = pr[:, 1]
    return AnchorData(toks, target_of(keys, pr[:, 0], pr[:, 1]), pr, keys, pos)


def classify_answers(pred: torch.Tensor, data: AnchorData, trained: list[tuple[int, int]]) -> list[str]:
    """The kind of each answer (see the module docstring): the first of inferential, first_only,
    second_only, seen_pair, key that it equals, else other."""
    off = (pred - data.keys).tolist()
    seen = {SHIFTS[a] + SHIFTS[b] for a, b in trained}
    kinds = []
    for o, (a1, a2) in zip(off, data.pairs.tolist()):
        if o == SHIFTS[a1] + SHIFTS[a2]:
            kinds.append("inferential")
        elif o == SHIFTS[a1]:
            kinds.append("first_only")
        elif o == SHIFTS[a2]:
            kinds.append("second_only")
        elif o in seen:
            kinds.append("seen_pair")
        elif o == 0:
            kinds.append("key")
        else:
            kinds.append("other")
    return kinds


def model_config(cfg: AnchorConfig):
    """The task's :class:`~smallinit.model.ModelConfig`: untied head, ``gamma``/``norm_eps``/``gate`` from ``cfg``."""
    from smallinit.model import ModelConfig

    return ModelConfig(
        vocab_size=cfg.vocab_size,
        d_model=cfg.d_model,
        n_layers=cfg.n_layers,
        n_heads=cfg.n_heads,
        d_ff=cfg.d_ff,
        max_seq_len=cfg.seq_len,
        norm_eps=cfg.norm_eps,
        gate=cfg.gate,
        gamma=cfg.gamma,
        tie_embeddings=False,
    )


def build_model(cfg: AnchorConfig):
    """The Transformer of the task (:func:`model_config`)."""
    from smallinit.model import Transformer

    return Transformer(model_config(cfg))


@torch.no_grad()
def _predict(model, data: AnchorData, batch: int = 1024) -> tuple[torch.Tensor, float]:
    """Greedy answers at the last position and the mean cross-entropy of the targets."""
    preds, loss, n = [], 0.0, 0
    for i in range(0, len(data), batch):
        logits = model(data.tokens[i : i + batch])[:, -1, :].float()
        y = data.targets[i : i + batch]
        loss += F.cross_entropy(logits, y, reduction="sum").item()
        n += y.numel()
        preds.append(logits.argmax(-1))
    return torch.cat(preds), loss / max(n, 1)


def evaluate(model, sets: dict[str, AnchorData], trained: list[tuple[int, int]]) -> dict[str, Any]:
    """In-distribution loss/accuracy (``val_loss`` on the tune set, ``in_acc`` on the test set), held-out
    accuracy and the held-out answer kinds (fractions)."""
    was = model.training
    model.eval()
    try:
        _, val_loss = _predict(model, sets["tune"])
        p_in, _ = _predict(model, sets["test"])
        p_ho, ho_loss = _predict(model, sets["heldout"])
    finally:
        model.train(was)
    correct = p_ho == sets["heldout"].targets
    kinds = classify_answers(p_ho, sets["heldout"], trained)
    n = len(kinds)
    out = {
        "val_loss": val_loss,
        "in_acc": float((p_in == sets["test"].targets).float().mean()),
        "heldout_acc": float(correct.float().mean()),
        "heldout_loss": ho_loss,
        "answers": {k: kinds.count(k) / n for k in ANSWER_KINDS},
    }
    per_pair = {}
    for p in {tuple(x) for x in sets["heldout"].pairs.tolist()}:
        m = (sets["heldout"].pairs == torch.tensor(p)).all(-1)
        per_pair[f"{p[0]},{p[1]}"] = float(correct[m].float().mean())
    out["heldout_acc_by_pair"] = dict(sorted(per_pair.items()))
    out["_correct"] = correct
    return out


def train_anchor(
    cfg: AnchorConfig, out_dir: str | os.PathLike | None = None, log: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """Train one model on the anchor task and evaluate it (see the module docstring). Returns the result
    dict (also written to ``out_dir/result.json`` when given)."""
    from smallinit.config import OptimConfig
    from smallinit.train.host import prepare_cpu_process, restore_cpu_process
    from smallinit.train.schedule import lr_at

    cfg.validate()
    log = log or (lambda s: None)
    out = Path(out_dir) if out_dir is not None else None
    if out is not None:
        _start_out_dir(out, cfg)
    old_threads = torch.get_num_threads()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    settings = prepare_cpu_process()  # train/host.py: reused buffers, denormals flushed to zero
    t_start = time.time()
    try:
        trained, train, sets = _datasets(cfg)
        torch.manual_seed(cfg.seed)
        model = build_model(cfg)
        decay = [p for p in model.parameters() if p.ndim >= 2]
        no_decay = [p for p in model.parameters() if p.ndim < 2]
        opt = torch.optim.AdamW(
            [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=cfg.lr,
            betas=(0.9, 0.95),
        )
        ocfg = OptimConfig(lr=cfg.lr, warmup_steps=cfg.warmup_steps, schedule="cosine", min_lr_ratio=0.1)
        order_gen = torch.Generator().manual_seed(cfg.seed + 99)
        perm, pos = torch.randperm(len(train), generator=order_gen), 0
        history: list[dict[str, Any]] = []
        mf = open(out / "metrics.jsonl", "a") if out is not None else None
        ev = None
        steps_run = 0
        try:
            ev = evaluate(model, sets, trained)
            history.append(_record(0, None, 0.0, ev, t_start))
            if mf:
                mf.write(json.dumps(history[-1]) + "\n")
            for step in range(cfg.steps):
                if pos + cfg.batch_size > len(perm):
                    perm, pos = torch.randperm(len(train), generator=order_gen), 0
                idx = perm[pos : pos + cfg.batch_size]
                pos += cfg.batch_size
                lr = lr_at(step, cfg.steps, ocfg)
                for group in opt.param_groups:
                    group["lr"] = lr
                logits = model(train.tokens[idx])[:, -1, :]
                loss = F.cross_entropy(logits.float(), train.targets[idx])
                if not math.isfinite(loss.item()):
                    from smallinit.core.errors import DivergenceError

                    raise DivergenceError(f"anchor: non-finite loss at step {step + 1} (lr {cfg.lr})")
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                s = step + 1
                if s % cfg.eval_every == 0 or s == cfg.steps:
                    ev = evaluate(model, sets, trained)
                    history.append(_record(s, loss.item(), lr, ev, t_start))
                    if mf:
                        mf.write(json.dumps(history[-1]) + "\n")
                        mf.flush()
                    log(
                        f"step {s}: loss {loss.item():.3f} val {ev['val_loss']:.3f} in-acc {ev['in_acc']:.3f} "
                        f"held-out {ev['heldout_acc']:.3f} inferential {ev['answers']['inferential']:.3f}"
                    )
                steps_run = s
                learned = s % cfg.eval_every == 0 and ev["in_acc"] >= cfg.stop_in_acc
                if cfg.stop_in_acc > 0 and s < cfg.steps and learned:
                    log(f"step {s}: in-distribution accuracy {ev['in_acc']:.3f} >= {cfg.stop_in_acc}: stopping")
                    break
        finally:
            if mf:
                mf.close()
        final = {k: v for k, v in ev.items() if not k.startswith("_")}
        result = {
            "config": cfg.to_dict(),
            "train_pairs": [list(p) for p in trained],
            "shifts": SHIFTS,
            "final": final,
            "history": history,
            "steps_run": steps_run,
            "heldout_correct": "".join("1" if c else "0" for c in ev["_correct"].tolist()),
            "params": model.num_params(),
            "wall_time": time.time() - t_start,
        }
        if out is not None:
            _write_result(out, result)
        return result
    finally:
        torch.set_num_threads(old_threads)
        restore_cpu_process(settings)  # the caller's thread gets IEEE subnormals back


def _start_out_dir(out: Path, cfg: AnchorConfig) -> None:
    """Make ``out`` ready for the run of ``cfg``: the output-folder policy; a folder holding an anchor run of
    another config refused (ConfigError; ``threads`` does not count, a field added since compares at its default);
    the files of an interrupted earlier attempt removed; ``anchor.json`` written."""
    from smallinit.core.io import atomic_write_json
    from smallinit.core.outputs import check_out_dir

    check_out_dir(out, "anchor", can_continue=True, verb="anchor")
    before, now = read_json(out / "anchor.json"), json.loads(json.dumps(cfg.to_dict()))  # tuples as JSON lists
    defaults = json.loads(json.dumps(AnchorConfig().to_dict()))  # a field added since compares at its default
    diff = sorted(
        k
        for k in set(before or {}) | set(now)
        if k != "threads" and (before or {}).get(k, defaults.get(k)) != now.get(k)
    )
    if before is not None and diff:  # threads are not part of the run (a resumed reproduction may use others)
        raise ConfigError(
            f"{out} holds an anchor run with another config ({', '.join(diff[:4])} differ); choose another --out"
        )
    out.mkdir(parents=True, exist_ok=True)
    for f in ("metrics.jsonl", "result.json", "summary.json"):
        (out / f).unlink(missing_ok=True)  # an interrupted earlier attempt: start over
    atomic_write_json(out / "anchor.json", cfg.to_dict())


def _datasets(cfg: AnchorConfig) -> tuple[list[tuple[int, int]], AnchorData, dict[str, AnchorData]]:
    """(trained pairs, training set, {"tune", "test", "heldout"} sets), drawn in this order from one generator
    seeded by ``cfg.seed``."""
    trained = train_pairs(cfg.held_out)
    g = torch.Generator().manual_seed(1_000_003 * cfg.seed + 17)
    train = make_data(cfg.n_train, trained, cfg, g)
    sets = {
        "tune": make_data(cfg.n_test, trained, cfg, g),
        "test": make_data(cfg.n_test, trained, cfg, g),
        "heldout": make_data(cfg.n_test, [tuple(p) for p in cfg.held_out], cfg, g),
    }
    return trained, train, sets


def _write_result(out: Path, result: dict[str, Any]) -> None:
    """``result.json`` and then ``summary.json`` (``completed: true``), which marks the run finished."""
    from smallinit.core.io import atomic_write_json

    final = result["final"]
    atomic_write_json(out / "result.json", result)
    atomic_write_json(
        out / "summary.json",
        {
            "completed": True,
            "step": result["steps_run"],
            "final_val_loss": final["val_loss"],
            "heldout_acc": final["heldout_acc"],
            "in_acc": final["in_acc"],
            "wall_time": result["wall_time"],
        },
    )


def _record(step: int, loss: float | None, lr: float, ev: dict[str, Any], t0: float) -> dict[str, Any]:
    return {
        "step": step,
        "loss": loss,
        "lr": lr,
        "val_loss": ev["val_loss"],
        "in_acc": ev["in_acc"],
        "heldout_acc": ev["heldout_acc"],
        "heldout_loss": ev["heldout_loss"],
        "answers": ev["answers"],
        "wall_time": time.time() - t0,
    }


def anchor_flops(cfg: AnchorConfig) -> float:
    """Approximate training FLOPs of a run (6·N per token over the sequence, plus evaluations)."""
    fpt = model_config(cfg).flops_per_token(cfg.seq_len)  # counted from the config: no weights built
    train = fpt * cfg.steps * cfg.batch_size * cfg.seq_len
    evals = (cfg.steps // cfg.eval_every + 2) * 3 * cfg.n_test * cfg.seq_len * fpt / 3
    return train + evals


__all__ = [
    "ANCHORS",
    "ANSWER_KINDS",
    "AnchorConfig",
    "AnchorData",
    "SHIFTS",
    "anchor_flops",
    "build_model",
    "classify_answers",
    "evaluate",
    "make_data",
    "model_config",
    "target_of",
    "train_anchor",
    "train_pairs",
]
