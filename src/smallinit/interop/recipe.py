"""The paper's recipe on a model in memory: :func:`apply_recipe` sets every RMSNorm's ε, adds the query-dependent
attention output gate and applies the γ-rule (DESIGN §2), on our :class:`~smallinit.model.Transformer` or on a
Hugging Face causal LM whose attention has Llama's layout (Llama, Mistral, Qwen2, Qwen3, ...).

    model = transformers.LlamaForCausalLM(config)          # any Llama-layout model, built from a local config
    report = smallinit.apply_recipe(model, gamma=1.0, norm_eps=1e-12, gate="elementwise")
    print(report)                                          # what changed; report.init is the γ-rule's InitReport

**Llama layout.** An attention module with ``q_proj``, ``k_proj``, ``v_proj`` and ``o_proj`` (``nn.Linear``) and a
``head_dim``; ``o_proj``'s input is the concatenation of the H head outputs (H·head_dim channels, head-major) and
``q_proj`` has H·head_dim outputs; its decoder layer is pre-norm (an ``input_layernorm`` RMSNorm feeds it).

**The gate on a Hugging Face model.** ``o_proj`` is replaced by :class:`OutputGate`, an ``nn.Linear`` holding the
same ``weight`` (and bias) plus a child ``gate = nn.Linear(hidden, H·g, bias=False)`` (g = head_dim elementwise,
1 headwise). A forward pre-hook on the attention module keeps its input ``hidden_states`` X — the normalized hidden
state that feeds Q/K/V — and ``OutputGate`` computes ``o_proj(Y ⊙ sigmoid(X W_gᵀ))`` with the gate of head h on
head h's channels: Y'_h = Y_h ⊙ sigmoid(X W_g,h). State-dict names: ``...self_attn.o_proj.weight`` unchanged, the
gate ``...self_attn.o_proj.gate.weight`` (rows head-major: the g rows of head 0, then head 1, ...). ``config``
gets ``rms_norm_eps = norm_eps`` and ``smallinit_recipe = {"gamma", "norm_eps", "gate"}``, the record that
:func:`smallinit.interop.recipe_io.load_recipe_model` reads back from a ``save_pretrained`` folder.

**ε.** Every RMSNorm (residual norms, the final norm, Qwen3's ``q_norm``/``k_norm``) gets ε = ``norm_eps``; each is
first checked to compute g·h/sqrt(mean(h²) + ε) with its ε attribute (a Gemma-style (1 + g) norm is refused).

**The γ-rule** is :func:`smallinit.init.gamma_init` over the whole model (ours: ``Transformer.reset_parameters`` with
the new config), so the weights are redrawn: this is a recipe for pretraining. ``init=False`` keeps the weights and
draws only the new gate matrices with the γ-rule.

Everything that cannot be patched exactly is refused before the model is touched, with a one-line
:class:`~smallinit.core.errors.ConfigError` that starts ``apply_recipe:``.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from smallinit.core.errors import ConfigError
from smallinit.init import InitReport, _default_fan_in, check_gamma, gamma_init
from smallinit.model.attention import Attention
from smallinit.model.config import GATES
from smallinit.model.transformer import Transformer

RECIPE_KEY = "smallinit_recipe"
"""The config attribute (and config.json key) holding the recipe record of a patched Hugging Face model."""
EPS_ATTRS = ("variance_epsilon", "eps", "epsilon")
"""Where norm modules keep their ε (Hugging Face RMSNorms: ``variance_epsilon``; ours and torch's: ``eps``)."""

__all__ = ["EPS_ATTRS", "RECIPE_KEY", "OutputGate", "RecipeReport", "apply_recipe", "hf_attentions", "recipe_record"]


# ---- the gate on a Llama-layout attention ---------------------------------------------------------------------


class OutputGate(nn.Linear):
    """``o_proj`` with the query-dependent output gate: y = W_O · concat_h(Y_h ⊙ sigmoid(X W_g,hᵀ)) (+ b).

    ``weight``/``bias`` are the original ``o_proj``'s parameters (the same tensors); ``gate`` is a new
    ``nn.Linear(hidden, n_heads·g, bias=False)``. X, the attention module's input, is captured by
    :meth:`capture` (a forward pre-hook on that module) just before the module calls this one."""

    def __init__(self, o_proj: nn.Linear, hidden: int, n_heads: int, mode: str):
        super().__init__(o_proj.in_features, o_proj.out_features, bias=o_proj.bias is not None, device="meta")
        self.weight, self.bias = o_proj.weight, o_proj.bias
        self.n_heads, self.mode = n_heads, mode
        per_head = 1 if mode == "headwise" else o_proj.in_features // n_heads
        w = o_proj.weight
        self.gate = nn.Linear(hidden, n_heads * per_head, bias=False, device=w.device, dtype=w.dtype)
        self._x: torch.Tensor | None = None

    def capture(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        """Forward pre-hook of the attention module: keep its input ``hidden_states`` (X) for the gate."""
        self._x = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        """y (..., H·head_dim) → W_O · (y ⊙ sigmoid(X W_gᵀ) per head) + b, with X from :meth:`capture`."""
        x, self._x = self._x, None
        if x is None:
            raise RuntimeError("OutputGate: called outside its attention module's forward (no gate input X)")
        g = torch.sigmoid(self.gate(x)).unflatten(-1, (self.n_heads, -1))  # (..., H, 1 or head_dim)
        return F.linear((y.unflatten(-1, (self.n_heads, -1)) * g).flatten(-2), self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, gate={self.mode}, n_heads={self.n_heads}"


def _remove_gate(attn: nn.Module) -> None:
    """Put a plain ``nn.Linear`` (the same parameters) back in place of ``attn.o_proj`` and drop its hook."""
    og = attn.o_proj
    for key, hook in list(attn._forward_pre_hooks.items()):
        if getattr(hook, "__self__", None) is og:
            del attn._forward_pre_hooks[key]
            attn._forward_pre_hooks_with_kwargs.pop(key, None)
    plain = nn.Linear(og.in_features, og.out_features, bias=og.bias is not None, device="meta")
    plain.weight, plain.bias = og.weight, og.bias
    attn.o_proj = plain


def _add_gate(attn: nn.Module, hidden: int, n_heads: int, mode: str) -> OutputGate:
    """Replace ``attn.o_proj`` by an :class:`OutputGate` of ``mode`` and hook its capture onto ``attn``."""
    if isinstance(attn.o_proj, OutputGate):
        _remove_gate(attn)
    og = OutputGate(attn.o_proj, hidden, n_heads, mode)
    attn.o_proj = og
    attn.register_forward_pre_hook(og.capture, with_kwargs=True)
    return og


# ---- the report -------------------------------------------------------------------------------------------------


@dataclass
class RecipeReport:
    """What :func:`apply_recipe` changed.

    ``family``: "smallinit" or the Hugging Face ``model_type``; ``norms``: (module, ε before, ε after) for every
    RMSNorm; ``gates``: (attention module, gate matrix shape (H·g, hidden)) for every gate set (none for
    ``gate="none"``); ``removed_gates``: attention modules whose earlier gate was removed; ``config``: {field:
    (before, after)} of the model's config; ``init``: the γ-rule's report (None with ``init=False``)."""

    family: str
    gamma: float
    norm_eps: float
    gate: str
    norms: list[tuple[str, float | None, float]] = field(default_factory=list)
    gates: list[tuple[str, tuple[int, int]]] = field(default_factory=list)
    removed_gates: list[str] = field(default_factory=list)
    config: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    init: InitReport | None = None

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-able data (the init report as its rows' name, rule, target and measured std)."""
        d = dataclasses.asdict(self)
        d["init"] = (
            None
            if self.init is None
            else [
                {"name": r.name, "rule": r.rule, "target_std": r.target_std, "measured_std": r.measured_std}
                for r in self.init.rows
            ]
        )
        return d

    def __str__(self) -> str:
        eps_before = sorted({e for _, e, _ in self.norms if e is not None})
        lines = [
            f"smallinit recipe on {self.family}: γ = {self.gamma:g}, RMSNorm ε = {self.norm_eps:g}, gate = {self.gate}",
            f"  ε: {len(self.norms)} RMSNorm(s), before {', '.join(f'{e:g}' for e in eps_before) or '-'}",
            f"  gates: {len(self.gates)} attention module(s)"
            + (f", gate matrix {'x'.join(map(str, self.gates[0][1]))} each" if self.gates else "")
            + (f"; removed from {len(self.removed_gates)}" if self.removed_gates else ""),
        ]
        for k, (a, b) in self.config.items():
            lines.append(f"  config.{k}: {a!r} -> {b!r}")
        if self.init is None:
            lines.append("  γ-rule: not applied (init=False): weights kept, new gates drawn with the γ-rule")
        else:
            lines.append(
                f"  γ-rule: {sum(r.target_std is not None for r in self.init.rows)} matrices drawn with "
                f"σ = fan_in^-{self.gamma:g}, largest relative std error {self.init.max_rel_error():.3f}"
            )
        return "\n".join(lines)


# ---- checks shared by both families ---------------------------------------------------------------------------


def _check_args(gamma: float, norm_eps: float, gate: str, overrides: Mapping[str, Any] | None) -> tuple[float, float]:
    """γ and ε as floats; ConfigError for a bad γ, ε, gate mode or override (before the model is touched)."""
    if overrides is not None and not isinstance(overrides, Mapping):
        raise ConfigError(f"apply_recipe: overrides must be a mapping {{pattern: γ | {{'std': σ}}}}, got {overrides!r}")
    try:
        gamma = check_gamma(gamma)
        with warnings.catch_warnings():  # gamma_init on an empty module parses every override and touches nothing
            warnings.simplefilter("ignore")
            gamma_init(nn.Module(), gamma, overrides)
    except ValueError as e:
        raise ConfigError(f"apply_recipe: {e}") from None
    if isinstance(norm_eps, bool) or not isinstance(norm_eps, (int, float)) or not 0 < norm_eps < math.inf:
        raise ConfigError(f"apply_recipe: norm_eps must be a finite number > 0, got {norm_eps!r}")
    if gate not in GATES:
        raise ConfigError(f"apply_recipe: gate must be one of {', '.join(GATES)}, got {gate!r}")
    return gamma, float(norm_eps)


def _eps_attr(mod: nn.Module) -> str | None:
    return next((a for a in EPS_ATTRS if hasattr(mod, a)), None)


def _is_norm(mod: nn.Module) -> bool:
    return "norm" in type(mod).__name__.lower()


def _computes_rmsnorm(mod: nn.Module, attr: str) -> bool:
    """Whether a copy of ``mod`` with gain 1 computes h / sqrt(mean(h²) + ε) with ε read from ``attr`` (tried at
    ε = 1e-6 and ε = 1, so that an ε the module ignores, or a (1 + g) gain, shows)."""
    probe = copy.deepcopy(mod)
    probe = probe.to_empty(device="cpu") if any(t.is_meta for t in probe.parameters()) else probe.to("cpu")
    probe = probe.float()
    w = getattr(probe, "weight", None)
    dim = w.shape[-1] if isinstance(w, torch.Tensor) else getattr(probe, "normalized_shape", (None,))[-1]
    if dim is None:
        return False
    x = torch.randn(3, dim, generator=torch.Generator().manual_seed(0), dtype=torch.float32)
    with torch.no_grad():
        if isinstance(w, torch.Tensor):
            w.fill_(1.0)
        for eps in (1e-6, 1.0):
            setattr(probe, attr, eps)
            want = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
            try:
                got = probe(x)
            except Exception:  # noqa: BLE001 - any failure means: not a norm we know how to patch
                return False
            if not (isinstance(got, torch.Tensor) and torch.allclose(got.float(), want, rtol=1e-4, atol=1e-6)):
                return False
    return True


def _rms_norms(model: nn.Module) -> list[tuple[str, nn.Module, str]]:
    """(name, module, ε attribute) of every norm of ``model``; ConfigError for a norm that is not an RMSNorm of the
    form g·h/sqrt(mean(h²) + ε) whose ε we can set."""
    out = []
    for name, mod in model.named_modules():
        if not _is_norm(mod):
            continue
        kind = type(mod).__name__
        attr = _eps_attr(mod)
        if "rms" not in kind.lower() and not isinstance(mod, nn.RMSNorm):
            raise ConfigError(
                f"apply_recipe: {name} is a {kind}, not an RMSNorm; the recipe sets RMSNorm's ε (RMSNorm models only)"
            )
        if attr is None or not _computes_rmsnorm(mod, attr):
            raise ConfigError(
                f"apply_recipe: {name} ({kind}) does not compute g·h/sqrt(mean(h²) + ε) with a settable ε "
                "(e.g. a (1 + g) gain); its ε and gain cannot be patched"
            )
        out.append((name, mod, attr))
    return out


def _check_gamma_rule_covers(model: nn.Module) -> None:
    """ConfigError naming the first parameter the γ-rule has no fan-in for (it would be left as it is)."""
    seen: set[int] = set()
    for mname, mod in model.named_modules():
        for pname, p in mod.named_parameters(recurse=False):
            if id(p) in seen:
                continue
            seen.add(id(p))
            if _default_fan_in(mod, pname, p)[0] == "skip":
                full = f"{mname}.{pname}" if mname else pname
                raise ConfigError(
                    f"apply_recipe: the γ-rule has no fan-in for {full} ({type(mod).__name__}, shape "
                    f"{tuple(p.shape)}); models with such parameters (e.g. MoE routers, fused experts) are not patched"
                )


def _set_eps(norms: list[tuple[str, nn.Module, str]], eps: float, report: RecipeReport) -> None:
    for name, mod, attr in norms:
        before = getattr(mod, attr)
        setattr(mod, attr, eps)
        report.norms.append((name, None if before is None else float(before), eps))


# ---- Hugging Face models ----------------------------------------------------------------------------------------


def hf_attentions(model: nn.Module) -> list[tuple[str, nn.Module, int, int]]:
    """(name, attention module, n_heads, hidden) of every Llama-layout attention of ``model`` (module docstring);
    ConfigError for an attention that has the projections but not the layout, or when there is none."""
    out = []
    for name, mod in model.named_modules():
        projs = [getattr(mod, p, None) for p in ("q_proj", "k_proj", "v_proj", "o_proj")]
        if not all(isinstance(p, nn.Linear) for p in projs):
            continue
        q, _, _, o = projs
        hd = getattr(mod, "head_dim", None)
        if isinstance(hd, bool) or not isinstance(hd, int) or hd < 1 or o.in_features % hd:
            raise ConfigError(
                f"apply_recipe: {name} has no head_dim dividing o_proj's {o.in_features} inputs; "
                "its heads cannot be found"
            )
        if q.out_features != o.in_features:
            raise ConfigError(
                f"apply_recipe: {name}.q_proj has {q.out_features} outputs, o_proj {o.in_features} inputs; "
                "an attention with its own gate or another layout (e.g. Qwen3-Next) is not patched"
            )
        parent = model.get_submodule(name.rpartition(".")[0]) if "." in name else model
        norm = getattr(parent, "input_layernorm", None)
        if not (isinstance(norm, nn.Module) and _is_norm(norm)):
            raise ConfigError(
                f"apply_recipe: {name} is not fed by an input_layernorm (pre-norm layout); the gate must read "
                "the normalized hidden state that feeds Q/K/V"
            )
        out.append((name, mod, o.in_features // hd, q.in_features))
    if not out:
        raise ConfigError(
            f"apply_recipe: no Llama-layout attention (q_proj, k_proj, v_proj, o_proj, head_dim) in "
            f"{type(model).__name__}; only our Transformer and Llama, Mistral, Qwen2, Qwen3-like models are patched"
        )
    return out


def recipe_record(gamma: float | None, norm_eps: float, gate: str) -> dict[str, Any]:
    """The ``smallinit_recipe`` config entry: γ (None: the weights were not drawn by the recipe), ε and gate."""
    return {"gamma": gamma, "norm_eps": norm_eps, "gate": gate}


def _set_hf_config(model: nn.Module, norm_eps: float, record: dict[str, Any], report: RecipeReport) -> None:
    cfg = getattr(model, "config", None)
    if cfg is None:
        return
    if hasattr(cfg, "rms_norm_eps"):
        report.config["rms_norm_eps"] = (cfg.rms_norm_eps, norm_eps)
        cfg.rms_norm_eps = norm_eps
    report.config[RECIPE_KEY] = (getattr(cfg, RECIPE_KEY, None), record)
    setattr(cfg, RECIPE_KEY, record)


def _apply_hf(model, gamma, norm_eps, gate, init, overrides, generator) -> RecipeReport:
    attns = hf_attentions(model)
    norms = _rms_norms(model)
    if init:
        _check_gamma_rule_covers(model)
    family = str(getattr(getattr(model, "config", None), "model_type", None) or type(model).__name__)
    report = RecipeReport(family, gamma, norm_eps, gate)
    _set_eps(norms, norm_eps, report)
    new_gates = []
    for name, attn, n_heads, hidden in attns:
        if gate == "none":
            if isinstance(attn.o_proj, OutputGate):
                _remove_gate(attn)
                report.removed_gates.append(name)
            continue
        og = _add_gate(attn, hidden, n_heads, gate)
        new_gates.append(og.gate)
        report.gates.append((name, tuple(og.gate.weight.shape)))
    _set_hf_config(model, norm_eps, recipe_record(gamma if init else None, norm_eps, gate), report)
    if init:
        report.init = gamma_init(model, gamma, overrides, generator=generator)
    else:
        for g in new_gates:
            gamma_init(g, gamma, generator=generator)
    return report


# ---- our Transformer ---------------------------------------------------------------------------------------------


@torch.no_grad()
def _regate(block: nn.Module, cfg, generator) -> None:
    """Give ``block.attn`` the gate of ``cfg``: a new :class:`Attention` with the old q, k, v and W_O weights and
    gate rows drawn with the γ-rule (fan-in d_model)."""
    old = block.attn
    w = old.w_o.weight
    new = Attention(cfg).to(device=w.device, dtype=w.dtype)
    mats = old.matrices()
    rows = torch.cat([mats["q"], mats["k"], mats["v"]], dim=0)
    new.w_qkvg.weight[: rows.shape[0]].copy_(rows)
    if new.gate_dim:
        new.w_qkvg.weight[rows.shape[0] :].normal_(0.0, cfg.d_model ** (-cfg.gamma), generator=generator)
    new.w_o.weight.copy_(w)
    block.attn = new


def _apply_ours(model: Transformer, gamma, norm_eps, gate, init, overrides, generator) -> RecipeReport:
    old = model.config
    if old.norm != "rmsnorm":
        raise ConfigError(
            f"apply_recipe: the model has norm={old.norm!r}; the recipe sets RMSNorm's ε (RMSNorm models only)"
        )
    norms = _rms_norms(model)
    changes = {"gamma": gamma, "norm_eps": norm_eps, "gate": gate}
    if overrides is not None:
        changes["init_overrides"] = dict(overrides)
    cfg = dataclasses.replace(old, **changes)
    try:
        cfg.validate()
    except ValueError as e:
        raise ConfigError(f"apply_recipe: {e}") from None
    report = RecipeReport("smallinit", gamma, norm_eps, gate)
    report.config = {k: (getattr(old, k), v) for k, v in changes.items() if getattr(old, k) != v}
    _set_eps(norms, norm_eps, report)
    model.config = cfg
    for i, block in enumerate(model.blocks):
        if cfg.gate != old.gate:
            _regate(block, cfg, generator)
            if old.gate != "none" and cfg.gate == "none":
                report.removed_gates.append(f"blocks.{i}.attn")
        if block.attn.gate_dim:
            report.gates.append((f"blocks.{i}.attn", (block.attn.gate_dim, cfg.d_model)))
    if init:
        report.init = model.reset_parameters(generator)
    return report


# ---- the entry point ---------------------------------------------------------------------------------------------


def apply_recipe(
    model: nn.Module,
    gamma: float = 1.0,
    norm_eps: float = 1e-12,
    gate: str = "elementwise",
    *,
    init: bool = True,
    overrides: Mapping[str, Any] | None = None,
    generator: torch.Generator | None = None,
) -> RecipeReport:
    """Patch ``model`` in place with the paper's recipe and return a :class:`RecipeReport` of what changed.

    1. every RMSNorm's ε (and the config's: ``norm_eps`` of ours, ``rms_norm_eps`` of a Hugging Face config)
       becomes ``norm_eps``;
    2. the attention output gate of ``gate`` ("none", "headwise", "elementwise") is set on every attention:
       Y'_h = Y_h ⊙ sigmoid(X W_g,h), X the normalized hidden state that feeds Q/K/V, before the output projection
       (``gate="none"`` removes a gate set earlier);
    3. ``init=True``: the γ-rule, σ = fan_in^(−γ) for every matrix (gains 1, biases 0; ``overrides`` as in
       :func:`~smallinit.init.gamma_init`, which our Transformer also keeps in its config), drawn from
       ``generator``. ``init=False`` keeps the weights and draws only the new gate matrices.

    ``model``: our :class:`~smallinit.model.Transformer` (its config is replaced by the patched one) or a Hugging
    Face causal LM with Llama's attention layout (:mod:`smallinit.interop.recipe`). Raises a one-line
    :class:`~smallinit.core.errors.ConfigError` ("apply_recipe: ...") and leaves the model untouched when it
    cannot be patched exactly: no Llama-layout attention, an attention with another layout or not fed by a
    pre-norm, a norm that is not an RMSNorm (or not of the form g·h/sqrt(mean(h²) + ε)), a parameter the γ-rule
    has no fan-in for, or a bad ``gamma``/``norm_eps``/``gate``."""
    gamma, norm_eps = _check_args(gamma, norm_eps, gate, overrides)
    if isinstance(model, Transformer):
        return _apply_ours(model, gamma, norm_eps, gate, init, overrides, generator)
    return _apply_hf(model, gamma, norm_eps, gate, init, overrides, generator)
