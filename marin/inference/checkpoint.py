"""Load a trained model for use: a training run's checkpoint or a Hugging Face directory, then place it.

    cfg, params, step = load_model("local_store/checkpoints/quickstart-nano-1a2b3c")   # host arrays
    params = place_params(cfg, params)                                                # on the devices

A training run stores its model config in every checkpoint's manifest (``marin.trainer.checkpoint``), so a
checkpoint describes itself: nothing here reads the executor's files. Checkpoints written before that
need the config passed explicitly (``model=``), and an explicit config always wins.
"""

from __future__ import annotations

from typing import Any

import jax

from marin.storage import join
from marin.trainer.checkpoint import checkpoint_metadata, restore_params
from marin.trainer.mesh import MeshConfig, sharding_context, tree_shardings
from marin.trainer.model import LlamaConfig, init_params, param_axes
from marin.trainer.model.hf import import_hf, is_hf_directory


def load_model(
    path: str, model: LlamaConfig | None = None, step: int | None = None
) -> tuple[LlamaConfig, Any, int | None]:
    """(config, params, checkpoint step) from an HF directory (step None) or a training run's output
    directory (its newest complete checkpoint, or ``step``'s). The parameters are host (numpy) arrays:
    exporting needs nothing else, and ``place_params`` puts them on the devices."""
    if is_hf_directory(path):
        cfg, params = import_hf(path)
        return cfg, params, None
    base = join(path, "checkpoints")
    model = model or model_of_checkpoint(base, step)
    template = jax.eval_shape(lambda: init_params(model, jax.random.PRNGKey(0)))
    params, found = restore_params(base, template, step)
    return model, params, found


def model_of_checkpoint(base: str, step: int | None = None) -> LlamaConfig:
    """The model config stored in a checkpoint's manifest by the run that wrote it."""
    stored = checkpoint_metadata(base, step).get("model")
    if stored is None:
        raise ValueError(
            f"{base}: the checkpoint does not record its model config (written before configs were "
            "stored beside checkpoints); pass the model config explicitly (EvalConfig.model, "
            "ExportConfig.model, or python -m marin.export --model_preset)"
        )
    return LlamaConfig.from_dict(stored)


def place_params(cfg: LlamaConfig, params: Any) -> Any:
    """Host parameters on the devices, once: on a host with several devices (a TPU host's 4 chips)
    FSDP-sharded over all of them, straight from host memory, so a model larger than one device's memory
    (8B in fp32: 32 GB) can be used; otherwise on the one device. Inputs stay replicated: every device
    computes the whole batch (inference needs memory more than speed here)."""
    if jax.device_count() == 1:
        return jax.device_put(params)
    context = sharding_context(MeshConfig(), "fsdp")
    return jax.tree.map(jax.device_put, params, tree_shardings(context, param_axes(cfg), params))
