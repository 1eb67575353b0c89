"""Hugging Face interop: export to and import from transformers."""
