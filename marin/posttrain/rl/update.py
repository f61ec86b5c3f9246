"""The jitted GRPO update and the reference model's log-probabilities.

    update = make_update_step(cfg, optimizer, schedule, LossConfig(...), precision, num_microbatches=2)
    state, metrics = update(state, minibatch)          # TrainState in and out (donated), as the trainer's step
    ref_logp = make_logprob_fn(cfg, precision)(reference_params, batch)

The update is the trainer's step with GRPO's objective in place of cross-entropy: the minibatch splits into
microbatches whose loss sums, counts and gradients add up (``loss.grpo_loss`` returns sums), divided once,
then clipping and AdamW from the trainer's ``OptimizerConfig``. The state is the trainer's ``TrainState``,
so checkpoints, export, evaluation and serving read an RL run like any training run. Metrics are device
arrays: the loop fetches them once per iteration.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax

from marin.posttrain.rl.loss import LossConfig, grpo_loss, token_logprobs, token_logprobs_and_router_stats
from marin.trainer.model.config import LlamaConfig
from marin.trainer.model.moe import router_losses
from marin.trainer.optim import Schedule
from marin.trainer.step import PrecisionPolicy, StepConfig, TrainState, next_average

ROUTER_METRICS = ("router_aux_loss", "router_z_loss")
"""A MoE policy's router losses, logged per update (means over the minibatch's loss weight)."""


def make_update_step(
    cfg: LlamaConfig,
    optimizer: optax.GradientTransformation,
    schedule: Schedule,
    loss_config: LossConfig,
    precision: PrecisionPolicy,
    num_microbatches: int = 1,
    averaging: StepConfig | None = None,
) -> Callable[[TrainState, dict], tuple[TrainState, dict]]:
    """``(state, minibatch) -> (state, metrics)``, jitted, the state donated; metrics hold the loss, the
    gradient norm, the learning rate and the sums of ``grpo_loss``'s statistics. ``averaging`` says how a state
    that keeps averaged parameters (an EMA, schedule-free's x) moves them, as the trainer's step does."""
    averaging = averaging or StepConfig()

    def objective(params, micro):
        logp, entropy, router = token_logprobs_and_router_stats(cfg, precision.cast_for_compute(params), micro)
        loss_sum, weight, stats = grpo_loss(logp, entropy, micro, loss_config)
        if router is not None:  # a MoE's router losses, weighted like the loss (as the trainer's step does)
            losses = router_losses(cfg, router)
            loss_sum = loss_sum + losses["router_loss"] * weight
            stats = {**stats, **{k: losses[k] * weight for k in ROUTER_METRICS}}
        return loss_sum, (weight, stats)

    grad_fn = jax.value_and_grad(objective, has_aux=True)

    def sums(params, batch):
        n = num_microbatches
        micro = jax.tree.map(lambda x: x.reshape(n, x.shape[0] // n, *x.shape[1:]), batch)
        (loss_sum, (weight, stats)), grads = grad_fn(params, jax.tree.map(lambda x: x[0], micro))
        if n == 1:
            return loss_sum, weight, stats, grads

        def add(carry, mb):
            (loss, (count, stat)), grad = grad_fn(params, mb)
            return jax.tree.map(jnp.add, carry, (loss, count, stat, grad)), None

        rest = jax.tree.map(lambda x: x[1:], micro)
        return jax.lax.scan(add, (loss_sum, weight, stats, grads), rest)[0]

    def update(state: TrainState, batch: dict) -> tuple[TrainState, dict]:
        loss_sum, weight, stats, grads = sums(state.params, batch)
        denom = jnp.maximum(weight, 1.0)  # an all-padding minibatch gives zero gradients, not NaN
        grads = jax.tree.map(lambda g: (g / denom).astype(g.dtype), grads)
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        rng, _ = jax.random.split(jax.random.wrap_key_data(state.rng))
        average = next_average(averaging, state.ema, params, opt_state)
        new_state = TrainState(state.step + 1, params, opt_state, average, jax.random.key_data(rng))
        metrics = {
            "loss": loss_sum / denom,
            "grad_norm": optax.global_norm(grads),
            "learning_rate": schedule(state.step),
            **{k: v / denom if k in ROUTER_METRICS else v for k, v in stats.items()},
        }
        return new_state, metrics

    return jax.jit(update, donate_argnums=0)


def make_logprob_fn(cfg: LlamaConfig, precision: PrecisionPolicy) -> Callable[[Any, dict], jax.Array]:
    """Jitted ``(params, batch) -> log-probabilities of the targets`` [rows, seq]: the frozen reference
    model's, for the KL penalty."""

    def logprobs(params, batch):
        return token_logprobs(cfg, precision.cast_for_compute(params), batch)[0]

    return jax.jit(logprobs)
