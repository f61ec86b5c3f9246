"""DPO with a mixture-of-experts policy: the preference loss plus the policy's router losses (as TRL adds
``router_aux_loss_coef * aux_loss``), the reference's routing adding nothing."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from marin.posttrain.losses import PreferenceLossConfig
from marin.posttrain.objective import dpo_loss_fn
from marin.trainer.model import LlamaConfig, init_params
from marin.trainer.model.llama import hidden_states_and_router_stats
from marin.trainer.model.moe import router_losses
from marin.trainer.step import PrecisionPolicy

MOE = LlamaConfig(
    vocab_size=64,
    hidden_dim=32,
    mlp_dim=32,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    seq_len=16,
    num_experts=4,
    experts_per_token=2,
    router_aux_loss_coef=0.05,
    router_z_loss_coef=0.01,
)


def _pairs_batch(rows=4, seq=16):
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, MOE.vocab_size, size=(rows, seq))
    mask = np.zeros((rows, seq), np.float32)
    mask[:, 6:] = 1  # the reply's tokens
    return {
        "input_ids": jnp.asarray(tokens, jnp.int32),
        "targets": jnp.asarray(np.roll(tokens, -1, 1), jnp.int32),
        "segment_ids": jnp.ones((rows, seq), jnp.int32),
        "loss_mask": jnp.asarray(mask),
        "slot": jnp.asarray(np.repeat(np.arange(rows)[:, None], seq, 1), jnp.int32),  # row r is reply r
        "pair_valid": jnp.ones((rows // 2, 1), jnp.int32),
    }


def test_a_moe_policy_adds_its_router_losses_to_the_dpo_loss():
    policy = init_params(MOE, jax.random.PRNGKey(0))
    reference = init_params(MOE, jax.random.PRNGKey(1))
    batch = _pairs_batch()
    fp32 = PrecisionPolicy(compute_dtype="float32")
    loss = PreferenceLossConfig(beta=0.1)
    total, pairs, sums = dpo_loss_fn(MOE, loss, fp32)(policy, batch, reference)
    no_router = dataclasses.replace(MOE, router_aux_loss_coef=0.0, router_z_loss_coef=0.0)
    plain, _, _ = dpo_loss_fn(no_router, loss, fp32)(policy, batch, reference)
    stats = hidden_states_and_router_stats(MOE, policy, batch["input_ids"], batch["segment_ids"])[1]
    router = router_losses(MOE, stats)
    assert float(pairs) == 2
    assert float((total - plain) / pairs) == pytest.approx(float(router["router_loss"]), rel=1e-5)
    assert float(router["router_loss"]) > 0.05  # aux >= ~1 at coefficient 0.05
    assert float(sums["router_aux_loss"] / pairs) == pytest.approx(float(router["router_aux_loss"]), rel=1e-6)
    grads = jax.grad(lambda p: dpo_loss_fn(MOE, loss, fp32)(p, batch, reference)[0])(policy)
    assert float(jnp.abs(grads["layers"]["router"]).sum()) > 0
