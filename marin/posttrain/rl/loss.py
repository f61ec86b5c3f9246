"""GRPO's objective: group-normalized advantages and the clipped token-level policy-gradient loss.

    adv = group_advantages(rewards.reshape(prompts, G), scale="group")     # (r - mean_g) / (std_g + 1e-4)
    logp, entropy = token_logprobs(cfg, params, batch)                     # [rows, seq] at target positions
    loss_sum, weight, stats = grpo_loss(logp, entropy, batch, LossConfig(loss_type="grpo", beta=0.04))
    loss = loss_sum / weight

Per completion token t of row i, with ratio r = exp(logp - old_logp) against the rollout policy's own
log-probabilities (the engine's) and the row's advantage A::

    loss_t = -min(r * A, clip(r, 1 - epsilon, 1 + epsilon_high) * A) + beta * r * (exp(ref - logp) - (ref - logp) - 1)

the second term being the k3 estimator of KL(policy || reference) (Schulman, "Approximating KL divergence"),
weighted by r unless ``bias_correction_kl`` is off.
Aggregation follows TRL's ``loss_type`` names (TRL 1.16, ``GRPOTrainer._compute_loss``):

==========  =======================================================  ========================================
loss_type   loss                                                     returned as (loss_sum / weight)
==========  =======================================================  ========================================
grpo        mean over rows of (mean over the row's tokens)           sum of row means / rows
bnpo        mean over every completion token of the batch            token sum / tokens
dr_grpo     token sum / (rows * max_completion_tokens) (Dr. GRPO)    (token sum / max_completion_tokens) / rows
==========  =======================================================  ========================================

Every aggregation is a sum over rows divided by a count, so microbatches add up to exactly the batch's loss
(as the trainer's step sums and divides once). Rows that pad a batch to its fixed shape have ``rows = 0``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from marin.trainer.model.config import LlamaConfig
from marin.trainer.model.llama import forward_and_router_stats
from marin.validation import check

LOSS_TYPES = ("grpo", "bnpo", "dr_grpo")
SCALE_REWARDS = ("group", "batch", "none")


@dataclasses.dataclass(frozen=True, kw_only=True)
class LossConfig:
    loss_type: str = "grpo"
    """Aggregation over tokens and rows, as TRL names it: "grpo", "bnpo" or "dr_grpo" (table above)."""
    epsilon: float = 0.2
    """Clip range below 1 (and above, unless ``epsilon_high`` is set): TRL's ``epsilon``."""
    epsilon_high: float | None = None
    """Clip range above 1 (DAPO's clip-higher); None: ``epsilon``."""
    beta: float = 0.0
    """Weight of the k3 KL penalty to the reference model; 0 needs no reference model (TRL's default)."""
    bias_correction_kl: bool = True
    """Multiply each token's k3 term by its ratio r, which makes its gradient the unbiased reverse-KL gradient
    for samples of the rollout policy (DeepSeek-V3.2; TRL's ``use_bias_correction_kl``, on by default)."""
    max_completion_tokens: int = 256
    """``dr_grpo``'s constant normalizer: the most tokens a completion may have."""

    def __post_init__(self):
        check("LossConfig", "loss_type", self.loss_type, lambda v: v in LOSS_TYPES, f"one of {LOSS_TYPES}")
        check("LossConfig", "epsilon", self.epsilon, lambda v: 0 < v < 1, "in (0, 1)")
        check("LossConfig", "epsilon_high", self.epsilon_high, lambda v: v is None or v > 0, "> 0 or None")
        check("LossConfig", "beta", self.beta, lambda v: v >= 0, ">= 0")
        check("LossConfig", "max_completion_tokens", self.max_completion_tokens, lambda v: v >= 1, ">= 1")

    @property
    def clip_high(self) -> float:
        return self.epsilon if self.epsilon_high is None else self.epsilon_high


