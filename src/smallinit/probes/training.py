"""Training-time probes: one forward on a fixed probe batch, observed from outside through hooks.

    record = compute_probes(model, idx)                 # one JSON-able dict (definitions: DESIGN.md §2)
    trainer = Trainer(cfg, run_dir, callbacks=probe_callbacks(cfg.probe))  # [TrainingProbe(cfg.probe)] or []
    attach(trainer)                                     # the same for a trainer already built (a resumed run)

``compute_probes`` attaches forward hooks to the model (pre-hooks on every norm for its input h,
a pre-hook on every attention for (x, cos, sin) → ``Attention.attention_weights``, hooks on the
attention / MLP branches for their outputs, hooks on the blocks for the residual stream), runs one
forward under ``torch.no_grad()``, and removes every hook again (``try/finally``); the forward's
result is the model's own. It returns, per layer i (``record["layers"][i]``):

- ``sink``        attention-sink share: mean over batch, heads and queries t >= 1 of attn[..., t, 0]
                  (compare with ``record["uniform_sink"]`` = (H_T - 1)/(T - 1) ≈ (ln T)/T)
- ``max_act``     massive activation: max |h| of the residual stream after block i
- ``attn_norm``, ``mlp_norm``: RMSNorm saturation of the norm's input h: ``saturation`` = mean_t
                  ms_t/(ms_t + ε), ``eps_over_ms`` = mean_t ε/ms_t, ``mean_square`` = mean_t ms_t
                  (ms_t = mean(h_t²)), and ``eps`` (ε of that norm). For a LayerNorm, h is centred
                  first (ms = variance), which is the same ε-versus-signal ratio.
- ``flow_attn``, ``flow_mlp``: residual flow mean_t ||F(norm(h_t))|| / ||h_t||, h the stream the branch
                  reads (and is added to)

plus ``final_norm`` (the same saturation dict for the norm before the head), ``emb_max_act``
(max |h| of the token embeddings) and, per weight matrix (``record["matrices"][name]``):
``srank`` = ||W||_F²/||W||_2² (power iteration unless ``exact_srank``), ``cond`` = mean_{i≠j} |C_ij| of the
row cosines (≤ 1024 rows sampled) and ``d_in`` (the random-rows reference is sqrt(2/(π d_in))).
Matrix names are ``<module path>.<logical name>`` from each module's ``matrices()`` — e.g.
``blocks.0.attn.q``, ``blocks.0.attn.gate``, ``blocks.0.mlp.down``, ``blocks.1.mlp.router``,
``blocks.1.mlp.expert3.up`` — plus ``tok_emb`` and, when untied, ``lm_head``. MoE models also get
``record["moe"]`` = ``smallinit.model.moe.moe_stats`` of the probe forward (expert token fractions,
router entropy, dead experts).

The trainer callback adds ``record["optim_eps"]`` (:func:`optimizer_eps_probes`, from the optimizer state, not
the model): AdamW's ``eps``, its step count ``t`` and, per weight matrix (same names), the share of entries with
√v̂ < ε (``frac_below``), the mean damping ε/(√v̂ + ε) (``damping``) and the median √v̂ (``median_sqrt_v``),
v̂ = exp_avg_sq / (1 − β2^t): the second moment the update that produced the probed weights used (at step s,
update s; after update 1, √v̂ = |first gradient|). ``matrices`` is empty at step 0 (no update yet) and the
section is ``null`` under FSDP (sharded state).

Non-finite numbers (a diverged run) are written as ``null``.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from smallinit.core.io import json_safe
from smallinit.probes.matrices import _weight_probes, matrix_kind, named_matrices, optimizer_eps_probes
from smallinit.probes.metrics import (
    attention_sink,
    max_activation,
    order_rows_for_heatmap,
    residual_flow,
    rmsnorm_saturation,
    row_cosine,
    uniform_sink_baseline,
)
from smallinit.runs.rundir import HEATMAP_DIR, PROBES_FILE, read_heatmaps, read_probes

HEATMAP_MAX_ROWS = 256

__all__ = [
    "HEATMAP_DIR",
    "PROBES_FILE",
    "TrainingProbe",
    "attach",
    "compute_probes",
    "early_probe_steps",
    "heatmap_arrays",
    "heatmap_steps",
    "matrix_kind",
    "named_matrices",
    "optimizer_eps_probes",
    "probe_batch",
    "probe_callbacks",
    "read_heatmaps",
    "read_probes",
    "save_heatmaps",
]


# ---- activations ---------------------------------------------------------------------------------


def _saturation(norm: nn.Module, h: torch.Tensor) -> dict[str, float]:
    eps = float(getattr(norm, "eps", 0.0))
    if not hasattr(norm, "bias") or getattr(norm, "bias", None) is None:
        s = rmsnorm_saturation(h, eps)
    else:  # LayerNorm: ε competes with the variance, i.e. the mean square of the centred input
        s = rmsnorm_saturation(h.float() - h.float().mean(dim=-1, keepdim=True), eps)
    return {**s, "eps": eps}


def _args_of(args: tuple, kwargs: dict, names: tuple[str, ...]) -> list[Any]:
    """Positional-or-keyword arguments of a hooked call, by name."""
    return [args[i] if i < len(args) else kwargs[n] for i, n in enumerate(names)]


def compute_probes(
    model: nn.Module,
    idx: torch.Tensor,
    *,
    exact_srank: bool = False,
    autocast: contextlib.AbstractContextManager | None = None,
    weights: bool = True,
) -> dict[str, Any]:
    """All probes of DESIGN.md §2 for ``model`` on the token batch ``idx`` (B, T) (see the module docstring).

    The model must be a :class:`~smallinit.model.Transformer` (``tok_emb``, ``blocks[i]`` with
    ``attn_norm``/``attn``/``mlp_norm``/``mlp``, ``norm_f``). Hooks are registered for one forward
    and removed in a ``finally``; MoE layers' ``aux_loss``/``last_stats`` are restored afterwards, so
    the model is left exactly as found. ``autocast`` (e.g. ``trainer.autocast()``) wraps the forward
    so that activations are those training sees. ``weights=False`` skips the per-matrix probes.
    """
    L = len(model.blocks)
    T = int(idx.shape[1])
    device = next(model.parameters()).device
    idx = idx.to(device)
    layers: list[dict[str, Any]] = [{} for _ in range(L)]
    pending: dict[tuple[int, str], torch.Tensor] = {}  # residual input h awaiting its branch output
    found: dict[str, Any] = {}
    handles: list[Any] = []
    moe_saved = [(m, m.aux_loss, m.last_stats) for m in model.modules() if hasattr(m, "last_stats")]
    t0 = time.perf_counter()
    try:
        _register_activation_hooks(model, T, layers, pending, found, handles)
        with torch.no_grad(), autocast if autocast is not None else contextlib.nullcontext():
            model(idx)
        moe = {}
        if moe_saved:
            try:
                from smallinit.model.moe import moe_stats
            except ImportError:  # pragma: no cover - MoE module absent
                moe_stats = None
            if moe_stats is not None:
                moe = moe_stats(model)
    finally:
        for h in handles:
            h.remove()
        pending.clear()
        for m, aux, stats in moe_saved:
            m.aux_loss, m.last_stats = aux, stats
    t_act = time.perf_counter() - t0
    record: dict[str, Any] = {
        "T": T,
        "batch": int(idx.shape[0]),
        "uniform_sink": uniform_sink_baseline(T) if T >= 2 else None,
        "emb_max_act": found.get("emb_max_act"),
        "layers": [{"layer": i, **layers[i]} for i in range(L)],
        "final_norm": found.get("final_norm"),
    }
    if weights:
        t1 = time.perf_counter()
        record["matrices"] = _weight_probes(model, exact_srank)
        record["seconds_weights"] = time.perf_counter() - t1
    if moe:
        record["moe"] = moe
    record["seconds_activations"] = t_act
    return json_safe(record)


def _register_activation_hooks(
    model: nn.Module,
    T: int,
    layers: list[dict[str, Any]],
    pending: dict[tuple[int, str], torch.Tensor],
    found: dict[str, Any],
    handles: list[Any],
) -> None:
    """Hooks that fill ``layers[i]`` (norm saturation, attention sink, residual flow of each branch, max
    activation) and ``found`` (embedding max activation, final-norm saturation) during one forward; each handle is
    appended to ``handles`` as it is registered, so the caller removes every one even if registering fails."""

    def norm_pre(i: int | None, which: str, norm: nn.Module):
        def hook(mod, args):
            h = args[0]
            if i is None:
                found["final_norm"] = _saturation(norm, h)
            else:
                layers[i][which] = _saturation(norm, h)
                pending[(i, which)] = h

        return hook

    def attn_pre(i: int):
        def hook(mod, args, kwargs):
            x, cos, sin = _args_of(args, kwargs, ("x", "cos", "sin"))
            layers[i]["sink"] = attention_sink(mod.attention_weights(x, cos, sin)) if T >= 2 else None

        return hook

    def branch_out(i: int, norm_name: str, key: str):
        def hook(mod, args, out):
            h = pending.pop((i, norm_name), None)
            if h is not None:
                layers[i][key] = residual_flow(out, h)

        return hook

    def block_out(i: int):
        def hook(mod, args, out):
            layers[i]["max_act"] = max_activation(out)

        return hook

    def emb_out(mod, args, out):
        found["emb_max_act"] = max_activation(out)

    handles.append(model.tok_emb.register_forward_hook(emb_out))
    for i, b in enumerate(model.blocks):
        handles.append(b.attn_norm.register_forward_pre_hook(norm_pre(i, "attn_norm", b.attn_norm)))
        handles.append(b.mlp_norm.register_forward_pre_hook(norm_pre(i, "mlp_norm", b.mlp_norm)))
        handles.append(b.attn.register_forward_pre_hook(attn_pre(i), with_kwargs=True))
        handles.append(b.attn.register_forward_hook(branch_out(i, "attn_norm", "flow_attn")))
        handles.append(b.mlp.register_forward_hook(branch_out(i, "mlp_norm", "flow_mlp")))
        handles.append(b.register_forward_hook(block_out(i)))
    handles.append(model.norm_f.register_forward_pre_hook(norm_pre(None, "final_norm", model.norm_f)))


def probe_batch(val_tokens: np.ndarray, seq_len: int, batch_size: int, bos_id: int | None = None) -> torch.Tensor:
    """The fixed probe batch: the first ``batch_size`` validation windows (in order, BOS-prefixed when
    training uses BOS), as int64 (B, T). The same tokens at every probed step and in ``smallinit probe``."""
    from smallinit.data import val_batches

    x, _ = next(iter(val_batches(val_tokens, seq_len, batch_size, max_batches=1, bos_id=bos_id)))
    return x


# ---- heatmaps ------------------------------------------------------------------------------------


def early_probe_steps(every: int) -> list[int]:
    """The log-spaced early probe steps 1, 2, 5, 10, 20, 50, 100, … (1-2-5 per decade) strictly below ``every``:
    condensation happens in the first updates (DESIGN.md §2, "Row cosine similarity"), which a uniform schedule
    alone (every 100 steps, say) never sees. Empty when probes are off (``every`` ≤ 0). With ``every`` = 100 the
    probed steps are 0, 1, 2, 5, 10, 20, 50, 100, 200, …"""
    out, decade = [], 1
    while every > 0:
        for m in (1, 2, 5):
            s = m * decade
            if s >= every:
                return out
            out.append(s)
        decade *= 10
    return out


def heatmap_steps(max_steps: int) -> list[int]:
    """Log-spaced steps at which heatmaps are saved: 0, 1, 2, 4, 8, ... (< max_steps) and max_steps."""
    steps = {0, int(max_steps)}
    k = 1
    while k < max_steps:
        steps.add(k)
        k *= 2
    return sorted(steps)


def heatmap_arrays(W: torch.Tensor, max_rows: int = HEATMAP_MAX_ROWS) -> dict[str, np.ndarray]:
    """The row-cosine matrix of ``W`` (DESIGN.md §2) on at most ``max_rows`` rows, ready to draw.

    Rows: all of them when out <= max_rows, else a fixed subset (seeded randperm, sorted), the same
    at every step. Returns ``cos`` (float16, rows × rows, in the original row order), ``rows`` (row
    indices into W) and ``order`` (a permutation from ``order_rows_for_heatmap`` on those rows of W:
    sorted by projection on the leading singular vector, so aligned rows form visible blocks).
    """
    W = W.detach().float().cpu()
    n = W.shape[0]
    if n > max_rows:
        gen = torch.Generator().manual_seed(0)
        rows = torch.randperm(n, generator=gen)[:max_rows].sort().values
    else:
        rows = torch.arange(n)
    sub = W.index_select(0, rows)
    return {
        "cos": row_cosine(sub).numpy().astype(np.float16),
        "rows": rows.numpy().astype(np.int32),
        "order": order_rows_for_heatmap(sub).numpy().astype(np.int32),
    }


def _heatmap_path(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / HEATMAP_DIR / f"step_{step:08d}.npz"


def save_heatmaps(
    model: nn.Module, names: list[str], run_dir: str | Path, step: int, max_rows: int = HEATMAP_MAX_ROWS
) -> Path:
    """Write ``RUN_DIR/heatmaps/step_XXXXXXXX.npz`` (compressed, atomically) with, for every matrix name,
    ``<name>/cos``, ``<name>/rows``, ``<name>/order`` (see :func:`heatmap_arrays`)."""
    import io

    from smallinit.core.io import atomic_write_bytes

    mats = named_matrices(model)
    arrays = {}
    for name in names:
        for k, v in heatmap_arrays(mats[name], max_rows).items():
            arrays[f"{name}/{k}"] = v
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    path = _heatmap_path(Path(run_dir), step)
    atomic_write_bytes(path, buf.getvalue())
    return path


# ---- the callback --------------------------------------------------------------------------------


class TrainingProbe:
    """Trainer callback: probes at step 0, at the log-spaced early steps below ``cfg.every``
    (:func:`early_probe_steps`: 1, 2, 5, 10, 20, 50, …; on whenever probes are, ``early=False`` turns them off),
    every ``cfg.every`` steps and at the last step; heatmaps at :func:`heatmap_steps`.

    Each probed step appends one line ``{"step": s, "tokens": ..., **compute_probes(...)}`` to
    ``RUN_DIR/probes.jsonl``; heatmaps go to ``RUN_DIR/heatmaps/step_XXXXXXXX.npz``. Step s means
    the weights after s optimizer updates (as in metrics.jsonl). The work happens in
    ``on_before_optimizer_step(trainer, s)`` (called every step, after the backward of step s + 1 and
    before its update, so the weights are still those after s updates), in ``on_train_start`` for the
    first step (0, or the step a resumed run starts from: always probed) and in ``on_train_end`` for
    the last. The decision to probe depends on the step only, so every rank takes the same one:
    under FSDP every rank calls ``trainer.full_model()`` (a collective) and rank 0 computes (on the
    training device) and writes; under DDP and single process the live model is probed directly.
    On resume from step S, lines and heatmaps with step > S are dropped before training continues
    (and those of S itself rewritten from the same weights).

    Cost: one forward of ``cfg.batch_size`` sequences with the attention pattern made explicit
    (B·H·T² floats per layer, transiently), plus stable rank and condensation of every matrix.
    """

    def __init__(
        self,
        cfg: Any = None,
        every: int | None = None,
        batch_size: int | None = None,
        heatmaps: list[str] | None = None,
        exact_srank: bool | None = None,
        early: bool | None = None,
    ):
        def pick(v, name, default):
            return v if v is not None else getattr(cfg, name, default)

        self.every = int(pick(every, "every", 0))
        self.batch_size = int(pick(batch_size, "batch_size", 4))
        self.heatmaps = list(pick(heatmaps, "heatmaps", []) or [])
        self.exact_srank = bool(pick(exact_srank, "exact_srank", False))
        self.early = set(early_probe_steps(self.every)) if pick(early, "early", True) else set()
        self.done: set[int] = set()
        self.heat_done: set[int] = set()
        self.seconds = 0.0  # time spent probing in this process
        self.batch: torch.Tensor | None = None

    # -- schedule
    def _due(self, step: int, max_steps: int) -> tuple[bool, bool]:
        probe = step == 0 or step == max_steps or (self.every > 0 and step % self.every == 0) or step in self.early
        heat = bool(self.heatmaps) and step in self._heat_steps
        return probe and step not in self.done, heat and step not in self.heat_done

    def check(self, trainer) -> None:
        """Up-front checks, run by the Trainer before the run directory exists: the probe batch fits the
        validation split and every heatmap matrix name exists (the same checks on_train_start relies on)."""
        c = trainer.cfg
        self.batch = probe_batch(trainer.data.val, c.data.seq_len, self.batch_size, trainer.bos_id)
        self._check_names(trainer)

    def on_train_start(self, trainer) -> None:
        c = trainer.cfg
        self._heat_steps = set(heatmap_steps(c.train.max_steps))
        self.batch = probe_batch(trainer.data.val, c.data.seq_len, self.batch_size, trainer.bos_id)
        self._check_names(trainer)
        if trainer.dist.is_main:
            self._truncate(Path(trainer.run_dir), trainer.step)
        # the start step (0, or the step resumed from) is always probed, on every rank alike
        self._maybe(trainer, trainer.step, force=True)

    def _check_names(self, trainer) -> None:
        from smallinit.core.errors import ConfigError

        # names checked on a weightless copy, identically on every rank (so all ranks stop together)
        from smallinit.model import Transformer

        with torch.device("meta"):
            names = named_matrices(Transformer(trainer.model_cfg))
        # a MoE block has no dense `mlp.up`: the default heatmap of it maps to its first expert's
        self.heatmaps = [
            n.replace(".mlp.up", ".mlp.expert0.up")
            if n not in names and n.replace(".mlp.up", ".mlp.expert0.up") in names
            else n
            for n in self.heatmaps
        ]
        unknown = [n for n in self.heatmaps if n not in names]
        if unknown:
            raise ConfigError(
                f"probe.heatmaps: unknown matrix {unknown[0]!r}; this model has e.g. {', '.join(list(names)[:8])}, ..."
            )

    def on_before_optimizer_step(self, trainer, step: int) -> None:
        self._maybe(trainer, step)

    def on_train_end(self, trainer) -> None:
        self._maybe(trainer, trainer.step)

    # -- work
    def _truncate(self, run_dir: Path, step: int) -> None:
        """Drop probe lines and heatmaps of ``step`` and later (a resumed run writes them again; the
        resumed-from step itself is re-probed from the same weights, with the same result)."""
        from smallinit.core.io import atomic_write_text

        path = run_dir / PROBES_FILE
        if path.exists():
            keep = []
            for line in path.read_text().splitlines():
                try:
                    s = int(json.loads(line)["step"])
                except (ValueError, KeyError, TypeError):
                    continue  # a torn line from a kill
                if s < step:
                    keep.append(line)
            atomic_write_text(path, "".join(l + "\n" for l in keep))
        d = run_dir / HEATMAP_DIR
        if d.is_dir():
            for f in d.glob("step_*.npz"):
                try:
                    s = int(f.stem[5:])
                except ValueError:
                    continue
                if s >= step:
                    f.unlink()

    def _maybe(self, trainer, step: int, force: bool = False) -> None:
        probe, heat = self._due(step, trainer.cfg.train.max_steps)
        probe = probe or force
        if not (probe or heat):
            return
        t0 = time.perf_counter()
        model = trainer.full_model()  # collective under FSDP: every rank calls it
        if model is not None:
            self._run(trainer, model, step, probe, heat)
        if probe:
            self.done.add(step)
        if heat:
            self.heat_done.add(step)
        self.seconds += time.perf_counter() - t0

    @staticmethod
    def _optim_eps(trainer) -> dict[str, Any] | None:
        """The optimizer-ε probe of the live model (the one the optimizer holds; not FSDP's gathered replica)."""
        opt, live = getattr(trainer, "optimizer", None), getattr(trainer, "model", None)
        if opt is None or live is None or trainer.cfg.train.parallel == "fsdp":
            return None
        return optimizer_eps_probes(live, opt)

    def _run(self, trainer, model: nn.Module, step: int, probe: bool, heat: bool) -> None:
        dev = getattr(trainer, "device", None)
        home = next(model.parameters()).device
        moved = dev is not None and dev.type != "cpu" and home != dev  # FSDP's CPU replica: probe on the GPU
        if moved:
            model.to(dev)
        try:
            if probe:
                t0 = time.perf_counter()
                rec = compute_probes(model, self.batch, exact_srank=self.exact_srank, autocast=trainer.autocast())
                rec["optim_eps"] = self._optim_eps(trainer)
                rec = {
                    "step": step,
                    "tokens": step * trainer.cfg.train.batch_size * trainer.cfg.data.seq_len,
                    **json_safe(rec),
                    "seconds": time.perf_counter() - t0,
                }
                with open(Path(trainer.run_dir) / PROBES_FILE, "a") as f:
                    f.write(json.dumps(rec) + "\n")
                    f.flush()
            if heat:
                save_heatmaps(model, self.heatmaps, trainer.run_dir, step)
        finally:
            if moved:
                model.to(home)


def probe_callbacks(probe_config: Any) -> list[TrainingProbe]:
    """The trainer callbacks of a run's ``probe`` config: ``[TrainingProbe(probe_config)]`` when ``every`` > 0,
    else ``[]`` — for a new run, ``Trainer(cfg, run_dir, callbacks=probe_callbacks(cfg.probe))``."""
    return [TrainingProbe(probe_config)] if probe_config.every > 0 else []


def attach(trainer: Any, probe_config: Any = None) -> TrainingProbe | None:
    """Append a :class:`TrainingProbe` to ``trainer.callbacks`` when ``probe_config.every`` > 0 (default: the
    trainer's own ``cfg.probe`` — what a resumed run, whose config is read from its directory, needs) and return it;
    None when probes are off. The one place a run's probe config becomes its probe callback."""
    cbs = probe_callbacks(trainer.cfg.probe if probe_config is None else probe_config)
    trainer.callbacks.extend(cbs)
    return cbs[0] if cbs else None
