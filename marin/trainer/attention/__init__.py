"""Attention backends: ``reference`` (plain jnp, the oracle), ``xla``, ``blockwise``, ``pallas`` (our Pallas
flash-attention kernel), ``cudnn`` and ``cudnn_masked`` (cuDNN's, GPU) and ``splash`` (JAX's TPU splash
kernel, the TPU default)."""

from marin.trainer.attention.backends import (
    ATTENTION_BACKENDS,
    AttentionFn,
    attention,
    attention_mask,
    blockwise_attention,
    cannot_serve,
    reference_attention,
    register_attention_backend,
    resolve_backend,
    xla_attention,
)
from marin.trainer.attention.cudnn import cudnn_attention, segment_runs  # registers "cudnn", "cudnn_masked"
from marin.trainer.attention.pallas import PallasAttentionConfig, flash_attention  # registers "pallas"
from marin.trainer.attention.splash import SplashAttentionConfig, splash_attention  # registers "splash"

__all__ = [
    "ATTENTION_BACKENDS",
    "AttentionFn",
    "PallasAttentionConfig",
    "SplashAttentionConfig",
    "attention",
    "attention_mask",
    "blockwise_attention",
    "cannot_serve",
    "cudnn_attention",
    "flash_attention",
    "reference_attention",
    "register_attention_backend",
    "resolve_backend",
    "segment_runs",
    "splash_attention",
    "xla_attention",
]
