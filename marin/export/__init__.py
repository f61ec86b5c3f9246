"""The export step: a training run's checkpoint, or a Hugging Face directory, as a Hugging Face directory
(conversion: ``marin.inference.hf``)."""

from marin.export.step import ExportConfig, export_checkpoint

__all__ = ["ExportConfig", "export_checkpoint"]
