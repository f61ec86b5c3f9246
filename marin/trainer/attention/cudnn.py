"""cuDNN's fused flash attention on NVIDIA GPUs, with packed documents handed to cuDNN as sequences.

Two backends, both GPU-only and bf16/fp16 (cuDNN's flash kernels):

* ``cudnn`` (the GPU default) picks, per batch and at run time, the cheapest exact way to mask:
  rows that each hold one document run plain causal attention (no mask at all); rows of packed
  documents go to cuDNN as variable-length sequences (the "packed" or THD layout: each document's
  start and length, ``segment_runs``), so cuDNN skips every block that crosses a document boundary
  and nothing of size seq² is ever built; a batch it cannot describe that way (more than
  ``MAX_PACKED_SEGMENTS`` documents in a row, or segment ids that are not contiguous runs) goes to the
  ``pallas`` kernel, which reads segment ids directly (``cudnn_masked`` where Pallas cannot serve).
* ``cudnn_masked``: the packing mask as a ``[batch, 1, seq, seq]`` additive bias, what
  ``jax.nn.dot_product_attention(..., implementation="cudnn")`` does with a mask. It serves any segment
  ids but reads the whole bias forward and backward and grows with seq²; it was the GPU default until
  measured (docs/trainer.md, "On a GPU").

The packed layout comes from JAX's cuDNN binding (``jax._src.cudnn.fused_attention_stablehlo``), the
only JAX entry point that takes sequence offsets; ``jax.nn.dot_product_attention`` does not expose them.
A sliding window goes to cuDNN as its ``sliding_window_length`` (``jax.nn.dot_product_attention``'s
``local_window_size`` of ``(window - 1, 0)``) in the plain causal route and in ``cudnn_masked``; a windowed
batch of packed documents takes the fallback (Pallas), because JAX's binding has not been seen to combine
the packed layout with a window on a GPU here.

Not run here (no GPU): on a CPU both refuse with a reason.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from marin.trainer.attention.backends import (
    ATTENTION_BACKENDS,
    attention_mask,
    cannot_serve,
    local_window,
    register_attention_backend,
)
from marin.trainer.axes import target_platform

MAX_PACKED_SEGMENTS = 32
"""Documents per row cuDNN's packed layout is given room for (a static shape: offsets are [batch, M+1]).
cuDNN's saved softmax statistics are [batch * M, heads, seq] floats, so M costs memory; a row with more
documents than this takes the fallback (Pallas)."""

CAUSAL, PACKED, FALLBACK = 0, 1, 2
"""The three ways ``cudnn`` runs a batch, in the order of ``attention_route``'s answer."""


def segment_runs(segment_ids: jax.Array, max_segments: int = MAX_PACKED_SEGMENTS):
    """Each row's documents as cuDNN's packed layout describes them.

    ``segment_ids`` [batch, seq] (a document is a run of equal ids). Returns ``(seqlens [batch, M],
    offsets [batch, M + 1], fits)``: each run's length and start position, padded with -1 after the
    row's last run; ``fits`` (a scalar bool) is whether every row has at most ``M`` runs and its ids never
    decrease, i.e. whether runs and ids describe the same documents (ids that come back after another
    document, ``[0, 0, 1, 0]``, mean one document in two pieces, which the packed layout cannot say).
    """
    batch, seq = segment_ids.shape
    starts = jnp.concatenate(
        [jnp.ones((batch, 1), bool), segment_ids[:, 1:] != segment_ids[:, :-1]], axis=1
    )  # [batch, seq]: a document starts here
    runs = jnp.sum(starts, axis=1)
    start_pos = jax.vmap(lambda row: jnp.nonzero(row, size=max_segments, fill_value=-1)[0])(starts)
    start_pos = start_pos.astype(jnp.int32)  # [batch, M], -1 past the row's last run
    next_start = jnp.concatenate([start_pos[:, 1:], jnp.full((batch, 1), -1, jnp.int32)], axis=1)
    end = jnp.where(next_start >= 0, next_start, seq)
    seqlens = jnp.where(start_pos >= 0, end - start_pos, -1)
    offsets = jnp.concatenate([start_pos, jnp.full((batch, 1), -1, jnp.int32)], axis=1)
    monotone = jnp.all(segment_ids[:, 1:] >= segment_ids[:, :-1])
    return seqlens, offsets, monotone & jnp.all(runs <= max_segments)


