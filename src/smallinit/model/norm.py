"""Normalization layers whose arithmetic always runs in float32, with an explicit ε."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from smallinit.model.fused import rms_norm


class RMSNorm(nn.Module):
    """y = g ⊙ h / sqrt(mean(h²) + ε), computed in float32 whatever the input/autocast dtype.

    ε matters for small initialization: once mean(h²) ≲ ε the denominator is dominated by ε and
    the layer no longer rescales the signal (DESIGN §2, "RMSNorm saturation").
    """

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = float(eps)
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        with torch.autocast(h.device.type, enabled=False):
            y = rms_norm(h.float(), self.weight.float(), self.eps)
        return y.to(h.dtype)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps:g}"


class LayerNorm(nn.Module):
    """y = g ⊙ (h − mean(h)) / sqrt(var(h) + ε) + b, computed in float32."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = float(eps)
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        with torch.autocast(h.device.type, enabled=False):
            y = F.layer_norm(h.float(), (h.shape[-1],), self.weight.float(), self.bias.float(), self.eps)
        return y.to(h.dtype)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps:g}"


def make_norm(kind: str, dim: int, eps: float) -> nn.Module:
    """The norm named by ``ModelConfig.norm``."""
    return RMSNorm(dim, eps) if kind == "rmsnorm" else LayerNorm(dim, eps)
