"""Attention backends behind one signature, chosen by name.

Every backend computes causal, grouped-query attention with optional packing masks::

    out = attention(q, k, v, segment_ids, backend="xla")
    # q [batch, seq, heads, head_dim], k/v [batch, seq, kv_heads, head_dim], segment_ids [batch, seq]
    # -> out [batch, seq, heads, head_dim]; position t sees s <= t with segment_ids[s] == segment_ids[t]
    out = attention(q, k, v, segment_ids, window=4096)  # sliding window: and t - 4096 < s (Mistral's)

``window`` is the number of keys a query sees, itself included, as Hugging Face's ``sliding_window`` counts
(``kv_idx > q_idx - sliding_window``); None is full causal attention. Every backend serves it: the masks
gain the band, and the block kernels (``blockwise``, ``pallas``, ``splash``) also skip the key blocks left of
it, so a windowed layer costs O(seq * window) rather than O(seq^2).

``reference`` is plain jnp and the oracle the others are tested against; ``xla`` calls
``jax.nn.dot_product_attention`` (XLA's implementation on every platform: jax 0.10 uses cuDNN only when
asked with ``implementation="cudnn"``, which ``cudnn.py``'s backends do: GPU, bf16/fp16); ``blockwise``
(``blockwise.py``, the CPU default) attends per block of queries over only the keys that block can see,
skipping the masked upper triangle, with a hand-written backward. ``pallas.py``, ``splash.py`` and ``cudnn.py`` register
their kernels here with ``@register_attention_backend``; nothing else in the model changes.

Choosing a backend. ``"default"`` is the platform's choice, measured there (TPU ``splash``, GPU ``cudnn``
then ``pallas``, CPU ``blockwise``); any other name is an explicit choice. A backend may register an
``unsupported_reason`` check (shapes, dtype, platform, the active mesh), run while tracing. When it
objects, an explicit choice is an error naming the backend and the reason, while the default tries the
platform's next choice and finally ``xla``, which serves everything, with a logged warning::

    attention(q16, k16, v16, None, backend="splash")   # float16: ValueError("splash attention cannot
                                                       #   serve these inputs: dtype float16 is not ...")
    attention(q16, k16, v16, None)                     # on TPU: warns, then runs "xla"
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

import jax
import jax.numpy as jnp
import numpy as np

from marin.trainer.attention.blockwise import blockwise_attention
from marin.trainer.attention.context import context_parallel_attention, sequence_shards
from marin.trainer.axes import target_platform

logger = logging.getLogger(__name__)


class AttentionFn(Protocol):
    def __call__(
        self, q: jax.Array, k: jax.Array, v: jax.Array, segment_ids: jax.Array | None, window: int | None = None
    ) -> jax.Array: ...


UnsupportedReasonFn = Callable[[jax.Array, jax.Array, jax.Array, jax.Array | None], str | None]
"""``(q, k, v, segment_ids) -> reason or None``: why a backend cannot serve these inputs (traced arrays:
look at shapes and dtypes only)."""

ATTENTION_BACKENDS: dict[str, AttentionFn] = {}
_UNSUPPORTED_CHECKS: dict[str, UnsupportedReasonFn] = {}

# The default for each platform, by measurement there (docs/trainer.md); a platform not listed uses "xla".
# On GPU cuDNN's flash attention was the fastest at every measured shape (H100, bf16, packed, seq 1k-8k),
# our Pallas kernel second; cuDNN serves only bf16/fp16 and head_dim <= 128, where Pallas takes over.
_PLATFORM_DEFAULTS: dict[str, tuple[str, ...]] = {"cpu": ("blockwise",), "gpu": ("cudnn", "pallas"), "tpu": ("splash",)}
FALLBACK_BACKEND = "xla"
"""What a default backend that cannot serve the inputs falls back to last: it takes any shape and dtype."""


def register_attention_backend(
    name: str, *, unsupported_reason: UnsupportedReasonFn | None = None
) -> Callable[[AttentionFn], AttentionFn]:
    """Register ``fn`` under ``name``; ``unsupported_reason`` (optional) says when it cannot serve inputs."""

    def register(fn: AttentionFn) -> AttentionFn:
        if name in ATTENTION_BACKENDS:
            raise ValueError(f"attention backend {name!r} registered twice")
        ATTENTION_BACKENDS[name] = fn
        if unsupported_reason is not None:
            _UNSUPPORTED_CHECKS[name] = unsupported_reason
        return fn

    return register


def default_backends(platform: str | None = None) -> tuple[str, ...]:
    """The platform's default backends in order of preference (the first that can serve the inputs runs)."""
    return _PLATFORM_DEFAULTS.get(platform or target_platform(), (FALLBACK_BACKEND,))


def resolve_backend(name: str) -> str:
    """``"default"`` becomes the platform's first choice; any other name must be registered."""
    if name == "default":
        return default_backends()[0]
    if name not in ATTENTION_BACKENDS:
        raise ValueError(f"unknown attention backend {name!r}; registered: {sorted(ATTENTION_BACKENDS)}")
    return name


def cannot_serve(name: str, q: jax.Array, k: jax.Array, v: jax.Array, segment_ids: jax.Array | None) -> str | None:
    """Why the registered backend ``name`` cannot serve these inputs, or None if it can."""
    check = _UNSUPPORTED_CHECKS.get(name)
    return None if check is None else check(q, k, v, segment_ids)


def attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    segment_ids: jax.Array | None,
    *,
    backend: str = "default",
    window: int | None = None,
    positions: np.ndarray | None = None,
    context_method: str = "default",
) -> jax.Array:
    """Causal grouped-query attention, within a sliding ``window`` if one is given; see the module docstring
    for shapes, masking and how ``backend`` is chosen (an explicit backend that cannot serve the inputs
    raises ValueError; "default" falls back).

    When the active sharding splits ``seq`` (the mesh's ``context`` axis), ``context.py`` attends across the
    split by ``context_method`` ("ring", "all_gather" or "default"); ``positions`` [seq] (static) are then the
    global positions of the slots in the order the arrays hold them (``context.zigzag_order``). Without a
    split they must be None or in order."""
    batch, seq, heads, head_dim = q.shape
    check_window(window)
    if k.shape != v.shape or k.shape[:2] != (batch, seq) or k.shape[3] != head_dim:
        raise ValueError(f"attention: q {q.shape} does not match k {k.shape} / v {v.shape}")
    if heads % k.shape[2]:
        raise ValueError(f"attention: {heads} query heads not a multiple of {k.shape[2]} kv heads")
    if segment_ids is not None and segment_ids.shape != (batch, seq):
        raise ValueError(f"attention: segment_ids {segment_ids.shape} != (batch, seq) {(batch, seq)}")
    if sequence_shards() > 1:
        if backend != "default" and resolve_backend(backend) != "blockwise":
            raise ValueError(
                f"attention backend {backend!r} cannot serve a sequence split over the context axis: context "
                "parallelism runs blockwise's math in a ring (or over all-gathered keys); use 'default' or 'blockwise'"
            )
        return context_parallel_attention(q, k, v, segment_ids, positions, window=window, method=context_method)
    if positions is not None and not np.array_equal(positions, np.arange(seq)):
        raise ValueError("attention: positions out of order need a sequence split over the context axis")
    if backend != "default":
        name = resolve_backend(backend)
        reason = cannot_serve(name, q, k, v, segment_ids)
        if reason is not None:
            raise ValueError(f"{name} attention cannot serve these inputs: {reason}")
        return ATTENTION_BACKENDS[name](q, k, v, segment_ids, window)
    refusals = []
    for name in default_backends():
        reason = cannot_serve(name, q, k, v, segment_ids)
        if reason is None:
            return ATTENTION_BACKENDS[name](q, k, v, segment_ids, window)
        refusals.append(f"{name}: {reason}")
    # Logged while tracing, so once per compiled program, not once per step.
    logger.warning(
        "default attention backends cannot serve these inputs (%s); falling back to %r",
        "; ".join(refusals),
        FALLBACK_BACKEND,
    )
    return ATTENTION_BACKENDS[FALLBACK_BACKEND](q, k, v, segment_ids, window)


def check_window(window: int | None) -> None:
    """A sliding window is None (full attention) or a positive int of keys."""
    if window is not None and (not isinstance(window, int) or isinstance(window, bool) or window < 1):
        raise ValueError(f"attention window must be a positive int (keys a query sees) or None, got {window!r}")


def attention_mask(
    segment_ids: jax.Array | None,
    seq: int,
    q_start: int = 0,
    q_stop: int | None = None,
    window: int | None = None,
) -> jax.Array:
    """Boolean [batch or 1, 1, q, k]: causal, within ``window`` keys if given, and within one packed
    document, for queries ``q_start:q_stop`` against keys ``0:q_stop`` (all of them by default)."""
    q_stop = seq if q_stop is None else q_stop
    pos = jnp.arange(q_stop)
    visible = pos[None, :] <= pos[q_start:, None]  # [q, k]
    if window is not None:
        visible = visible & (pos[None, :] > pos[q_start:, None] - window)
    mask = visible[None, None]  # [1, 1, q, k]
    if segment_ids is not None:
        q_seg, k_seg = segment_ids[:, q_start:q_stop], segment_ids[:, :q_stop]
        mask = mask & (q_seg[:, None, :, None] == k_seg[:, None, None, :])  # [batch, 1, q, k]
    return mask


@register_attention_backend("reference")
def reference_attention(q, k, v, segment_ids, window=None):
    """Softmax attention in fp32, written out: the oracle for every other backend."""
    batch, seq, heads, head_dim = q.shape
    kv_heads = k.shape[2]
    q = q.reshape(batch, seq, kv_heads, heads // kv_heads, head_dim)  # [batch, seq, kv_heads, group, head_dim]
    scores = jnp.einsum("bqkgd,bskd->bkgqs", q, k, preferred_element_type=jnp.float32)
    scores = scores * (head_dim**-0.5)
    mask = attention_mask(segment_ids, seq, window=window)[:, :, None]  # [batch, 1, 1, q, k]
    scores = jnp.where(mask, scores, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    out = jnp.einsum("bkgqs,bskd->bqkgd", probs, v)
    return out.reshape(batch, seq, heads, head_dim)  # [batch, seq, heads, head_dim]


@register_attention_backend("xla")
def xla_attention(q, k, v, segment_ids, window=None):
    """``jax.nn.dot_product_attention`` with its default implementation, which in jax 0.10 is XLA's
    (scores materialized) on GPU too: cuDNN's flash attention needs ``implementation="cudnn"``. The window is
    its ``local_window_size`` (left, right): ``window - 1`` keys before the query, none after."""
    mask = None if segment_ids is None else attention_mask(segment_ids, q.shape[1])
    return jax.nn.dot_product_attention(q, k, v, mask=mask, is_causal=True, local_window_size=local_window(window))


def local_window(window: int | None) -> tuple[int, int] | None:
    """Our window (keys seen, the query included) as ``jax.nn.dot_product_attention``'s (left, right)."""
    return None if window is None else (window - 1, 0)


register_attention_backend("blockwise")(blockwise_attention)  # the CPU default; see blockwise.py
