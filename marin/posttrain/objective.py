"""The DPO objective for the trainer's loop: reply log-probabilities from packed rows, then a preference loss.

    loss_fn = dpo_loss_fn(model_cfg, PreferenceLossConfig(beta=0.1), policy)
    loss_sum, pairs, sums = loss_fn(params, batch, frozen)      # the trainer divides all three by ``pairs``

``sequence_logps`` runs the model once over a batch's rows (both replies of every pair, packed) and sums
``log p(target)`` over each reply's tokens with one ``segment_sum`` keyed by the rows' ``slot``
(``marin.posttrain.batches``). The reference log-probabilities come from the batch (``ref_logps``: computed once
by the reference step) or, without them, from ``frozen`` (the reference model's parameters, run forward
under ``stop_gradient``); SimPO needs neither.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import jax
import jax.numpy as jnp

from marin.posttrain.losses import PreferenceLossConfig, metric_sums, preference_loss
from marin.trainer.model import LlamaConfig
from marin.trainer.model.llama import forward_and_router_stats
from marin.trainer.model.moe import router_losses
from marin.trainer.step import PrecisionPolicy


def sequence_logps(
    cfg: LlamaConfig, params: Any, batch: dict, *, matmul_dtype: str = "default"
) -> tuple[jax.Array, jax.Array]:
    """Summed log-probabilities of each reply's tokens and their counts, each [pairs, 2] (chosen, rejected)."""
    return _logps_and_router_stats(cfg, params, batch, matmul_dtype)[:2]


def _logps_and_router_stats(cfg: LlamaConfig, params: Any, batch: dict, matmul_dtype: str):
    logits, stats = forward_and_router_stats(
        cfg, params, batch["input_ids"], batch["segment_ids"], matmul_dtype=matmul_dtype
    )  # [rows, seq, vocab] fp32
    target_logit = jnp.take_along_axis(logits, batch["targets"][..., None], axis=-1)[..., 0]
    token_logps = target_logit - jax.nn.logsumexp(logits, axis=-1)  # [rows, seq]
    mask = batch["loss_mask"].astype(jnp.float32)
    num = 2 * batch["pair_valid"].shape[0]
    slots = batch["slot"].reshape(-1)

    def per_reply(values: jax.Array) -> jax.Array:
        return jax.ops.segment_sum(values.reshape(-1), slots, num_segments=num + 1)[:num].reshape(-1, 2)

    return per_reply(token_logps * mask), per_reply(mask), stats


def dpo_loss_fn(
    cfg: LlamaConfig, loss: PreferenceLossConfig, policy: PrecisionPolicy
) -> Callable[[Any, dict, Any], tuple[jax.Array, jax.Array, dict[str, jax.Array]]]:
    """The trainer's ``LossFn`` for ``loss``: ``(params in compute dtype, batch, frozen reference params or
    None) -> (summed loss, number of pairs, summed metrics)``.

    A mixture-of-experts policy adds its router losses (``moe.router_losses``: the load-balancing and z-loss
    with the model's coefficients) to the mean pair loss, as TRL's DPO adds ``router_aux_loss_coef * aux_loss``
    when the model outputs its router logits; the reference model's routing adds nothing."""

    def loss_fn(params, batch, frozen):
        logps, lengths, stats = _logps_and_router_stats(cfg, params, batch, policy.matmul_dtype)
        ref = None
        if not loss.reference_free:
            if "ref_logps" in batch:
                ref = batch["ref_logps"]
            else:
                reference = policy.cast_for_compute(jax.lax.stop_gradient(frozen))
                ref = sequence_logps(cfg, reference, batch, matmul_dtype=policy.matmul_dtype)[0]
        per_pair, chosen, rejected = preference_loss(loss, logps, ref, lengths)
        valid = batch["pair_valid"][:, 0]
        pairs = jnp.sum(valid)
        sums = metric_sums(loss, logps, lengths, chosen, rejected, valid)
        if stats is None:
            return jnp.sum(per_pair * valid), pairs, sums
        router = router_losses(cfg, stats)
        sums.update({name: router[name] * pairs for name in ("router_aux_loss", "router_z_loss")})
        return jnp.sum(per_pair * valid) + router["router_loss"] * pairs, pairs, sums

    return loss_fn


def eval_fn(loss_fn, policy: PrecisionPolicy) -> Callable:
    """``loss_fn`` jitted for held-out pairs: ``(stored params, batch, frozen) -> (loss sum, pairs, sums)``."""
    return jax.jit(lambda params, batch, frozen: loss_fn(policy.cast_for_compute(params), batch, frozen))


def evaluate_pairs(step: Callable, params: Any, frozen: Any, batches: Iterable[dict]) -> dict[str, float]:
    """The loss and TRL's metrics as means over every valid pair of ``batches``, with ``step`` an ``eval_fn``."""
    totals: dict[str, float] = {}
    pairs = 0.0
    for batch in batches:
        loss_sum, weight, sums = jax.device_get(step(params, batch, frozen))
        pairs += float(weight)
        for name, value in {"loss": loss_sum, **sums}.items():
            totals[name] = totals.get(name, 0.0) + float(value)
    return {name: value / max(pairs, 1.0) for name, value in totals.items()} | {"pairs": pairs}
