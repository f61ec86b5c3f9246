"""Leaving the lab: Hugging Face-format export/import and text generation."""

from marin.export.hf import config_from_hf, export_hf, hf_config, import_hf

__all__ = ["config_from_hf", "export_hf", "hf_config", "import_hf"]
