"""JAX's TPU splash-attention kernel as the ``splash`` attention backend (the TPU default).

Splash ("sparse flash", ``jax.experimental.pallas.ops.tpu.splash_attention``) is the tuned TPU flash
attention MaxText trains with. Its mask is a static description (here a ``CausalMask`` per head) that it
compiles into per-block metadata, so tiles above the diagonal are skipped in the forward and in its own
``custom_vjp`` backward kernels (dQ, dK/dV); segment ids mask packed documents inside the kernel. A sliding
window is a ``LocalMask`` with ``window - 1`` keys on the left and none on the right (causal within the band),
whose metadata skips the tiles left of the band the same way. Same
contract as every backend (``backends.py``)::

    out = splash_attention(q, k, v, segment_ids, config=SplashAttentionConfig(block_q=512, block_kv=512))

A worked example: q [batch 4, seq 1000, heads 8, head_dim 128], k/v [4, 1000, kv_heads 2, 128], segment
ids [4, 1000], traced under ``use_sharding`` with the ``tp`` preset on a mesh ``data=2, fsdp=1, tensor=2``.

* Sharding. Splash is a per-device kernel, so it runs inside ``shard_map`` over the active mesh, with the
  placements the rules give the logical axes: batch over ``("data", "fsdp")`` and heads and kv_heads over
  ``tensor``. Each device gets q [2, 1000, 4, 128] and k/v [2, 1000, 1, 128]: tensor shard 1 holds query
  heads 4-7, whose kv head ``h // 4 = 1`` is exactly its local kv head 0, because contiguous shards of
  both head axes keep the GQA grouping. Without an active ``ShardingContext`` the same per-device
  function is called directly. ``unsupported_reason`` rejects rules that shard seq or head_dim, put
  heads and kv_heads on different mesh axes, or do not divide batch/heads/kv_heads evenly.
* Per device. Blocks are ``min(config block, next power of two >= seq)`` but at least 128 (keys lie
  along the TPU's 128 lanes), so here 512 x 512 and seq is padded to 1024. Padded keys come after every
  real query, so the causal mask hides them; padded queries are dropped; segment ids are edge-padded.
  Splash takes one example as [heads, seq, head_dim] and does not scale: q is multiplied by
  ``head_dim ** -0.5`` first, and the kernel is ``vmap``-ed over the batch. K/V keep their 2 kv heads:
  splash's multi-head kernel reads kv head ``h // (heads // kv_heads)`` itself, nothing is repeated.

Where it runs. On CPU Pallas only interprets, so there ``interpret=True`` is chosen automatically and the
tests check values and gradients (splash's own backward kernels, interpreted) against ``reference``, and
the ``shard_map`` wiring on host devices. Compiling and running on a TPU, and its speed there, are not
tested here. On GPU splash does not exist (it is written for Mosaic): use ``cudnn`` or ``pallas``.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
from jax.experimental.pallas.ops.tpu import splash_attention as splash
from jax.sharding import PartitionSpec

from marin.trainer.attention.backends import register_attention_backend
from marin.trainer.attention.tiling import from_kernel_layout, pad_segment_ids, tiling, to_kernel_layout
from marin.trainer.axes import (
    BATCH,
    HEAD_DIM,
    HEADS,
    KV_HEADS,
    SEQ,
    ShardingContext,
    active_sharding,
    partition_spec,
    target_platform,
)

_LANES = 128  # splash's blocks must be multiples of the TPU's 128 lanes (its NUM_LANES)
_SUPPORTED_DTYPES = (jnp.float32, jnp.bfloat16)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SplashAttentionConfig:
    block_q: int = 512
    """Query rows per kernel block, in the forward and both backward kernels (MaxText's default 512)."""
    block_kv: int = 512
    """Key rows per kernel block; shorter sequences get blocks no longer than themselves (>= 128)."""

    def __post_init__(self):
        for name in ("block_q", "block_kv"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < _LANES or value & (value - 1):
                raise ValueError(f"SplashAttentionConfig.{name} must be a power of two >= 128, got {value!r}")


def _tiling(seq: int, config: SplashAttentionConfig) -> tuple[int, int, int]:
    """(block_q, block_kv, padded seq): powers of two, so the padded seq is a multiple of both blocks."""
    return tiling(seq, config.block_q, config.block_kv, min_block=_LANES)


def _kernel(heads: int, seq_pad: int, block_q: int, block_kv: int, interpret: bool, window: int | None = None):
    """A splash kernel for one example: q [heads, seq_pad, d], k/v [kv_heads, seq_pad, d] -> like q.

    The mask metadata is numpy work at trace time, cached by splash itself (``_process_mask``)."""
    shape = (seq_pad, seq_pad)
    head_mask = splash.CausalMask(shape) if window is None else splash.LocalMask(shape, (window - 1, 0), offset=0)
    mask = splash.MultiHeadMask([head_mask] * heads)
    blocks = splash.BlockSizes(
        block_q=block_q,
        block_kv=block_kv,
        block_kv_compute=block_kv,
        block_q_dkv=block_q,
        block_kv_dkv=block_kv,
        block_kv_dkv_compute=block_kv,
        block_q_dq=block_q,
        block_kv_dq=block_kv,
    )
    # head_shards/q_seq_shards stay 1: the kernel is built inside shard_map for the local heads.
    return splash.make_splash_mha(mask, block_sizes=blocks, head_shards=1, q_seq_shards=1, interpret=interpret)


def _splash_on_device(q, k, v, segment_ids, *, config: SplashAttentionConfig, interpret: bool, window: int | None):
    """Splash on one device's arrays, in the backend layout (q [batch, seq, heads, head_dim], ...)."""
    batch, seq, heads, head_dim = q.shape
    block_q, block_kv, seq_pad = _tiling(seq, config)
    kernel = _kernel(heads, seq_pad, block_q, block_kv, interpret, window)
    q = to_kernel_layout(q * jnp.asarray(head_dim**-0.5, q.dtype), seq_pad)  # splash expects q already scaled
    k, v = to_kernel_layout(k, seq_pad), to_kernel_layout(v, seq_pad)
    if segment_ids is None:
        out = jax.vmap(kernel)(q, k, v)
    else:
        one = lambda q, k, v, s: kernel(q, k, v, segment_ids=splash.SegmentIds(q=s, kv=s))  # noqa: E731
        out = jax.vmap(one)(q, k, v, pad_segment_ids(segment_ids, seq_pad))
    return from_kernel_layout(out, seq)


def _specs(context: ShardingContext) -> tuple[PartitionSpec, PartitionSpec, PartitionSpec]:
    """Placements of q, k/v and segment ids under the context's rules."""
    rules = context.rules
    return (
        partition_spec((BATCH, SEQ, HEADS, HEAD_DIM), rules),
        partition_spec((BATCH, SEQ, KV_HEADS, HEAD_DIM), rules),
        partition_spec((BATCH, SEQ), rules),
    )


def _ways(context: ShardingContext, target) -> int:
    """Into how many shards a dimension placed on ``target`` (a mesh axis, a tuple of them, or None) splits."""
    names = (target,) if isinstance(target, str) else tuple(target or ())
    return math.prod(context.mesh.shape[name] for name in names)


def _sharding_unsupported_reason(q_shape, kv_shape, context: ShardingContext) -> str | None:
    q_spec, kv_spec, _ = _specs(context)
    for logical, target in ((SEQ, q_spec[1]), (HEAD_DIM, q_spec[3]), (SEQ, kv_spec[1]), (HEAD_DIM, kv_spec[3])):
        if _ways(context, target) > 1:  # every preset names the context axis for seq: at size 1 it splits nothing
            return f"the sharding rules split {logical!r} over {target}; splash shards only batch and heads"
    if q_spec[2] != kv_spec[2]:
        return (
            f"the sharding rules put heads over {q_spec[2]} but kv_heads over {kv_spec[2]}; splash needs "
            "both on the same mesh axes, so that each device holds its query heads' kv heads"
        )
    for what, size, target in (
        ("batch", q_shape[0], q_spec[0]),
        ("heads", q_shape[2], q_spec[2]),
        ("kv_heads", kv_shape[2], kv_spec[2]),
    ):
        if size % _ways(context, target):
            return f"{what} {size} does not divide into {_ways(context, target)} shards over mesh axes {target}"
    return None


def unsupported_reason(q_shape, kv_shape, dtype, platform: str, context: ShardingContext | None) -> str | None:
    """Why ``splash_attention`` cannot serve these inputs on ``platform`` under ``context``, or None."""
    if platform not in ("tpu", "cpu"):
        return f"splash is a TPU (Mosaic) kernel and cannot run on {platform}; use xla or pallas"
    if jnp.dtype(dtype) not in [jnp.dtype(d) for d in _SUPPORTED_DTYPES]:
        return f"dtype {jnp.dtype(dtype)} is not one of float32, bfloat16"
    if context is not None:
        return _sharding_unsupported_reason(q_shape, kv_shape, context)
    return None


def splash_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    segment_ids: jax.Array | None,
    *,
    config: SplashAttentionConfig = SplashAttentionConfig(),
    platform: str | None = None,
    window: int | None = None,
) -> jax.Array:
    """Causal grouped-query attention by JAX's splash kernel (shapes and masking as in ``backends.py``), within
    a sliding ``window`` of keys if given, through ``shard_map`` over the mesh of the active ``use_sharding``
    context if there is one.

    ``platform`` defaults to ``jax.default_backend()``; on "cpu" the kernel is interpreted. Raises
    ValueError when splash cannot serve the inputs there."""
    platform = platform or target_platform()
    context = active_sharding()
    reason = unsupported_reason(q.shape, k.shape, q.dtype, platform, context)
    if reason is not None:
        raise ValueError(f"splash attention cannot serve these inputs: {reason}")
    on_device = functools.partial(_splash_on_device, config=config, interpret=platform == "cpu", window=window)
    if context is None:
        return on_device(q, k, v, segment_ids)
    q_spec, kv_spec, seg_spec = _specs(context)
    if segment_ids is None:
        fn, args, in_specs = (lambda q, k, v: on_device(q, k, v, None)), (q, k, v), (q_spec, kv_spec, kv_spec)
    else:
        fn, args, in_specs = on_device, (q, k, v, segment_ids), (q_spec, kv_spec, kv_spec, seg_spec)
    # check_vma=False: splash's pallas_call outputs declare no varying mesh axes (their ShapeDtypeStructs
    # have no manual_axis_type), which check_vma=True rejects (checked on jax 0.10.2).
    return jax.shard_map(fn, mesh=context.mesh, in_specs=in_specs, out_specs=q_spec, check_vma=False)(*args)


def _backend_unsupported_reason(q, k, v, segment_ids) -> str | None:
    return unsupported_reason(q.shape, k.shape, q.dtype, target_platform(), active_sharding())


@register_attention_backend("splash", unsupported_reason=_backend_unsupported_reason)
def splash_backend(q, k, v, segment_ids, window=None):
    """The registered backend: ``splash_attention`` with the default config on the default platform."""
    return splash_attention(q, k, v, segment_ids, window=window)
