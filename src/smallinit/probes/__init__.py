"""Probes of training dynamics (DESIGN.md §2): condensation, attention sinks, RMSNorm saturation,
residual flow. ``metrics`` holds the pure tensor functions; they are re-exported here."""

from smallinit.probes.metrics import (
    attention_sink,
    condensation_index,
    max_activation,
    order_rows_for_heatmap,
    residual_flow,
    rmsnorm_saturation,
    row_cosine,
    stable_rank,
    uniform_sink_baseline,
)

__all__ = [
    "attention_sink",
    "condensation_index",
    "max_activation",
    "order_rows_for_heatmap",
    "residual_flow",
    "rmsnorm_saturation",
    "row_cosine",
    "stable_rank",
    "uniform_sink_baseline",
]
