"""Comparing and fitting runs: token-level comparison, scaling fits, the loss crossing."""
