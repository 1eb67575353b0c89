"""The γ-rule: draw every weight matrix as N(0, σ²) with σ = fan_in^(-γ).

γ = 0.5 is the usual fan-in (LeCun-like) scale; γ = 1 is the paper's "small initialization".
Fan-in conventions (DESIGN §2):

* ``nn.Linear(in, out)``: fan_in = ``in`` (the true fan-in; an MLP down projection uses d_ff).
* ``nn.Embedding(V, d)``: fan_in = ``d`` (PyTorch's convention for a (V, d) weight).
* Norm layers (any module whose class name contains "Norm"): gain 1, bias 0.
* Biases of linear layers: 0.
* A module may define ``fan_in_of(param_name) -> int | None`` to declare the fan-in of its own
  parameters (our MoE experts do); a parameter no rule covers is left as it is, with a warning
  that names it.

``gamma_init`` works on any ``nn.Module`` (ours, a Hugging Face model, an ``nn.Sequential``) and
returns an :class:`InitReport` with the target and measured std of every parameter.
"""

from __future__ import annotations

import fnmatch
import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch
from torch import nn

OverrideValue = float | int | Mapping[str, float]


@dataclass
class InitRow:
    """One parameter of an :class:`InitReport`. ``target_std`` is None for constants (gains, biases)."""

    name: str
    shape: tuple[int, ...]
    fan_in: int | None
    rule: str  # "gamma=1", "std=0.02", "ones", "zeros", "skipped"
    target_std: float | None
    measured_std: float | None

    @property
    def rel_error(self) -> float | None:
        """|measured − target| / target, or None when either is unknown."""
        if self.target_std is None or self.measured_std is None or self.target_std == 0:
            return None
        return abs(self.measured_std - self.target_std) / self.target_std


