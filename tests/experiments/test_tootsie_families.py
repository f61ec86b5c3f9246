"""The Qwen3 32B and OLMoE dry runs (issue 45): steps, placements and memory per device from the configs alone."""

import jax
import numpy as np
import pytest

from experiments import tootsie_families
from marin.trainer import OptimizerConfig, TrainerConfig
from marin.trainer.memory import GIB, memory_plan
from marin.trainer.mesh import MeshConfig
from marin.trainer.model import LlamaConfig, init_params


def test_the_dry_run_shows_steps_placements_and_memory_that_fits_a_v4_chip():
    text = tootsie_families.describe()
    assert "qwen3-32b: 32.52B parameters" in text and "olmoe-1b-7b: 7.24B parameters (1.60B active)" in text
    assert "mesh: fsdp 128 x expert 8" in text and "mesh: fsdp 256 x tensor 4" in text
    assert "layers/w_gate            [16, 64, 2048, 1024]         (None, 'expert', 'fsdp', None)" in text
    for name, step in tootsie_families.runs.items():
        cfg = step.config
        plan = memory_plan(cfg.model.value, cfg.trainer.value, cfg.optimizer.value, tootsie_families.CHIPS)
        assert plan.total < tootsie_families.HBM_GIB * GIB, (name, plan.bytes_per_device)


@pytest.mark.parametrize("kind, moments", [("adamw", 2), ("lion", 1)])
def test_the_exact_parts_are_the_parameters_bytes_over_their_shards(kind, moments):
    model = LlamaConfig(
        vocab_size=256, hidden_dim=64, mlp_dim=128, num_layers=2, num_heads=4, num_kv_heads=2, seq_len=32
    )
    trainer = TrainerConfig(num_train_steps=10, batch_size=16, mesh=MeshConfig(data=2, fsdp=4), sharding="fsdp")
    plan = memory_plan(model, trainer, OptimizerConfig(kind=kind, ema_decay=0.9), num_devices=8)
    params = init_params(model, jax.random.PRNGKey(0))
    # every matrix has an embed axis of 64, split 4 ways over fsdp; the norms too ([layers, embed], [embed])
    assert plan.bytes_per_device["params"] == pytest.approx(sum(p.size * 4 for p in jax.tree.leaves(params)) / 4)
    assert plan.bytes_per_device["average"] == plan.bytes_per_device["params"]  # the EMA
    optimizer = plan.bytes_per_device["optimizer"]
    assert moments * plan.bytes_per_device["params"] <= optimizer < moments * plan.bytes_per_device["params"] + 64
    assert plan.rows_per_device == 2 and plan.mesh == {"data": 2, "fsdp": 4, "expert": 1, "context": 1, "tensor": 1}
    assert np.isclose(plan.total, sum(plan.bytes_per_device.values()))
