"""SwiGLU feed-forward."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class SwiGLU(nn.Module):
    """y = W_down( silu(x W_gate) ⊙ (x W_up) ); W_gate and W_up are one fused matrix ``w_gate_up``."""

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.d_ff = d_ff
        self.w_gate_up = nn.Linear(d_model, 2 * d_ff, bias=False)
        self.w_down = nn.Linear(d_ff, d_model, bias=False)

    def matrices(self) -> dict[str, torch.Tensor]:
        """The logical weight matrices: gate, up, down."""
        gate, up = self.w_gate_up.weight.split([self.d_ff, self.d_ff], dim=0)
        return {"gate": gate, "up": up, "down": self.w_down.weight}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.w_gate_up(x).chunk(2, dim=-1)
        return self.w_down(F.silu(gate) * up)