def attention_route(segment_ids: jax.Array, max_segments: int = MAX_PACKED_SEGMENTS) -> jax.Array:
    """``CAUSAL`` when every row is one document, else ``PACKED`` when ``segment_runs`` fits, else
    ``FALLBACK`` (an int32 scalar, computed on the device: the choice is made per batch, not per compile)."""
    one_document = jnp.all(segment_ids == segment_ids[:, :1])
    fits = segment_runs(segment_ids, max_segments)[2]
    return jnp.where(one_document, CAUSAL, jnp.where(fits, PACKED, FALLBACK)).astype(jnp.int32)


def _cudnn_unsupported(q, k, v, segment_ids) -> str | None:
    if target_platform() != "gpu":
        return f"cuDNN runs only on a GPU (platform: {target_platform()})"
    if q.dtype not in (jnp.bfloat16, jnp.float16):
        return f"dtype {q.dtype} is not bfloat16 or float16"
    if q.shape[-1] % 8 or q.shape[-1] > 128:
        return f"head_dim {q.shape[-1]} is not a multiple of 8 up to 128"
    return None


def _causal(q, k, v, window=None):
    window = local_window(window)
    return jax.nn.dot_product_attention(q, k, v, is_causal=True, local_window_size=window, implementation="cudnn")


@register_attention_backend("cudnn_masked", unsupported_reason=_cudnn_unsupported)
def cudnn_masked_attention(q, k, v, segment_ids, window=None):
    """cuDNN flash attention with the packing mask as a materialized [batch, 1, seq, seq] bias."""
    mask = None if segment_ids is None else attention_mask(segment_ids, q.shape[1])
    return jax.nn.dot_product_attention(
        q, k, v, mask=mask, is_causal=True, local_window_size=local_window(window), implementation="cudnn"
    )


def cudnn_packed_attention(
    q, k, v, segment_ids, max_segments: int = MAX_PACKED_SEGMENTS, mask_type: str = "CAUSAL"
) -> jax.Array:
    """Causal attention within each document, the documents given to cuDNN as packed sequences (exact
    only where ``segment_runs(...)[2]`` holds; ``cudnn`` routes other batches elsewhere). ``mask_type``
    names a ``MaskType`` of JAX's cuDNN binding: ``PADDING_CAUSAL`` measured identical on an H200."""
    from jax._src.cudnn.fused_attention_stablehlo import MaskType
    from jax._src.cudnn.fused_attention_stablehlo import dot_product_attention as cudnn_sdpa

    seqlens, offsets, _ = segment_runs(segment_ids, max_segments)
    return cudnn_sdpa(
        q,
        k,
        v,
        q_seqlen=seqlens,
        kv_seqlen=seqlens,
        q_offsets=offsets,
        kv_offsets=offsets,
        scale=q.shape[-1] ** -0.5,
        mask_type=MaskType[mask_type],
        qkv_layout="BTNH",
    )


@register_attention_backend("cudnn", unsupported_reason=_cudnn_unsupported)
def cudnn_attention(q, k, v, segment_ids, window=None):
    """The GPU default: plain causal, packed sequences, or the fallback, chosen per batch (module doc)."""
    if segment_ids is None:
        return _causal(q, k, v, window)
    fallback_name = "pallas" if cannot_serve("pallas", q, k, v, segment_ids) is None else "cudnn_masked"
    fallback = lambda q, k, v, s: ATTENTION_BACKENDS[fallback_name](q, k, v, s, window)  # noqa: E731
    packed = cudnn_packed_attention if window is None else fallback
    branches = [lambda q, k, v, s: _causal(q, k, v, window), packed, fallback]
    return lax.switch(attention_route(segment_ids), branches, q, k, v, segment_ids)
