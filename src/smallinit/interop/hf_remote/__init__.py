"""The code a Hugging Face export carries for ``trust_remote_code=True``.

``configuration_smallinit.py`` and ``modeling_smallinit.py`` in this folder are copied, byte for byte, into every export
that ``transformers`` has no class for (gated attention, Mixture-of-Experts: :func:`smallinit.interop.hf.export_hf`),
with ``auto_map`` in its config.json pointing at them. They import only torch and transformers (and each other, by a
relative import), never smallinit, so a folder loads where smallinit is not installed. Nothing in the package imports
them; tests load them through ``transformers.AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)``.
"""

from __future__ import annotations

from importlib import resources

REMOTE_FILES = ("configuration_smallinit.py", "modeling_smallinit.py")
AUTO_MAP = {
    "AutoConfig": "configuration_smallinit.SmallinitConfig",
    "AutoModel": "modeling_smallinit.SmallinitModel",
    "AutoModelForCausalLM": "modeling_smallinit.SmallinitForCausalLM",
}


def remote_code_sources() -> dict[str, bytes]:
    """{file name: contents} of the remote-code files, read from the installed package."""
    here = resources.files(__name__)
    return {name: here.joinpath(name).read_bytes() for name in REMOTE_FILES}


__all__ = ["AUTO_MAP", "REMOTE_FILES", "remote_code_sources"]
