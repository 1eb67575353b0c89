"""smallinit: small initialization (σ = d_in^(−γ)) for language-model pretraining.

>>> import smallinit
>>> report = smallinit.gamma_init(my_model, gamma=1.0)   # any nn.Module
>>> model = smallinit.Transformer(smallinit.ModelConfig.from_size("small"))
>>> report = smallinit.apply_recipe(hf_llama)              # ε 1e-12, gated attention, γ = 1 (docs/recipe.md)
"""

from smallinit.audit import audit  # noqa: E402  (light: torch + smallinit.init)
from smallinit.init import InitReport, InitRow, gamma_init
from smallinit.interop.recipe import RecipeReport, apply_recipe
from smallinit.interop.recipe_io import load_recipe_model, write_recipe_run
from smallinit.model import ModelConfig, MoEConfig, RMSNorm, Transformer

__version__ = "0.1.0"


def load_checkpoint(path, map_location="cpu"):
    """Load a :class:`Transformer` from a run directory (its latest good checkpoint) or a checkpoint directory."""
    from smallinit.runs.checkpoint import load_checkpoint as _load

    return _load(path, map_location=map_location)


__all__ = [
    "InitReport",
    "InitRow",
    "ModelConfig",
    "MoEConfig",
    "RMSNorm",
    "RecipeReport",
    "Transformer",
    "apply_recipe",
    "audit",
    "gamma_init",
    "load_checkpoint",
    "load_recipe_model",
    "write_recipe_run",
]
