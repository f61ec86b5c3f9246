"""Attention backends: ``reference`` (plain jnp, the oracle), ``xla``, ``blockwise``, ``pallas`` (our Pallas
flash-attention kernel); issue 7 adds ``splash``."""

from marin.trainer.attention.backends import (
    ATTENTION_BACKENDS,
    AttentionFn,
    attention,
    attention_mask,
    blockwise_attention,
    reference_attention,
    register_attention_backend,
    resolve_backend,
    xla_attention,
)
from marin.trainer.attention.pallas import PallasAttentionConfig, flash_attention  # registers "pallas"

__all__ = [
    "ATTENTION_BACKENDS",
    "AttentionFn",
    "PallasAttentionConfig",
    "attention",
    "attention_mask",
    "blockwise_attention",
    "flash_attention",
    "reference_attention",
    "register_attention_backend",
    "resolve_backend",
    "xla_attention",
]