@dataclass
class InitReport:
    """What :func:`gamma_init` did, one row per parameter (tied parameters appear once)."""

    gamma: float
    rows: list[InitRow] = field(default_factory=list)

    @property
    def skipped(self) -> list[str]:
        return [r.name for r in self.rows if r.rule == "skipped"]

    def max_rel_error(self) -> float:
        """Largest relative std error over the randomly drawn parameters (0 if none was measured)."""
        errs = [r.rel_error for r in self.rows if r.rel_error is not None]
        return max(errs, default=0.0)

    def row(self, name: str) -> InitRow:
        for r in self.rows:
            if r.name == name:
                return r
        raise KeyError(name)

    def __str__(self) -> str:
        head = ("parameter", "shape", "fan_in", "rule", "target std", "measured std")
        lines = [head]
        for r in self.rows:
            lines.append(
                (
                    r.name,
                    "x".join(map(str, r.shape)),
                    "-" if r.fan_in is None else str(r.fan_in),
                    r.rule,
                    "-" if r.target_std is None else f"{r.target_std:.4g}",
                    "-" if r.measured_std is None else f"{r.measured_std:.4g}",
                )
            )
        widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
        out = [f"γ-rule init (γ = {self.gamma:g}): σ = fan_in^(-γ)"]
        for i, line in enumerate(lines):
            out.append("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip())
            if i == 0:
                out.append("  ".join("-" * w for w in widths))
        return "\n".join(out)


def check_gamma(gamma: float, what: str = "gamma") -> float:
    """Return γ as a float, or raise ``ValueError`` naming the bad value (γ must be finite and > 0)."""
    try:
        g = float(gamma)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a positive number, got {gamma!r}") from None
    if not math.isfinite(g) or g <= 0:
        raise ValueError(f"{what} must be a finite number > 0, got {gamma!r}")
    return g


def parse_override(pattern: str, value: OverrideValue) -> tuple[str, float]:
    """An override value → ("gamma", g) or ("std", s); ValueError naming the pattern for any other value."""
    if isinstance(value, Mapping):
        if set(value) == {"gamma"}:
            return "gamma", check_gamma(value["gamma"], f"override {pattern!r} gamma")
        if set(value) == {"std"}:
            try:
                s = float(value["std"])
            except (TypeError, ValueError):
                s = math.nan
            if not math.isfinite(s) or s < 0:
                raise ValueError(f"override {pattern!r}: std must be a finite number >= 0, got {value['std']!r}")
            return "std", s
        raise ValueError(
            f"override {pattern!r} must be a number (γ), {{'gamma': g}} or {{'std': s}}, got {dict(value)!r}"
        )
    return "gamma", check_gamma(value, f"override {pattern!r} gamma")


def _is_norm(module: nn.Module) -> bool:
    return "norm" in type(module).__name__.lower()


def _default_fan_in(module: nn.Module, pname: str, param: torch.Tensor) -> tuple[str, int | None]:
    """Classify one direct parameter of ``module``:
    ("random", fan_in) | ("ones", None) | ("zeros", None) | ("skip", None)."""
    if hasattr(module, "fan_in_of"):
        fan_in = module.fan_in_of(pname)
        if fan_in is not None:
            return "random", int(fan_in)
    if pname == "bias":
        return "zeros", None
    if _is_norm(module) and pname == "weight":
        return "ones", None
    if isinstance(module, nn.Linear) and pname == "weight":
        return "random", module.in_features
    if isinstance(module, nn.Embedding) and pname == "weight":
        return "random", module.embedding_dim
    return "skip", None


@torch.no_grad()
def gamma_init(
    module: nn.Module,
    gamma: float = 1.0,
    overrides: Mapping[str, OverrideValue] | None = None,
    generator: torch.Generator | None = None,
    measure: bool = True,
) -> InitReport:
    """Initialize ``module`` in place with the γ-rule, W_ij ~ N(0, fan_in^(-2γ)); return a report.

    Args:
        module: any ``nn.Module``.
        gamma: the exponent γ (> 0). 0.5 is standard fan-in init, 1.0 is small init.
        overrides: ``{glob pattern on parameter names: γ | {"gamma": γ} | {"std": σ}}``. The first
            pattern (in insertion order) that matches a parameter's full name decides its rule.
            Overrides apply to randomly drawn weights only (gains and biases stay 1 and 0).
        generator: optional ``torch.Generator`` for reproducible draws.
        measure: record the measured std of each drawn weight (skipped on the meta device).

    Raises:
        ValueError: γ (or an override's γ) is not a finite number > 0.
    """
    gamma = check_gamma(gamma)
    rules = [(p, *parse_override(p, v)) for p, v in (overrides or {}).items()]
    report = InitReport(gamma=gamma)
    seen: set[int] = set()
    used_patterns: set[str] = set()
    for mod_name, mod in module.named_modules():
        for pname, param in mod.named_parameters(recurse=False):
            if id(param) in seen:  # tied weights are initialized once, by their first owner
                continue
            seen.add(id(param))
            full = f"{mod_name}.{pname}" if mod_name else pname
            kind, fan_in = _default_fan_in(mod, pname, param)
            shape = tuple(param.shape)
            if kind == "ones":
                param.fill_(1.0)
                report.rows.append(InitRow(full, shape, None, "ones", None, None))
                continue
            if kind == "zeros":
                param.zero_()
                report.rows.append(InitRow(full, shape, None, "zeros", None, None))
                continue
            if kind == "skip":
                warnings.warn(
                    f"gamma_init: no rule for parameter {full!r} of {type(mod).__name__} "
                    f"(shape {shape}); left as it is",
                    stacklevel=2,
                )
                report.rows.append(InitRow(full, shape, None, "skipped", None, None))
                continue
            how, value = "gamma", gamma
            for pattern, o_how, o_value in rules:
                if fnmatch.fnmatchcase(full, pattern):
                    how, value = o_how, o_value
                    used_patterns.add(pattern)
                    break
            std = float(fan_in) ** (-value) if how == "gamma" else value
            param.normal_(0.0, std, generator=generator)
            measured = None
            if measure and param.device.type != "meta" and param.numel() > 1:
                measured = param.detach().float().std().item()
            report.rows.append(InitRow(full, shape, fan_in, f"{how}={value:g}", std, measured))
    unused = [p for p, *_ in rules if p not in used_patterns]
    if unused:
        warnings.warn(f"gamma_init: override pattern(s) {unused} matched no parameter", stacklevel=2)
    return report
