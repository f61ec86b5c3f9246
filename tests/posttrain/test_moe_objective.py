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
    # Jitted throughout: op by op, every primitive of a MoE forward (and backward) compiles on its own.
    dpo = dpo_loss_fn(MOE, loss, fp32)
    total, pairs, sums = jax.jit(dpo)(policy, batch, reference)
    no_router = dataclasses.replace(MOE, router_aux_loss_coef=0.0, router_z_loss_coef=0.0)
    plain, _, _ = jax.jit(dpo_loss_fn(no_router, loss, fp32))(policy, batch, reference)
    router = jax.jit(
        lambda p, b: router_losses(MOE, hidden_states_and_router_stats(MOE, p, b["input_ids"], b["segment_ids"])[1])
    )(policy, batch)
    assert float(pairs) == 2
    assert float((total - plain) / pairs) == pytest.approx(float(router["router_loss"]), rel=1e-5)
    assert float(router["router_loss"]) > 0.05  # aux >= ~1 at coefficient 0.05
    assert float(sums["router_aux_loss"] / pairs) == pytest.approx(float(router["router_aux_loss"]), rel=1e-6)
    grads = jax.jit(jax.grad(lambda p: dpo(p, batch, reference)[0]))(policy)
    assert float(jnp.abs(grads["layers"]["router"]).sum()) > 0


def test_a_moe_policy_adds_its_router_losses_to_the_grpo_loss():
    import optax

    from marin.posttrain.rl.loss import LossConfig
    from marin.posttrain.rl.update import make_update_step
    from marin.trainer.step import TrainState

    rng = np.random.default_rng(0)
    rows, seq = 4, 16
    tokens = rng.integers(0, MOE.vocab_size, size=(rows, seq))
    batch = {
        "input_ids": jnp.asarray(tokens, jnp.int32),
        "targets": jnp.asarray(np.roll(tokens, -1, 1), jnp.int32),
        "mask": jnp.asarray((np.arange(seq) >= 6)[None].repeat(rows, 0), jnp.float32),
        "old_logp": jnp.full((rows, seq), -4.0, jnp.float32),
        "advantages": jnp.asarray([1.0, -1.0, 0.5, -0.5], jnp.float32),
        "rows": jnp.ones((rows,), jnp.float32),
    }
    fp32 = PrecisionPolicy(compute_dtype="float32")
    params = init_params(MOE, jax.random.PRNGKey(0))

    def first_update(cfg):
        tx = optax.sgd(0.0)
        fresh = jax.tree.map(jnp.copy, params)  # the update donates its state
        state = TrainState(
            jnp.zeros((), jnp.int32), fresh, tx.init(fresh), None, jax.random.key_data(jax.random.PRNGKey(0))
        )
        step = make_update_step(cfg, tx, lambda s: 0.0, LossConfig(), fp32)
        return jax.device_get(step(state, batch)[1])

    with_router = first_update(MOE)
    without = first_update(dataclasses.replace(MOE, router_aux_loss_coef=0.0, router_z_loss_coef=0.0))
    stats = hidden_states_and_router_stats(MOE, params, batch["input_ids"])[1]
    router = router_losses(MOE, stats)
    assert with_router["loss"] - without["loss"] == pytest.approx(float(router["router_loss"]), rel=1e-4)
    assert with_router["router_aux_loss"] == pytest.approx(float(router["router_aux_loss"]), rel=1e-5)
