"""A run directory: reading it, its checkpoints, its heatmaps, its health check."""
