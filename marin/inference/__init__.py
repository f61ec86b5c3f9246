"""Using a trained model: load a checkpoint or a Hugging Face directory, place it on the devices, convert to
and from the HF format, and generate with the serving engine (``marin.inference.engine``; the CLIs
``python -m marin.inference.sample``/``chat``/``serve``), each request sampled by its ``SamplingParams``.

Evaluation and export build on this package; it builds on the trainer's model and checkpoint format.
"""

from marin.inference.checkpoint import is_hf_directory, load_model, model_of_checkpoint, place_params
from marin.inference.hf import config_from_hf, export_hf, hf_config, import_hf
from marin.inference.sampling_params import InvalidRequest, SamplingParams

__all__ = [
    "InvalidRequest",
    "SamplingParams",
    "config_from_hf",
    "export_hf",
    "hf_config",
    "import_hf",
    "is_hf_directory",
    "load_model",
    "model_of_checkpoint",
    "place_params",
]
