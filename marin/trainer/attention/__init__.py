"""Attention backends: ``reference`` (plain jnp, the oracle) and ``xla``; issue 7 adds ``pallas``/``splash``."""

from marin.trainer.attention.backends import (
    ATTENTION_BACKENDS,
    AttentionFn,
    attention,
    attention_mask,
    reference_attention,
    register_attention_backend,
    resolve_backend,
    xla_attention,
)

__all__ = [
    "ATTENTION_BACKENDS",
    "AttentionFn",
    "attention",
    "attention_mask",
    "reference_attention",
    "register_attention_backend",
    "resolve_backend",
    "xla_attention",
]
