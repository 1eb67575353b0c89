"""Probes of training dynamics (DESIGN.md §2): condensation, attention sinks, RMSNorm saturation,
residual flow, the optimizer's ε. ``metrics`` holds the pure tensor functions, ``matrices`` a model's named
weight matrices and their weight and optimizer-ε probes, ``training`` the hook-based probe of a model
(``compute_probes``) and the trainer callback (``TrainingProbe``), ``summary`` the run labels and headline
numbers of a report, ``plots`` the figures (imported on demand: it needs matplotlib)."""

from smallinit.probes.metrics import (
    attention_sink,
    condensation_index,
    max_activation,
    optimizer_eps_damping,
    order_rows_for_heatmap,
    residual_flow,
    rmsnorm_saturation,
    row_cosine,
    stable_rank,
    uniform_sink_baseline,
)
from smallinit.probes.training import (
    TrainingProbe,
    compute_probes,
    early_probe_steps,
    heatmap_arrays,
    heatmap_steps,
    matrix_kind,
    named_matrices,
    optimizer_eps_probes,
    probe_batch,
    read_heatmaps,
    read_probes,
    save_heatmaps,
)

__all__ = [
    "TrainingProbe",
    "compute_probes",
    "early_probe_steps",
    "heatmap_arrays",
    "heatmap_steps",
    "matrix_kind",
    "named_matrices",
    "optimizer_eps_probes",
    "probe_batch",
    "read_heatmaps",
    "read_probes",
    "save_heatmaps",
    "attention_sink",
    "condensation_index",
    "max_activation",
    "optimizer_eps_damping",
    "order_rows_for_heatmap",
    "residual_flow",
    "rmsnorm_saturation",
    "row_cosine",
    "stable_rank",
    "uniform_sink_baseline",
]
