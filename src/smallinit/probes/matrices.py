"""The weight matrices of a model and their probes: :func:`named_matrices` (every logical matrix by name),
:func:`matrix_kind` (a name's matrix type, for grouping layers), the per-matrix weight probes (stable rank,
condensation) that ``compute_probes`` records, and :func:`optimizer_eps_probes` (the optimizer-ε probe, from an
Adam(W) optimizer's state; DESIGN.md §2). Re-exported by ``smallinit.probes.training``."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from smallinit.probes.metrics import condensation_index, optimizer_eps_damping, stable_rank

__all__ = ["matrix_kind", "named_matrices", "optimizer_eps_probes"]


def named_matrices(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every logical weight matrix of ``model`` in (out, in) layout, rows = output neurons.

    Modules with a ``matrices()`` method (Attention, SwiGLU, MoE) contribute
    ``f"{module path}.{key}"`` for each of their views (their own submodules are not visited
    again); the token embedding is ``tok_emb`` and an untied output head ``lm_head``.
    """
    out: dict[str, torch.Tensor] = {}
    claimed: list[str] = []
    for name, mod in model.named_modules():
        if any(name.startswith(c + ".") for c in claimed):
            continue
        if callable(getattr(mod, "matrices", None)):
            claimed.append(name)
            for key, W in mod.matrices().items():
                out[f"{name}.{key}" if name else key] = W
    emb = getattr(model, "tok_emb", None)
    if isinstance(emb, nn.Embedding):
        out["tok_emb"] = emb.weight
    head = getattr(model, "lm_head", None)
    if isinstance(head, nn.Linear) and (emb is None or head.weight is not emb.weight):
        out["lm_head"] = head.weight
    return out


def matrix_kind(name: str) -> str:
    """The matrix type of a probe matrix name, for grouping layers together in plots:
    ``blocks.3.attn.q`` → ``attn.q``; ``blocks.1.mlp.expert5.up`` → ``mlp.expert.up``; ``tok_emb`` → ``tok_emb``."""
    parts = name.split(".")
    if len(parts) >= 3 and parts[0] == "blocks" and parts[1].isdigit():
        parts = parts[2:]
    parts = ["expert" if p.startswith("expert") and p[6:].isdigit() else p for p in parts]
    return ".".join(parts)


def _weight_probes(model: nn.Module, exact_srank: bool) -> dict[str, dict[str, Any]]:
    out = {}
    for name, W in named_matrices(model).items():
        W = W.detach()
        if W.ndim != 2 or W.shape[0] < 2:
            continue
        out[name] = {"srank": stable_rank(W, exact=exact_srank), "cond": condensation_index(W), "d_in": int(W.shape[1])}
    return out


def _state_view(W: torch.Tensor, p: torch.Tensor, v: torch.Tensor) -> torch.Tensor | None:
    """The entries of the state tensor ``v`` (laid out like parameter ``p``) that the view ``W`` of ``p`` covers."""
    if W is p or (W.shape == p.shape and W.stride() == p.stride() and W.storage_offset() == p.storage_offset()):
        return v
    if v.shape != p.shape or v.stride() != p.stride():
        return None
    return v.as_strided(W.shape, W.stride(), v.storage_offset() + W.storage_offset() - p.storage_offset())


def optimizer_eps_probes(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any] | None:
    """The optimizer-ε probe (DESIGN.md §2) of every weight matrix of ``model`` from an Adam(W) ``optimizer``'s state.

    For each matrix of :func:`named_matrices` (views of fused parameters are matched to the same entries of
    the parameter's ``exp_avg_sq``): :func:`~smallinit.probes.metrics.optimizer_eps_damping` with that
    parameter group's β2 and ε and the state's step count t, i.e. with √v̂ = sqrt(exp_avg_sq / (1 − β2^t)),
    ``frac_below`` = mean[√v̂ < ε], ``damping`` = mean ε/(√v̂ + ε), ``median_sqrt_v``.

    Returns ``{"eps": ε, "beta2": β2, "t": t, "matrices": {name: {...}}}`` (ε, β2 of the first group, t the
    largest step count; ``matrices`` is empty before the first step), or ``None`` when the state is sharded
    (FSDP DTensors) or the optimizer keeps no ``exp_avg_sq``.
    """
    groups = optimizer.param_groups
    if not groups or "eps" not in groups[0] or "betas" not in groups[0]:
        return None
    group_of = {id(p): g for g in groups for p in g["params"]}
    by_storage: dict[int, torch.Tensor] = {}
    for p in model.parameters():
        if hasattr(p, "full_tensor") or hasattr(p, "_local_tensor"):  # DTensor: sharded state
            return None
        by_storage.setdefault(p.untyped_storage().data_ptr(), p)
    out: dict[str, dict[str, float]] = {}
    t_max = 0
    for name, W in named_matrices(model).items():
        p = by_storage.get(W.untyped_storage().data_ptr())
        if p is None or id(p) not in group_of:
            continue
        st = optimizer.state.get(p, {})
        v = st.get("exp_avg_sq")
        if v is None or "step" not in st:
            continue
        t = float(st["step"])
        if t < 1:
            continue
        view = _state_view(W, p, v.detach())
        if view is None:
            continue
        g = group_of[id(p)]
        out[name] = optimizer_eps_damping(view, t, float(g["betas"][1]), float(g["eps"]))
        t_max = max(t_max, int(t))
    if optimizer.state and not any("exp_avg_sq" in st for st in optimizer.state.values()):
        return None  # not an Adam-type optimizer
    return {"eps": float(groups[0]["eps"]), "beta2": float(groups[0]["betas"][1]), "t": t_max, "matrices": out}
