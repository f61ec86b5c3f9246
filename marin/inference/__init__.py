"""Using a trained model: load a checkpoint or a Hugging Face directory, place it on the devices, convert to
and from the HF format, and sample with a KV cache (``python -m marin.inference.sample``).

Evaluation and export build on this package; it builds on the trainer's model and checkpoint format.
"""

from marin.inference.checkpoint import is_hf_directory, load_model, model_of_checkpoint, place_params
from marin.inference.hf import config_from_hf, export_hf, hf_config, import_hf
from marin.inference.sampling import GenerationConfig, generate

__all__ = [
    "GenerationConfig",
    "config_from_hf",
    "export_hf",
    "generate",
    "hf_config",
    "import_hf",
    "is_hf_directory",
    "load_model",
    "model_of_checkpoint",
    "place_params",
]
