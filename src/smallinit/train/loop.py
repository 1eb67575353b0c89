"""The pretraining loop: AdamW, warmup + cosine/WSD, clipping, accumulation, bf16 autocast, compile,
validation, atomic checkpoints, exact resume, a divergence guard and optional DDP/FSDP2.

    trainer = Trainer(load_config("tiny", ["train.max_steps=100"]), "runs/tiny")
    summary = trainer.run()

Everything a run produces lives in its directory: ``config.yaml``, ``origin.json`` (the folder ``train`` ran in: a
relative ``data.path`` resolves from it when the run is resumed elsewhere), ``tokenizer.json``, ``metrics.jsonl``,
``checkpoints/``, ``summary.json`` (written when the run completes), ``diverged.json`` (written when the run
stopped on a non-finite or diverged loss), the experiment trackers' files (``tb/``; ``wandb/`` and ``wandb.json``:
:mod:`smallinit.train.loggers`) and whatever callbacks (probes) add.

Before the first step (and before the run directory is created) everything checkable is checked: the output
folder (:mod:`smallinit.outputs`), both data splits hold a window of ``seq_len`` and the validation split the
evaluated windows, every token id is below the vocabulary, callbacks' own ``check(trainer)`` (probe matrix
names), and the memory estimate of a step (:func:`memory_estimate`) against the machine's memory. A failing
check leaves no folder behind.

Divergence watch: a step whose loss exceeds max(ln V, L₁) + ``train.diverge_margin`` (V the vocabulary; ln V is
the loss of a uniform guess, about where training starts; L₁ the run's first-step loss, far above ln V when the
init is large, e.g. γ = 0.25) counts as diverged; ``train.diverge_steps`` consecutive diverged steps stop the run
like a NaN does (DivergenceError naming the first diverged step). L₁ is kept in the checkpoints, so a resumed run
draws the same line. While the loss is above that line no checkpoint is written, so pruning can never remove the
newest checkpoint from before it.

SIGINT/SIGTERM: the step in progress finishes, a checkpoint is written, and :class:`~smallinit.errors.Interrupted`
is raised (``smallinit train`` then exits 130 / 143 with one line).
Callbacks are duck-typed objects with any of ``on_train_start(trainer)``,
``on_loss(trainer, step, loss) -> loss``, ``on_before_optimizer_step(trainer, step)``,
``on_step_end(trainer, step, record)`` and ``on_train_end(trainer)``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from smallinit.checkpoint import (latest_good_checkpoint, list_checkpoints, read_checkpoint,
                                  remove_partial_checkpoints, save_checkpoint)
from smallinit.errors import CheckpointError, ConfigError, DataError, DivergenceError, Interrupted, RunDirError
from smallinit.io import atomic_write_json, atomic_write_text, read_jsonl
from smallinit.model import ModelConfig, Transformer
from smallinit.model.moe import update_expert_bias
from smallinit.train import distributed as dist_utils
from smallinit.train.compile import compile_module, resolve_compile
from smallinit.train.config import RunConfig, config_from_dict, save_config
from smallinit.train.loggers import check_available as check_loggers, close_all, open_loggers
from smallinit.rundir import ORIGIN, data_mismatch, run_data_path
from smallinit.train.host import prepare_cpu_process, restore_cpu_process
from smallinit.train.schedule import lr_at
from smallinit.device import resolve_device as _resolve_device


def resolve_device(name: str) -> torch.device:
    return _resolve_device(name, what="train.device")


def param_groups(model: torch.nn.Module, weight_decay: float, decay_embeddings: bool) -> list[dict[str, Any]]:
    """Weight decay on matrices only: never on norm gains or biases; on embeddings/head only if asked."""
    decay, no_decay = [], []
    embedding_ids = {id(model.tok_emb.weight), id(model.lm_head.weight)}
    for p in model.parameters():
        if not p.requires_grad:
            continue
        if p.ndim < 2 or (id(p) in embedding_ids and not decay_embeddings):
            no_decay.append(p)
        else:
            decay.append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def memory_estimate(cfg: RunConfig, micro_batch: int) -> int:
    """Bytes one process needs for a training step (an estimate, used to refuse a batch that cannot fit):

        params · 16                      fp32 weights, gradients, AdamW m and v
      + L · b · T · d · (34 + 5·H·T/d) · w    activations kept for backward per block (Korthikanti et al.)
      + b · T · V · 12                  logits, their float32 copy and gradient

    with b = micro-batch, T = seq_len, d = d_model, H = heads, L = layers, V = vocab, w = 2 bytes per value in
    float32 (the formula counts 16-bit values) and 1 under bf16 autocast."""
    m = cfg.model
    T, b = cfg.data.seq_len, micro_batch
    w = 1 if cfg.train.dtype == "bf16" else 2
    params = m.num_params()
    act = m.n_layers * b * T * m.d_model * (34 + 5 * m.n_heads * T / m.d_model) * w
    return int(params * 16 + act + b * T * m.vocab_size * 12)


def machine_memory(device: torch.device) -> int | None:
    """Total memory of ``device`` in bytes (physical RAM for the CPU), or None when unknown."""
    try:
        if device.type == "cuda":
            return int(torch.cuda.get_device_properties(device).total_memory)
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError, RuntimeError):
        return None


def _max_token(tokens, chunk: int = 1 << 24) -> int:
    """The largest token id of a (memory-mapped) array, read in chunks; -1 when empty."""
    top = -1
    for i in range(0, len(tokens), chunk):
        top = max(top, int(tokens[i:i + chunk].max()))
    return top


def _fmt_bytes(n: float) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


class RunLock:
    """An exclusive, non-blocking ``flock`` on ``RUN_DIR/.lock``: a second process on the same run refuses."""

    def __init__(self, run_dir: Path):
        self.path = run_dir / ".lock"
        self.fd: int | None = None

    def __enter__(self) -> "RunLock":
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = os.pread(self.fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(self.fd)
            self.fd = None
            raise RunDirError(f"{self.path.parent} is in use by another process (pid {other}); "
                              "wait for it or choose another directory") from None
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, str(os.getpid()).encode(), 0)
        return self

    def __exit__(self, *exc) -> None:
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


class Trainer:
    """Owns one run directory; ``run()`` trains to ``train.max_steps`` (resuming if asked) and returns a summary."""

    def __init__(self, cfg: RunConfig | None, run_dir: str | os.PathLike, resume: bool = False,
                 callbacks: list[Any] | None = None, max_steps: int | None = None):
        """``max_steps`` (resume only) extends the run; a value below the run's own ``train.max_steps`` is a
        ConfigError (a run is never shortened: its schedule and summary belong to that budget)."""
        self.run_dir = Path(run_dir)
        self.resume = resume
        self.callbacks = list(callbacks or [])
        if resume:
            cfg_path = self.run_dir / "config.yaml"
            if not cfg_path.is_file():
                raise RunDirError(f"{self.run_dir}: nothing to resume (no config.yaml)")
            from smallinit.train.config import read_config_file

            raw = read_config_file(cfg_path)
            if not raw.get("model") or not raw.get("data"):  # a run always writes every section
                raise RunDirError(f"{cfg_path}: has no model/data sections (emptied or truncated?); the newest "
                                  f"checkpoint keeps a copy: see `smallinit doctor {self.run_dir}`")
            cfg = config_from_dict(raw)
            # the parallel mode belongs to the launch, not the run: a DDP/FSDP run resumes in one process
            # (full-state-dict checkpoints load at any world size) and a single-process run under torchrun
            world = int(os.environ.get("WORLD_SIZE", "1"))
            if world == 1 and cfg.train.parallel != "none" and "RANK" not in os.environ:
                cfg.train.parallel = "none"
            elif world > 1 and cfg.train.parallel == "none":
                cfg.train.parallel = "ddp"
        if cfg is None:
            raise ConfigError("a config is required for a new run")
        if max_steps is not None:
            if not resume:
                raise ConfigError("max_steps goes with resume; for a new run set train.max_steps")
            if max_steps < cfg.train.max_steps:
                raise ConfigError(f"--max-steps {max_steps} is below the run's train.max_steps "
                                  f"{cfg.train.max_steps}; --max-steps only extends a run")
            cfg.train.max_steps = max_steps
        self.cfg = cfg
        # where the tokens are: data.path as written, resolved against the run's launch folder on resume (a relative
        # path, resumed from another folder); config.yaml keeps data.path as written (part of the run's identity)
        self.data_path = run_data_path(self.run_dir, cfg.to_dict()) if resume else Path(cfg.data.path)
        self.step = 0
        self.model: Transformer | None = None

    # ---- helpers usable by callbacks ------------------------------------------------------------------
    def autocast(self):
        enabled = self.cfg.train.dtype == "bf16"
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=enabled)

    def full_model(self) -> Transformer | None:
        """An unsharded model with the current weights on rank 0 (None on other ranks). Collective under FSDP:
        every rank must call it."""
        if self.cfg.train.parallel != "fsdp":
            return self.model if self.dist.is_main else None
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        sd = get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if not self.dist.is_main:
            return None
        if getattr(self, "_replica", None) is None:
            self._replica = Transformer(self.model_cfg)
        self._replica.load_state_dict(sd)
        return self._replica

    def _callbacks(self, name: str, *args):
        out = None
        for cb in self.callbacks:
            fn = getattr(cb, name, None)
            if fn is not None:
                r = fn(self, *args)
                out = r if r is not None else out
        return out

    # ---- set-up ---------------------------------------------------------------------------------------
    def _setup(self) -> None:
        from smallinit.data import BatchLoader, TokenData

        c = self.cfg
        if c.train.threads:
            torch.set_num_threads(c.train.threads)
        self.device = resolve_device(c.train.device)
        if self.device.type == "cpu":
            self._cpu_settings = prepare_cpu_process()  # reused buffers, denormals flushed (train/host.py)
        self.dist = dist_utils.setup(c.train.parallel, self.device)
        W = self.dist.world_size
        mb = c.train.micro_batch_size or c.train.batch_size // W
        if c.train.batch_size % W or mb <= 0 or c.train.batch_size % (W * mb):
            raise ConfigError(f"train.batch_size={c.train.batch_size} must be divisible by world_size={W} × "
                              f"micro_batch_size={mb}")
        self.micro_batch = mb
        self.accum = c.train.batch_size // (W * mb)

        self.data = TokenData(self.data_path)
        if self.resume:  # the data must still be the run's: same vocabulary and tokenizer, every id below it
            why = data_mismatch(self.run_dir, self.data)
            if why:
                raise DataError(why)
        # the data decides the vocabulary; the model must cover the window length
        c.model.vocab_size = self.data.vocab_size
        c.model.max_seq_len = max(c.model.max_seq_len, c.data.seq_len)
        c.validate()
        self.model_cfg: ModelConfig = c.model
        bos = self.data.bos_id if c.data.bos else None
        self.bos_id = bos
        self._check_data()
        self._check_memory()
        self.loader = BatchLoader(self.data.train, c.data.seq_len, c.train.batch_size, c.train.seed, bos_id=bos)
        # train.dtype "auto" → "fp32"/"bf16" once per run (a resumed run keeps its own), before the seeded init draw:
        # the measurement it may take gives the global RNG back untouched (rule, cache, what stays float32:
        # train/precision.py)
        from smallinit.train.precision import for_run

        self.dtype_decision = for_run(c, self.device, mb, self.run_dir, self.resume)
        c.train.dtype = self.dtype_decision.dtype

        torch.manual_seed(c.train.seed)
        model = Transformer(c.model).to(self.device)
        self.model = model
        self.wrapped = dist_utils.wrap(model, c.train.parallel, self.device)
        # built after wrapping: under FSDP2 the optimizer must see the sharded (DTensor) parameters.
        # fused AdamW is ~8x faster than foreach on CPU (benchmarks/throughput.py).
        self.optimizer = torch.optim.AdamW(
            param_groups(model, c.optim.weight_decay, c.optim.decay_embeddings), lr=c.optim.lr,
            betas=tuple(c.optim.betas), eps=c.optim.eps, fused=True)
        # train.compile "auto": on only where the run repays the compile (rule and measurement: train/compile.py)
        self.compiled = resolve_compile(c.train.compile, self.device, c.train.max_steps, c.model.moe.enabled)
        self.forward = compile_module(self.wrapped) if self.compiled else self.wrapped

    def _check_data(self) -> None:
        """Everything about the data that would otherwise fail after training steps: a window of seq_len in
        each split, enough validation windows for data.val_batches (+ tune_batches), token ids < vocab."""
        from smallinit.data.loader import val_offsets

        c, d = self.cfg, self.data
        d.check_seq_len(c.data.seq_len, bos=self.bos_id is not None)
        n_val = len(val_offsets(len(d.val), c.data.seq_len, self.bos_id))
        if c.data.tune_batches:
            need = c.data.val_batches * c.train.batch_size + 1  # the tune windows follow the val windows
            if n_val < need:
                raise DataError(f"{d.path}: the validation split holds {n_val} windows of seq_len {c.data.seq_len}; "
                                f"data.tune_batches needs more than data.val_batches × batch_size = {need - 1}; lower "
                                "data.val_batches / data.tune_batches or prepare a larger --val-fraction")
        if self.resume:
            return  # the token scan ran in _setup (rundir.data_mismatch), before the data set the vocabulary
        for name, split in (("train", d.train), ("val", d.val)):
            top = _max_token(split)
            if top >= c.model.vocab_size:
                raise DataError(f"{d.path}: {name}.bin holds token id {top}, but the vocabulary (meta.json "
                                f"vocab_size) is {c.model.vocab_size}; the data is damaged or was prepared with "
                                "another tokenizer: prepare it again")

    def _check_memory(self) -> None:
        """Refuse a step whose estimated memory (:func:`memory_estimate`) exceeds the device's total memory."""
        need = memory_estimate(self.cfg, self.micro_batch)
        have = machine_memory(self.device)
        if have is not None and need > have:
            raise ConfigError(f"a training step needs about {_fmt_bytes(need)} (micro-batch {self.micro_batch} × "
                              f"seq_len {self.cfg.data.seq_len}, {self.cfg.model.num_params():,} parameters), more "
                              f"than this {self.device.type}'s {_fmt_bytes(have)}; lower train.batch_size (or set "
                              "train.micro_batch_size), data.seq_len or the model size")

    def _check_callbacks(self) -> None:
        """Callbacks' own up-front checks (``check(trainer)``, e.g. probe matrix names), before the folder exists."""
        for cb in self.callbacks:
            fn = getattr(cb, "check", None)
            if fn is not None:
                fn(self)

    def _prepare_run_dir(self) -> None:
        rd = self.run_dir
        if self.dist.is_main:
            if not self.resume:
                self._check_out_dir()
            rd.mkdir(parents=True, exist_ok=True)
        dist_utils.barrier(self.dist)

    def _check_out_dir(self) -> None:
        """The output-folder policy (:mod:`smallinit.outputs`) for a new run: RUN_DIR absent or empty, never
        the data folder (or inside it, or holding it), never a folder that holds something else."""
        from smallinit.outputs import check_out_dir

        try:
            check_out_dir(self.run_dir, "run", inputs=[self.cfg.data.path], verb="train", has_force=False)
        except ConfigError as e:
            raise RunDirError(str(e)) from None

    def _write_run_files(self) -> None:
        if not self.dist.is_main:
            return
        save_config(self.cfg, self.run_dir / "config.yaml")
        if not self.resume:  # where a relative data.path is relative to (rundir.run_data_path); the dtype decision
            atomic_write_json(self.run_dir / ORIGIN, {"cwd": os.getcwd(), "dtype": self.dtype_decision.to_dict()})
        print(self.dtype_decision.line(), file=sys.stderr, flush=True)
        tok = self.data_path / "tokenizer.json"
        if tok.is_file():
            atomic_write_text(self.run_dir / "tokenizer.json", tok.read_text())

    def _restore(self) -> None:
        if self.dist.is_main:
            remove_partial_checkpoints(self.run_dir)  # a killed write's leftovers (we hold the lock)
        ckpt = latest_good_checkpoint(self.run_dir)
        if ckpt is None:
            bad = list_checkpoints(self.run_dir)
            if bad:  # never restart from scratch silently over a run whose checkpoints are all damaged
                raise CheckpointError(f"{self.run_dir}: none of the {len(bad)} checkpoint(s) verifies (newest: "
                                      f"{bad[-1].name}); see `smallinit doctor {self.run_dir}`, or delete "
                                      f"{self.run_dir / 'checkpoints'} to start over")
            if (self.run_dir / "metrics.jsonl").exists() and self.dist.is_main:
                (self.run_dir / "metrics.jsonl").unlink()  # nothing was saved: start over cleanly
            return
        from torch.distributed.checkpoint.state_dict import (StateDictOptions, set_model_state_dict,
                                                             set_optimizer_state_dict)

        data = read_checkpoint(ckpt)
        tensors = data["model"]
        if self.model_cfg.tie_embeddings:
            tensors = {**tensors, "lm_head.weight": tensors["tok_emb.weight"]}
        opts = StateDictOptions(full_state_dict=True)
        try:
            set_model_state_dict(self.model, tensors, options=opts)
        except RuntimeError as e:  # shapes or names differ: config.yaml no longer describes the checkpointed model
            first = next((ln.strip() for ln in str(e).splitlines() if "size mismatch" in ln or "key" in ln), "")
            raise CheckpointError(f"{ckpt}: its weights do not fit the model of {self.run_dir / 'config.yaml'} "
                                  f"({first[:160]}); was config.yaml edited? Restore it (the checkpoint keeps its "
                                  "own copy) or start a new run") from None
        set_optimizer_state_dict(self.model, self.optimizer, data["optim"]["optimizer"], options=opts)
        torch.set_rng_state(data["optim"]["rng_cpu"])
        self.step = int(data["state"]["step"])
        self._wall_before = float(data["state"].get("wall_time", 0.0))  # wall time accumulates across resumes
        self._first_loss = data["state"].get("first_loss")  # the divergence line's start (None: older checkpoints)
        self._t_start = time.time()
        self._truncate_metrics(self.step)

    def _truncate_metrics(self, step: int) -> None:
        """Drop metric lines logged after the checkpoint we resume from (they will be logged again)."""
        path = self.run_dir / "metrics.jsonl"
        if not self.dist.is_main or not path.exists():
            return
        keep = []
        for line in path.read_text(errors="replace").splitlines():
            try:
                if json.loads(line)["step"] <= step:
                    keep.append(line)
            except (ValueError, KeyError, TypeError):
                continue  # a torn last line from a kill (or any line that is not a record): dropped
        atomic_write_text(path, "".join(l + "\n" for l in keep))

    def save(self) -> Path | None:
        """Write a checkpoint of the current step (collective under FSDP; rank 0 writes)."""
        from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                             get_optimizer_state_dict)

        opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
        msd = get_model_state_dict(self.model, options=opts)
        osd = get_optimizer_state_dict(self.model, self.optimizer, options=opts)
        path = None
        if self.dist.is_main:
            tied = ("lm_head.weight",) if self.model_cfg.tie_embeddings else ()
            state = {"tokens": self.tokens_seen, "loader": self.loader.state_dict(), "world_size": self.dist.world_size,
                     "wall_time": self.wall_time(), "first_loss": self._first_loss}
            path = save_checkpoint(self.run_dir, self.step, msd, {"optimizer": osd, "rng_cpu": torch.get_rng_state()},
                                   state, self.cfg.to_dict(), keep=self.cfg.train.keep_ckpts, tied_keys=tied,
                                   keep_steps=tuple(self.cfg.train.ckpt_steps))
        dist_utils.barrier(self.dist)
        return path

    # ---- the loop -------------------------------------------------------------------------------------
    @property
    def tokens_seen(self) -> int:
        return self.step * self.cfg.train.batch_size * self.cfg.data.seq_len

    def wall_time(self) -> float:
        return self._wall_before + (time.time() - self._t_start)

    @torch.no_grad()
    def evaluate(self, n_batches: int | None = None, skip_batches: int = 0) -> float:
        """Mean next-token loss over a fixed, ordered set of validation windows (rank-strided, then averaged)."""
        from smallinit.data import val_batches

        c = self.cfg
        n = c.data.val_batches if n_batches is None else n_batches
        self.wrapped.eval()
        total = torch.zeros(2, dtype=torch.float64, device=self.device)
        it = val_batches(self.data.val, c.data.seq_len, self.micro_batch,
                         max_batches=(skip_batches + n) * (c.train.batch_size // self.micro_batch), bos_id=self.bos_id)
        per = c.train.batch_size // self.micro_batch
        for i, (x, y) in enumerate(it):
            if i < skip_batches * per or i % self.dist.world_size != self.dist.rank:
                continue
            with self.autocast():
                logits = self.forward(x.to(self.device))
            loss = F.cross_entropy(logits.float().flatten(0, 1), y.to(self.device).flatten(), reduction="sum")
            total += torch.stack([loss.double(), torch.tensor(y.numel(), dtype=torch.float64, device=self.device)])
        if self.dist.enabled:
            torch.distributed.all_reduce(total)
        self.wrapped.train()
        if total[1].item() == 0:
            from smallinit.errors import DataError

            raise DataError(f"the validation split of {self.data_path} has no windows for batches "
                            f"{skip_batches}..{skip_batches + n - 1} at seq_len {c.data.seq_len}; "
                            "lower data.val_batches / data.tune_batches or prepare a larger --val-fraction")
        return (total[0] / total[1]).item()

    def _micro_step_context(self, last: bool):
        if last or not self.dist.enabled:
            return contextlib.nullcontext()
        if self.cfg.train.parallel == "ddp":
            return self.wrapped.no_sync()
        return contextlib.nullcontext()

    def train_step(self) -> dict[str, float]:
        """One optimizer step over the global batch; returns {"loss", "grad_norm", "lr", "aux_loss"}."""
        c = self.cfg
        lr = lr_at(self.step, c.train.max_steps, c.optim)
        for g in self.optimizer.param_groups:
            g["lr"] = lr
        loss_sum = torch.zeros((), device=self.device)
        aux_sum = torch.zeros((), device=self.device)
        fsdp = c.train.parallel == "fsdp" and self.dist.enabled
        for m in range(self.accum):
            start = (self.dist.rank * self.accum + m) * self.micro_batch
            x, y = self.loader.get(self.step, start, self.micro_batch)
            x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
            last = m == self.accum - 1
            if fsdp:
                self.model.set_requires_gradient_sync(last)
            with self._micro_step_context(last):
                with self.autocast():  # the loss from the chunked LM head (model/loss.py): no full logits kept
                    loss = self.forward(x, targets=y)
                aux = self.model.aux_loss()
                loss = self._callbacks("on_loss", self.step, loss) or loss
                total = loss + aux if aux is not None else loss
                (total / self.accum).backward()
            loss_sum += loss.detach()
            if aux is not None:
                aux_sum += aux.detach()
        self._callbacks("on_before_optimizer_step", self.step)
        clip = c.optim.grad_clip if c.optim.grad_clip > 0 else float("inf")
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip)
        if hasattr(grad_norm, "full_tensor"):
            grad_norm = grad_norm.full_tensor()
        stats = dist_utils.all_reduce_mean(torch.stack([loss_sum, aux_sum]) / self.accum, self.dist)
        loss_v, aux_v, gn = stats[0].item(), stats[1].item(), grad_norm.item()
        if not math.isfinite(loss_v) or not math.isfinite(gn):
            what = "loss" if not math.isfinite(loss_v) else "gradient norm"
            raise DivergenceError(f"non-finite {what} at step {self.step + 1} (loss={loss_v}, grad_norm={gn}); "
                                  f"stopped before the optimizer step; the last good checkpoint is kept")
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if c.model.moe.enabled and c.model.moe.bias_update_rate > 0:  # MoE aux-loss-free balancing
            update_expert_bias(self.model)
        self.step += 1
        return {"loss": loss_v, "grad_norm": gn, "lr": lr, "aux_loss": aux_v}

    def completed_summary(self) -> dict[str, Any] | None:
        """The run's summary.json when the run is complete: the summary says so at (or beyond) ``train.max_steps``
        and the newest checkpoint that verifies is that final step (a damaged final checkpoint is recomputed from
        the one before by an ordinary resume). Else None."""
        try:
            s = json.loads((self.run_dir / "summary.json").read_text())
        except (OSError, ValueError):
            return None
        if not (isinstance(s, dict) and s.get("completed") and isinstance(s.get("step"), int)
                and s["step"] >= self.cfg.train.max_steps):
            return None
        good = latest_good_checkpoint(self.run_dir)
        if good is None or int(good.name[5:]) != s["step"]:
            return None
        return s

    def run(self) -> dict[str, Any]:
        """Train to ``train.max_steps``; returns the summary. Resuming a run that is already complete at its
        ``max_steps`` changes nothing and returns its summary with ``"already_complete": True``."""
        self._t_start = time.time()
        self._wall_before = 0.0
        self._first_loss: float | None = None  # step 1's loss: where the divergence line starts (_restore sets it)
        if self.resume:
            done = self.completed_summary()
            if done is not None:
                return {**done, "already_complete": True}
        self._cpu_settings = None
        try:
            check_loggers(self.cfg.train)  # a missing tensorboard / wandb package: one line, nothing written
            self._setup()
            self._check_callbacks()
            self._prepare_run_dir()
            lock = RunLock(self.run_dir) if self.dist.is_main else contextlib.nullcontext()
            try:
                with lock, self._signals():
                    if self.resume:
                        self._restore()
                    self._write_run_files()
                    return self._loop()
            finally:
                dist_utils.teardown()
        finally:
            restore_cpu_process(self._cpu_settings)  # the caller's thread gets IEEE subnormals back (train/host.py)

    @contextlib.contextmanager
    def _signals(self):
        """SIGINT/SIGTERM set a flag that the loop honours at the next step boundary (checkpoint, then
        :class:`Interrupted`); a second SIGINT interrupts at once — unless it comes within
        :data:`SAME_STOP_SECONDS` of the first: Ctrl-C under a sweep reaches a run twice (the terminal signals the
        whole process group and the runner forwards its own), and that is still one request to stop cleanly.
        Only in the main thread."""
        self._stop_signal: int | None = None
        first = [0.0]
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def handler(signum, frame):
            if self._stop_signal is not None:
                if signum == signal.SIGINT and time.monotonic() - first[0] > SAME_STOP_SECONDS:
                    raise KeyboardInterrupt
                return
            self._stop_signal = signum
            first[0] = time.monotonic()

        old = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, h in old.items():
                signal.signal(sig, h)

    def _loop(self) -> dict[str, Any]:
        c = self.cfg
        main = self.dist.is_main
        metrics_f = open(self.run_dir / "metrics.jsonl", "a") if main else None
        progress = Progress(c.train.max_steps, self.step, enabled=c.train.progress and main,
                            seconds=c.train.progress_seconds)
        bar = progress
        def divergence_line() -> float:  # max(ln V, L1) + margin (module docstring)
            return max(math.log(self.model_cfg.vocab_size), self._first_loss or 0.0) + c.train.diverge_margin

        threshold = divergence_line()
        streak = 0  # consecutive steps with loss above `threshold`
        self.model.train()
        self._callbacks("on_train_start")
        flops_tok = self.model.flops_per_token(c.data.seq_len)
        tokens_per_step = c.train.batch_size * c.data.seq_len
        interval_time, interval_steps = 0.0, 0
        last_record: dict[str, Any] = {}
        val_loss = None
        # experiment trackers (TensorBoard, W&B: train/loggers.py) attach here, from outside the model, on rank 0
        try:
            trackers = open_loggers(c, self.run_dir) if main else []
        except BaseException:
            bar.close()
            if metrics_f:
                metrics_f.close()
            raise
        exit_code = 1  # what the trackers are told when the loop stops early (W&B marks the run failed)
        try:
            while self.step < c.train.max_steps:
                t0 = time.perf_counter()
                try:
                    out = self.train_step()
                except DivergenceError as e:
                    self._write_diverged("non-finite", self.step + 1, self.step + 1, None, threshold, str(e))
                    raise
                if self.device.type == "cuda":
                    torch.cuda.synchronize()
                interval_time += time.perf_counter() - t0
                interval_steps += 1
                s = self.step
                is_last = s == c.train.max_steps
                record: dict[str, Any] = {}
                if self._first_loss is None and s == 1 and math.isfinite(out["loss"]):
                    self._first_loss = float(out["loss"])
                    threshold = divergence_line()
                streak = streak + 1 if out["loss"] > threshold else 0
                if s % c.train.log_every == 0 or is_last or s % c.train.eval_every == 0 or \
                        (c.train.diverge_steps and streak >= c.train.diverge_steps):
                    tps = interval_steps * tokens_per_step / max(interval_time, 1e-9)
                    record = {"step": s, "tokens": self.tokens_seen, "loss": out["loss"], "lr": out["lr"],
                              "grad_norm": out["grad_norm"], "tokens_per_s": tps, "gflops_per_s": tps * flops_tok / 1e9}
                    if self.model_cfg.moe.enabled:
                        record["aux_loss"] = out["aux_loss"]
                    interval_time, interval_steps = 0.0, 0
                if s % c.train.eval_every == 0 or is_last:
                    val_loss = self.evaluate()
                    record["val_loss"] = val_loss
                    if c.data.tune_batches:
                        record["tune_loss"] = self.evaluate(c.data.tune_batches, skip_batches=c.data.val_batches)
                if record:
                    record["wall_time"] = self.wall_time()
                    self._callbacks("on_step_end", s, record)
                    if main:
                        metrics_f.write(json.dumps(record) + "\n")
                        metrics_f.flush()
                        for lg in trackers:
                            lg.log(s, record)
                    last_record = record
                bar.update(s, out["loss"], record)
                if c.train.diverge_steps and streak >= c.train.diverge_steps:
                    first = s - streak + 1
                    kept = latest_good_checkpoint(self.run_dir) if main else None
                    msg = (f"the loss diverged: above max(ln V, first-step loss) + {c.train.diverge_margin:g} = "
                           f"{threshold:.2f} for "
                           f"{streak} consecutive steps from step {first} (loss {out['loss']:.4g} at step {s}); "
                           "stopped; " + (f"the newest checkpoint from before it is kept ({kept.name})" if kept else
                                          "no checkpoint was written before it") + "; lower optim.lr")
                    self._write_diverged("diverged", first, s, out["loss"], threshold, msg)
                    raise DivergenceError(msg)
                # no checkpoint while the loss is above the divergence line: pruning then cannot remove the
                # newest checkpoint from before a divergence (the last step is always saved)
                if (s % c.train.ckpt_every == 0 or s in c.train.ckpt_steps) and streak == 0 or is_last:
                    self.save()
                if self._should_stop():
                    self._interrupted(streak)
            exit_code = 0
        except Interrupted as e:
            exit_code = 128 + e.signum
            raise
        finally:
            bar.close()
            if metrics_f:
                metrics_f.close()
            close_all(trackers, exit_code)
        self._callbacks("on_train_end")
        summary = {"completed": True, "step": self.step, "tokens": self.tokens_seen, "final_loss": last_record.get("loss"),
                   "final_val_loss": val_loss, "wall_time": self.wall_time(),
                   "params": self.model.num_params(), "non_embedding_params": self.model.num_params(non_embedding=True),
                   "active_params": self.model.num_params(active=True), "dtype": c.train.dtype,
                   "dtype_reason": self.dtype_decision.reason}
        summary = self._fill_summary(summary)
        if main:
            atomic_write_json(self.run_dir / "summary.json", summary)
            (self.run_dir / "diverged.json").unlink(missing_ok=True)  # completed after all (resumed past it)
        return summary

    def _fill_summary(self, summary: dict[str, Any]) -> dict[str, Any]:
        """``summary`` with every None taken from values that exist: the last logged loss / val_loss of
        metrics.jsonl, else the previous summary.json; a key with no value anywhere is left out, never null."""
        recs = read_jsonl(self.run_dir / "metrics.jsonl")
        try:
            prev = json.loads((self.run_dir / "summary.json").read_text())
            prev = prev if isinstance(prev, dict) else {}
        except (OSError, ValueError):
            prev = {}
        logged = {"final_loss": "loss", "final_val_loss": "val_loss"}
        out = {}
        for k, v in summary.items():
            if v is None and k in logged:
                v = next((r[logged[k]] for r in reversed(recs)
                          if isinstance(r.get(logged[k]), (int, float)) and r.get("step", 0) <= self.step), None)
            if v is None:
                v = prev.get(k)
            if v is not None:
                out[k] = v
        return out

    def _write_diverged(self, kind: str, first: int, stopped: int, loss: float | None, threshold: float,
                        message: str) -> None:
        if not self.dist.is_main:
            return
        good = latest_good_checkpoint(self.run_dir)
        atomic_write_json(self.run_dir / "diverged.json", {
            "kind": kind, "step": first, "stopped_at": stopped, "loss": loss if loss is None or math.isfinite(loss)
            else None, "threshold": threshold,
            "rule": f"loss > max(ln V, first-step loss) + {self.cfg.train.diverge_margin:g} for "
                    f"{self.cfg.train.diverge_steps} consecutive steps, or a non-finite loss/gradient",
            "checkpoint": good.name if good else None, "message": message})

    def _should_stop(self) -> bool:
        flag = getattr(self, "_stop_signal", None) is not None
        if self.dist.enabled:  # every rank stops at the same step
            t = torch.tensor([1.0 if flag else 0.0], device=self.device)
            torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
            flag = bool(t.item())
        return flag

    def _interrupted(self, streak: int) -> None:
        """Save a checkpoint at this step boundary (unless the loss is above the divergence line) and raise
        :class:`Interrupted`."""
        signum = self._stop_signal or signal.SIGTERM
        ckpts = list_checkpoints(self.run_dir)
        saved = ckpts[-1] if ckpts and ckpts[-1].name.endswith(f"{self.step:08d}") else None
        if saved is None and streak == 0:
            saved = self.save()
        name = signal.Signals(signum).name
        where = (f"checkpoint saved at step {self.step} ({saved})" if saved is not None else
                 "no checkpoint written (loss above the divergence line); resume starts from the last one")
        raise Interrupted(f"interrupted by {name} at step {self.step}: {where}; continue with "
                          f"`smallinit train --resume {self.run_dir}`", int(signum), self.step,
                          str(saved) if saved else None)


class Progress:
    """Training progress on stderr: a tqdm bar on a terminal; otherwise (a log file) a plain line
    ``step S/N (P%) loss L [val V] tok/s R elapsed E eta T`` at the first step, at evaluated steps, at the last
    step and at most every ``seconds`` in between — never carriage returns."""

    def __init__(self, total: int, initial: int, enabled: bool, seconds: float = 30.0, stream=None):
        self.total, self.enabled, self.seconds = total, enabled, seconds
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.start_step, self.t0, self.last = initial, time.time(), None
        self.bar = None
        if enabled and self.tty:
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=initial, unit="step", dynamic_ncols=True, leave=True, file=self.stream)

    def update(self, step: int, loss: float, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            if record:
                self.bar.set_postfix(loss=f"{loss:.3f}", tok_s=f"{record.get('tokens_per_s', 0):.0f}", refresh=False)
            self.bar.update(1)
            return
        now = time.time()
        due = (self.last is None or step == self.total or "val_loss" in record
               or now - self.last >= self.seconds)
        if not due:
            return
        self.last = now
        el = now - self.t0
        done = step - self.start_step
        eta = el / done * (self.total - step) if done > 0 else float("nan")
        val = f" val {record['val_loss']:.4f}" if "val_loss" in record else ""
        tps = f" tok/s {record['tokens_per_s']:.0f}" if "tokens_per_s" in record else ""
        print(f"step {step}/{self.total} ({100 * step / max(self.total, 1):.0f}%) loss {loss:.4f}{val}{tps} "
              f"elapsed {_hms(el)} eta {_hms(eta)}", file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _hms(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    s = int(round(seconds))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def train(cfg: RunConfig, run_dir: str | os.PathLike, callbacks: list[Any] | None = None) -> dict[str, Any]:
    """Train a new run (see :class:`Trainer`)."""
    return Trainer(cfg, run_dir, callbacks=callbacks).run()


SAME_STOP_SECONDS = 2.0
"""A second stop signal this soon after the first is the same request (:meth:`Trainer._signals`)."""


def resume(run_dir: str | os.PathLike, callbacks: list[Any] | None = None, max_steps: int | None = None) -> dict[str, Any]:
    """Continue the run in ``run_dir`` from its last good checkpoint (optionally to a new ``max_steps``)."""
    return Trainer(None, run_dir, resume=True, callbacks=callbacks, max_steps=max_steps).run()
