"""smallinit: small initialization (sigma = d_in^-gamma) for language-model pretraining."""

__version__ = "0.1.0"