def group_advantages(rewards: np.ndarray, scale: str = "group") -> tuple[np.ndarray, np.ndarray]:
    """Advantages for rewards [groups, G] (G completions of one prompt per row): the reward minus its group's
    mean, divided by the group's standard deviation (Bessel-corrected, + 1e-4) for ``scale="group"``, by the
    whole batch's for ``"batch"``, not at all for ``"none"`` (Dr. GRPO). Also returns, per group, whether its
    rewards are all equal (such a group teaches nothing: every advantage is 0)."""
    if scale not in SCALE_REWARDS:
        raise ValueError(f"scale must be one of {SCALE_REWARDS}, got {scale!r}")
    rewards = np.asarray(rewards, np.float64)
    centered = rewards - rewards.mean(axis=1, keepdims=True)
    group_std = rewards.std(axis=1, ddof=1, keepdims=True) if rewards.shape[1] > 1 else np.zeros_like(rewards[:, :1])
    if scale == "group":
        centered = centered / (group_std + 1e-4)
    elif scale == "batch":
        centered = centered / (rewards.std(ddof=1) + 1e-4 if rewards.size > 1 else 1e-4)
    return centered.astype(np.float32), np.isclose(group_std[:, 0], 0.0)


def token_logprobs(cfg: LlamaConfig, params: Any, batch: dict) -> tuple[jax.Array, jax.Array]:
    """Log-probability of each target token and the entropy of the distribution it was drawn from, both
    [rows, seq] in fp32 (the model's distribution at temperature 1, as the engine reports log-probabilities)."""
    return token_logprobs_and_router_stats(cfg, params, batch)[:2]


def token_logprobs_and_router_stats(cfg: LlamaConfig, params: Any, batch: dict):
    """``token_logprobs`` and a MoE's router statistics (None for a dense model)."""
    logits, stats = forward_and_router_stats(cfg, params, batch["input_ids"])  # [rows, seq, vocab] fp32
    logp_all = jax.nn.log_softmax(logits, axis=-1)
    logp = jnp.take_along_axis(logp_all, batch["targets"][..., None], axis=-1)[..., 0]
    entropy = -jnp.sum(jnp.exp(logp_all) * logp_all, axis=-1)
    return logp, entropy, stats


def grpo_loss(
    logp: jax.Array, entropy: jax.Array, batch: dict, config: LossConfig
) -> tuple[jax.Array, jax.Array, dict]:
    """(loss sum, weight, sums of the statistics) over a (micro)batch: the loss is ``loss_sum / weight``.

    ``batch``: ``mask`` [rows, seq] (1 on completion targets), ``old_logp`` and, with ``beta > 0``, ``ref_logp``
    [rows, seq], ``advantages`` [rows], ``rows`` [rows] (1 for real rows, 0 for padding)."""
    mask = batch["mask"].astype(jnp.float32)
    advantages = batch["advantages"][:, None]
    ratio = jnp.exp(logp - batch["old_logp"])
    clipped = jnp.clip(ratio, 1 - config.epsilon, 1 + config.clip_high)
    per_token = -jnp.minimum(ratio * advantages, clipped * advantages)
    kl = jnp.zeros_like(logp)
    if config.beta:
        delta = batch["ref_logp"] - logp
        kl = jnp.exp(delta) - delta - 1
        if config.bias_correction_kl:
            kl = kl * ratio
        per_token = per_token + config.beta * kl
    token_sum = jnp.sum(per_token * mask, axis=-1)  # [rows]
    rows = batch["rows"].astype(jnp.float32)
    if config.loss_type == "grpo":
        loss_sum, weight = jnp.sum(token_sum / jnp.maximum(jnp.sum(mask, axis=-1), 1.0)), jnp.sum(rows)
    elif config.loss_type == "bnpo":
        loss_sum, weight = jnp.sum(token_sum), jnp.sum(mask)
    else:  # dr_grpo
        loss_sum, weight = jnp.sum(token_sum) / config.max_completion_tokens, jnp.sum(rows)
    low = (ratio < 1 - config.epsilon) & (advantages < 0)
    high = (ratio > 1 + config.clip_high) & (advantages > 0)
    stats = {
        "tokens": jnp.sum(mask),
        "clipped_low": jnp.sum(low * mask),
        "clipped_high": jnp.sum(high * mask),
        "kl": jnp.sum(kl * mask),
        "entropy": jnp.sum(entropy * mask),
        "ratio": jnp.sum(ratio * mask),
    }
    return loss_sum, weight, stats
