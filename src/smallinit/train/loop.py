"""The pretraining loop: AdamW, warmup + cosine/WSD, clipping, accumulation, bf16 autocast, compile,
validation, atomic checkpoints, exact resume, a divergence guard and optional DDP/FSDP2.

    trainer = Trainer(load_config("tiny", ["train.max_steps=100"]), "runs/tiny")
    summary = trainer.run()

Everything a run produces lives in its directory: ``config.yaml``, ``origin.json`` (the folder ``train`` ran in: a
relative ``data.path`` resolves from it when the run is resumed elsewhere), ``tokenizer.json``, ``metrics.jsonl``,
``checkpoints/``, ``summary.json`` (written when the run completes), ``diverged.json`` (written when the run
stopped on a non-finite or diverged loss), the experiment trackers' files (``tb/``; ``wandb/`` and ``wandb.json``:
:mod:`smallinit.train.loggers`) and whatever callbacks (probes) add.

``Trainer.run()`` is the loop: build (:meth:`Trainer._setup`), resume, then for each step: batch →
forward/backward → clip → optimizer step (:meth:`Trainer.train_step`) → log / evaluate / checkpoint
(:meth:`Trainer._loop`), then the summary. The pieces around it, one job each (their functions take the trainer
as first argument):

    checks         everything checkable before the first step (data, memory, callbacks); a failing check leaves
                   no folder behind
    run_dir        the run lock (RunLock), the output folder, the files written at the start
    checkpointing  save, restore (exact resume), metrics.jsonl cut back to the resumed step
    validation     val_loss / tune_loss
    divergence     the divergence watch (max(ln V, L₁) + train.diverge_margin) and diverged.json
    signals        SIGINT/SIGTERM: the step in progress finishes, a checkpoint is written, and
                   :class:`~smallinit.core.errors.Interrupted` is raised (``smallinit train`` then exits 130 / 143)
    progress       the progress bar / line on stderr
    summary        summary.json

Callbacks are duck-typed objects with any of ``on_train_start(trainer)``,
``on_loss(trainer, step, loss) -> loss``, ``on_before_optimizer_step(trainer, step)``,
``on_step_end(trainer, step, record)`` and ``on_train_end(trainer)``.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from pathlib import Path
from typing import Any

import torch

from smallinit.config import RunConfig, config_from_dict
from smallinit.core.device import resolve_device as _resolve_device
from smallinit.core.errors import ConfigError, DataError, DivergenceError, Interrupted, RunDirError
from smallinit.model import ModelConfig, Transformer
from smallinit.model.moe import update_expert_bias
from smallinit.runs.rundir import data_mismatch, run_data_path
from smallinit.train import distributed as dist_utils
from smallinit.train.checkpointing import restore, save
from smallinit.train.checks import check_callbacks, check_data, check_memory, machine_memory, memory_estimate
from smallinit.train.compile import compile_module, resolve_compile
from smallinit.train.divergence import DivergenceWatch
from smallinit.train.host import prepare_cpu_process, restore_cpu_process
from smallinit.train.loggers import check_available as check_loggers
from smallinit.train.loggers import close_all, open_loggers
from smallinit.train.progress import Progress
from smallinit.train.run_dir import RunLock, prepare_run_dir, write_run_files
from smallinit.train.schedule import lr_at
from smallinit.train.signals import SAME_STOP_SECONDS, interrupt, should_stop, stop_signals
from smallinit.train.summary import completed_summary, write_summary
from smallinit.train.validation import eval_losses, evaluate

__all__ = [
    "Progress",
    "RunLock",
    "SAME_STOP_SECONDS",
    "Trainer",
    "machine_memory",
    "memory_estimate",
    "param_groups",
    "resolve_device",
    "resume",
    "train",
]


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


class Trainer:
    """Owns one run directory; ``run()`` trains to ``train.max_steps`` (resuming if asked) and returns a summary."""

    def __init__(
        self,
        cfg: RunConfig | None,
        run_dir: str | os.PathLike,
        resume: bool = False,
        callbacks: list[Any] | None = None,
        max_steps: int | None = None,
        allow_change: list[str] | None = None,
    ):
        """``max_steps`` (resume only) extends the run; a value below the run's own ``train.max_steps`` is a
        ConfigError (a run is never shortened: its schedule and summary belong to that budget). ``allow_change``
        (resume only) names the dotted config keys that may differ from the checkpoint's copy (any other difference
        is refused; the allowed ones are recorded: :mod:`smallinit.runs.config_changes`)."""
        from smallinit.runs.config_changes import check_allow_names

        self.run_dir = Path(run_dir)
        self.resume = resume
        self.callbacks = list(callbacks or [])
        self.allow_change = check_allow_names(list(allow_change or []))
        if self.allow_change and not resume:
            raise ConfigError("allow_change goes with resume: a new run has no checkpoint to differ from")
        by = [f"--allow-change {','.join(self.allow_change)}"] if self.allow_change else []
        self.change_by = " ".join(["train --resume", *by, *([f"--max-steps {max_steps}"] if max_steps else [])])
        if resume:
            cfg_path = self.run_dir / "config.yaml"
            if not cfg_path.is_file():
                raise RunDirError(f"{self.run_dir}: nothing to resume (no config.yaml)")
            from smallinit.config import read_config_file

            raw = read_config_file(cfg_path)
            if not raw.get("model") or not raw.get("data"):  # a run always writes every section
                raise RunDirError(
                    f"{cfg_path}: has no model/data sections (emptied or truncated?); the newest "
                    f"checkpoint keeps a copy: see `smallinit doctor {self.run_dir}`"
                )
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
                raise ConfigError(
                    f"--max-steps {max_steps} is below the run's train.max_steps "
                    f"{cfg.train.max_steps}; --max-steps only extends a run"
                )
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
            raise ConfigError(
                f"train.batch_size={c.train.batch_size} must be divisible by world_size={W} × micro_batch_size={mb}"
            )
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
        check_data(self)  # before the folder exists (train/checks.py)
        check_memory(self)
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
            param_groups(model, c.optim.weight_decay, c.optim.decay_embeddings),
            lr=c.optim.lr,
            betas=tuple(c.optim.betas),
            eps=c.optim.eps,
            fused=True,
        )
        # train.compile "auto": on only where the run repays the compile (rule and measurement: train/compile.py)
        self.compiled = resolve_compile(c.train.compile, self.device, c.train.max_steps, c.model.moe.enabled)
        self.forward = compile_module(self.wrapped) if self.compiled else self.wrapped

    def save(self) -> Path | None:
        """Write a checkpoint of the current step (collective under FSDP; rank 0 writes; train/checkpointing.py)."""
        return save(self)

    def completed_summary(self) -> dict[str, Any] | None:
        """The run's summary.json when the run is complete at ``train.max_steps``, else None (train/summary.py)."""
        return completed_summary(self)

    # ---- the loop -------------------------------------------------------------------------------------
    @property
    def tokens_seen(self) -> int:
        return self.step * self.cfg.train.batch_size * self.cfg.data.seq_len

    def wall_time(self) -> float:
        return self._wall_before + (time.time() - self._t_start)

    def evaluate(self, n_batches: int | None = None, skip_batches: int = 0) -> float:
        """Mean next-token loss over a fixed, ordered set of validation windows (train/validation.py)."""
        return evaluate(self, n_batches, skip_batches)

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
            raise DivergenceError(
                f"non-finite {what} at step {self.step + 1} (loss={loss_v}, grad_norm={gn}); "
                f"stopped before the optimizer step; the last good checkpoint is kept"
            )
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if c.model.moe.enabled and c.model.moe.bias_update_rate > 0:  # MoE aux-loss-free balancing
            update_expert_bias(self.model)
        self.step += 1
        return {"loss": loss_v, "grad_norm": gn, "lr": lr, "aux_loss": aux_v}

    def run(self) -> dict[str, Any]:
        """Train to ``train.max_steps``; returns the summary. Resuming a run that is already complete at its
        ``max_steps`` changes nothing and returns its summary with ``"already_complete": True``."""
        self._t_start = time.time()
        self._wall_before = 0.0
        self._first_loss: float | None = None  # step 1's loss: where the divergence line starts (restore sets it)
        if self.resume:
            done = self.completed_summary()
            if done is not None:
                return {**done, "already_complete": True}
        self._cpu_settings = None
        try:
            check_loggers(self.cfg.train)  # a missing tensorboard / wandb package: one line, nothing written
            self._setup()
            check_callbacks(self)
            prepare_run_dir(self)
            lock = RunLock(self.run_dir) if self.dist.is_main else contextlib.nullcontext()
            try:
                with lock, stop_signals(self):  # SIGINT/SIGTERM: stop at the next step boundary (train/signals.py)
                    if self.resume:
                        restore(self)  # the newest good checkpoint, exactly (train/checkpointing.py)
                    write_run_files(self)
                    return self._loop()
            finally:
                dist_utils.teardown()
        finally:
            restore_cpu_process(self._cpu_settings)  # the caller's thread gets IEEE subnormals back (train/host.py)

    def _loop(self) -> dict[str, Any]:
        c = self.cfg
        main = self.dist.is_main
        metrics_f = open(self.run_dir / "metrics.jsonl", "a") if main else None
        bar = Progress(
            c.train.max_steps, self.step, enabled=c.train.progress and main, seconds=c.train.progress_seconds
        )
        watch = DivergenceWatch(self)  # the divergence line and the streak of steps above it (train/divergence.py)
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
                    watch.non_finite(e)  # diverged.json
                    raise
                if self.device.type == "cuda":
                    torch.cuda.synchronize()
                interval_time += time.perf_counter() - t0
                interval_steps += 1
                s = self.step
                is_last = s == c.train.max_steps
                record: dict[str, Any] = {}
                watch.observe(s, out["loss"])
                if s % c.train.log_every == 0 or is_last or s % c.train.eval_every == 0 or watch.diverged:
                    tps = interval_steps * tokens_per_step / max(interval_time, 1e-9)
                    record = {
                        "step": s,
                        "tokens": self.tokens_seen,
                        "loss": out["loss"],
                        "lr": out["lr"],
                        "grad_norm": out["grad_norm"],
                        "tokens_per_s": tps,
                        "gflops_per_s": tps * flops_tok / 1e9,
                    }
                    if self.model_cfg.moe.enabled:
                        record["aux_loss"] = out["aux_loss"]
                    interval_time, interval_steps = 0.0, 0
                if s % c.train.eval_every == 0 or is_last:
                    record.update(eval_losses(self))  # val_loss (+ tune_loss): train/validation.py
                    val_loss = record["val_loss"]
                if record:
                    self._log(s, record, metrics_f, trackers)
                    last_record = record
                bar.update(s, out["loss"], record)
                if watch.diverged:
                    watch.stop(s, out["loss"])  # diverged.json, then DivergenceError
                # no checkpoint while the loss is above the divergence line: pruning then cannot remove the
                # newest checkpoint from before a divergence (the last step is always saved)
                if (s % c.train.ckpt_every == 0 or s in c.train.ckpt_steps) and watch.streak == 0 or is_last:
                    self.save()
                if should_stop(self):
                    interrupt(self, watch.streak)  # a checkpoint at this boundary, then Interrupted
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
        return write_summary(self, last_record, val_loss)  # summary.json (train/summary.py)

    def _log(self, step: int, record: dict[str, Any], metrics_f, trackers: list) -> None:
        """Stamp ``record`` with the wall time, show it to the callbacks (``on_step_end``), then append it to
        ``metrics.jsonl`` and hand it to the experiment trackers (rank 0: ``metrics_f`` is None elsewhere)."""
        record["wall_time"] = self.wall_time()
        self._callbacks("on_step_end", step, record)
        if self.dist.is_main:
            metrics_f.write(json.dumps(record) + "\n")
            metrics_f.flush()
            for lg in trackers:
                lg.log(step, record)


def train(cfg: RunConfig, run_dir: str | os.PathLike, callbacks: list[Any] | None = None) -> dict[str, Any]:
    """Train a new run (see :class:`Trainer`)."""
    return Trainer(cfg, run_dir, callbacks=callbacks).run()


def resume(
    run_dir: str | os.PathLike,
    callbacks: list[Any] | None = None,
    max_steps: int | None = None,
    allow_change: list[str] | None = None,
) -> dict[str, Any]:
    """Continue the run in ``run_dir`` from its last good checkpoint (optionally to a new ``max_steps``; with
    ``allow_change``, the config keys that may differ from the checkpoint's: see :class:`Trainer`)."""
    return Trainer(
        None, run_dir, resume=True, callbacks=callbacks, max_steps=max_steps, allow_change=allow_change
    ).run()
