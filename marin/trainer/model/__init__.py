"""The Llama model: configs and presets (``config``), parameters and the forward pass (``llama``), the
mixture-of-experts layer (``moe``), the matmul helper (``dense``) and its FP8 mode (``fp8``)."""

from marin.trainer.model.config import (
    MODEL_PRESETS,
    Llama3RopeScaling,
    LlamaConfig,
    model_preset,
    register_model_preset,
)
from marin.trainer.model.dense import MATMUL_DTYPES
from marin.trainer.model.llama import (
    ParamSpec,
    forward,
    hidden_states,
    init_params,
    next_token_loss,
    param_axes,
    param_specs,
    training_loss,
)

__all__ = [
    "MATMUL_DTYPES",
    "MODEL_PRESETS",
    "Llama3RopeScaling",
    "LlamaConfig",
    "ParamSpec",
    "forward",
    "hidden_states",
    "init_params",
    "model_preset",
    "next_token_loss",
    "param_axes",
    "param_specs",
    "register_model_preset",
    "training_loss",
]
