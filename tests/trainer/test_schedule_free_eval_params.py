"""Schedule-Free's evaluation point: ``schedule_free_eval_params`` gives ``x`` from the optimizer state and the
trainer's parameters ``y``, and a schedule-free run's model everywhere it is read (the checkpoint's parameters
that evaluation, samples and the sample CLI load, the export, the server's engine) is that ``x``, not ``y``."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import optax
import pytest

from marin.trainer import OptimizerConfig, schedule_free_eval_params, train
from marin.trainer.mesh import MeshConfig
from marin.trainer.model import LlamaConfig, init_params, param_axes
from tests.trainer.tiny_run import tiny_config

MODEL = LlamaConfig(vocab_size=64, hidden_dim=32, mlp_dim=64, num_layers=1, num_heads=2, num_kv_heads=1, seq_len=16)


def _leaves(tree) -> list[np.ndarray]:
    return [np.asarray(leaf) for leaf in jax.tree.leaves(tree)]


def _close(a, b) -> bool:
    # x computed inside the jitted step may fuse (y - (1 - b1) z) / b1 differently: equal to fp32 rounding
    return all(np.allclose(p, q, rtol=1e-6, atol=1e-7) for p, q in zip(_leaves(a), _leaves(b), strict=True))


def _max_diff(a, b) -> float:
    return max(float(np.max(np.abs(p - q))) for p, q in zip(_leaves(a), _leaves(b), strict=True))


def _updated(kind: str, steps: int = 3):
    """(y, opt_state) after ``steps`` updates with random gradients."""
    config = OptimizerConfig(kind=kind, learning_rate=1e-2, schedule="constant", warmup=1, beta1=0.9)
    tx = config.build(10, param_axes(MODEL))
    params = init_params(MODEL, jax.random.PRNGKey(0))
    state = tx.init(params)
    for i in range(steps):
        leaves, treedef = jax.tree.flatten(params)
        keys = jax.random.split(jax.random.PRNGKey(i + 1), len(leaves))
        grads = treedef.unflatten([jax.random.normal(k, p.shape, p.dtype) for k, p in zip(keys, leaves)])
        updates, state = tx.update(grads, state, params)
        params = optax.apply_updates(params, updates)
    return params, state


def test_schedule_free_eval_params_is_x_from_z_and_y():
    y, state = _updated("schedule_free_adamw")
    x = schedule_free_eval_params(state, y)
    # Defazio et al.: y = b1 x + (1 - b1) z, so x = (y - (1 - b1) z) / b1 (optax's own function, the same)
    by_hand = jax.tree.map(lambda yi, zi: (yi - 0.1 * zi) / 0.9, y, state.z)
    assert _close(x, by_hand)
    assert all(
        np.array_equal(a, b) for a, b in zip(_leaves(x), _leaves(optax.contrib.schedule_free_eval_params(state, y)))
    )
    assert _max_diff(x, y) > 1e-4  # after three steps x is not y
    assert jax.tree.structure(x) == jax.tree.structure(y)
    assert all(a.dtype == b.dtype and a.shape == b.shape for a, b in zip(_leaves(x), _leaves(y)))


def test_schedule_free_eval_params_jits():
    y, state = _updated("schedule_free_adamw")
    assert _close(jax.jit(schedule_free_eval_params)(state, y), schedule_free_eval_params(state, y))


@pytest.mark.parametrize("kind", ["adamw", "muon"])
def test_schedule_free_eval_params_refuses_another_optimizers_state(kind):
    y, state = _updated(kind, steps=1)
    with pytest.raises(ValueError, match=r"kind='schedule_free_adamw'"):
        schedule_free_eval_params(state, y)


def test_schedule_free_eval_params_refuses_parameters_of_another_shape():
    y, state = _updated("schedule_free_adamw", steps=1)
    with pytest.raises(ValueError, match="params"):
        schedule_free_eval_params(state, {"embed": y["embed"]})


@pytest.mark.timeout(600)
def test_a_schedule_free_runs_model_is_x_in_its_checkpoint_export_and_server(tmp_path):
    from marin.export import ExportConfig, export_checkpoint
    from marin.inference import import_hf, load_model
    from marin.inference.engine import EngineConfig
    from marin.inference.serve import load_served_model
    from marin.inference.slots import split_layers
    from tests.export.tiny_model import write_tiny_tokenizer

    config = tiny_config(tmp_path / "run", MeshConfig(data=1, fsdp=1, tensor=1), "dp", optimizer="schedule_free_adamw")
    optimizer = dataclasses.replace(config.optimizer, learning_rate=3e-3, schedule="constant", warmup=2)
    config = dataclasses.replace(
        config,
        model=dataclasses.replace(config.model, vocab_size=320),  # room for the tiny tokenizer's 300 tokens
        optimizer=optimizer,
        trainer=dataclasses.replace(config.trainer, num_train_steps=6),
    )
    result = train(config)
    y = result.state.params
    x = schedule_free_eval_params(result.state.opt_state, y)
    assert _close(result.state.ema, x) and _max_diff(x, y) > 1e-4

    # the checkpoint's model: what the eval step, the samples step and the sample and chat CLIs load
    cfg, loaded, step = load_model(str(tmp_path / "run"))
    assert step == 6 and cfg == config.model
    assert _close(loaded, x) and _max_diff(loaded, y) > 1e-4

    tokenizer, _ = write_tiny_tokenizer(str(tmp_path / "tok"))
    export = str(tmp_path / "hf")
    export_checkpoint(ExportConfig(checkpoint_path=str(tmp_path / "run"), output_path=export, tokenizer=tokenizer))
    _, exported = import_hf(export)
    assert _close(exported, x) and _max_diff(exported, y) > 1e-4

    for checkpoint, tok in ((export, None), (str(tmp_path / "run"), tokenizer)):
        served = load_served_model(checkpoint, tok, engine_config=EngineConfig(slots=1, prefill_chunk=16))
        try:
            assert _close(served.engine.params, split_layers(x))  # the engine keeps one weight dict per layer
        finally:
            served.engine.stop()
