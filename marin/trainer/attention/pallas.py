"""Our flash-attention kernel, written in Pallas: the ``pallas`` attention backend.

FlashAttention-2 (Dao 2023, arXiv:2307.08691) for causal, grouped-query attention over packed
documents, forward and backward, with the backend contract of ``backends.py``::

    out = flash_attention(q, k, v, segment_ids, config=PallasAttentionConfig(block_q=16, block_k=16))

A worked example: seq 40, 8 query heads sharing 2 kv heads (group 4), head_dim 16, blocks of 16.

* The wrapper pads seq to 48 (a multiple of both blocks) and moves heads before seq, so every kernel
  block is a ``[rows, head_dim]`` tile of one head. Keys 40-47 are padding and masked in every kernel.
* Forward: one program per (batch, head, query block), 3 query blocks per head. Query head 5 reads kv
  head ``5 // 4 = 1`` straight from the kv BlockSpec's index map, so K/V are never repeated in memory.
  Query block 1 (rows 16-31) loops over key blocks 0 and 1 only: the loop bound stops at the diagonal,
  so of the 3 x 3 tiles of the score matrix just the 6 on or below it are computed. Each tile updates a
  running max ``m``, a running sum ``l`` and an fp32 accumulator (online softmax); at the end
  ``out = acc / l`` and ``lse = m + log(l)`` is saved for the backward.
* Backward (``jax.custom_vjp``): ``delta = rowsum(dO * O)`` is one fused XLA reduction; then the
  dQ kernel, one program per (batch, head, query block), revisits the same 6 tiles, recomputing
  ``p = exp(s - lse)`` instead of storing the 48 x 48 probabilities; and the dK/dV kernel, one program
  per (batch, kv head, key block), loops over the 4 query heads of its group and over the query blocks
  from the diagonal down (key block 1 sees query blocks 1 and 2), so the group's gradient is summed in
  registers and no per-query-head dK/dV is written.
* A sliding ``window`` (``flash_attention(..., window=20)``) adds ``s > t - 20`` to the mask and moves every
  loop's other bound too: query block 2 (rows 32-47) starts at key block ``(32 - 19) // 16 = 0``, but with
  window 8 at key block 1; a key block's dK/dV loop stops at the last query block whose window reaches it.
* Within a tile, position t sees s when ``s <= t``, ``s < 40`` and ``segment_ids[s] == segment_ids[t]``.
  Every real row sees at least itself and every padded row the last real token (segment ids are
  edge-padded), so ``l > 0`` and ``lse`` is finite everywhere. Masked scores are a large finite
  negative, not -inf: a tile that masks a whole row gives ``exp(0)`` garbage that the row's first real
  score rescales to exactly zero (``exp(mask - m) == 0``), where -inf would give ``inf - inf = nan``.

Where it runs. On CPU Pallas only interprets (``interpret=True``, chosen automatically): the tests
check values and gradients that way, and also *lower* the same kernels for GPU through Pallas's Triton
lowering and for TPU through Mosaic, from this CPU machine. On an H100 (2026-11-25) the Triton kernels
compiled and passed the same tests, and ran 1.15-1.43x behind cuDNN's flash attention with linear memory
(docs/trainer.md, "On a GPU"): the GPU default's second choice, for what cuDNN refuses. A TPU run is
still untested. On TPU the whole-sequence K/V (and in the
dK/dV kernel the group's Q and dO) are staged in VMEM, which bounds seq (``unsupported_reason`` allows
~1024 at head_dim 128, group 4, bf16); ``splash`` is the tuned TPU backend. On GPU, fp32 dots at default
precision run as TF32 in Triton, so fp32 parity there is looser than here.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas import triton as pltriton

from marin.trainer.attention.backends import register_attention_backend
from marin.trainer.attention.tiling import from_kernel_layout, pad_segment_ids, tiling, to_kernel_layout
from marin.trainer.axes import target_platform

# Finite, so fully masked tiles never produce inf - inf = nan (see the module docstring); 0.7 leaves
# headroom for subtracting a running max without overflowing. Same choice as JAX's Pallas attention.
_MASK_VALUE = -0.7 * float(jnp.finfo(jnp.float32).max)
_SUPPORTED_DTYPES = (jnp.float32, jnp.bfloat16, jnp.float16)
_TPU_VMEM_BUDGET = 16 * 2**20
"""The default scoped VMEM limit on TPU v4/v5e: kernel blocks beyond it fail to compile there."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class PallasAttentionConfig:
    block_q: int = 128
    """Query rows per kernel program: the row count of every score tile."""
    block_k: int = 128
    """Key rows per inner-loop step: the column count of every score tile."""

    def __post_init__(self):
        # Powers of two because Triton tiles must be; >= 16 because Triton's dot needs every dim >= 16.
        for name in ("block_q", "block_k"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 16 or value & (value - 1):
                raise ValueError(f"PallasAttentionConfig.{name} must be a power of two >= 16, got {value!r}")


@dataclasses.dataclass(frozen=True)
class _Kernel:
    """Static facts every kernel is specialized on (hashable: a ``custom_vjp`` nondiff argument)."""

    block_q: int
    block_k: int
    seq_len: int  # real (unpadded) length: keys at or past it are padding
    scale: float  # 1 / sqrt(head_dim)
    platform: str  # "cpu" interprets; "gpu" lowers through Triton; "tpu" through Mosaic
    window: int | None = None  # sliding window: keys a query sees, itself included; None = all before it


def _dot(a, b, contract=(1, 0)):
    """fp32-accumulating matmul; ``contract=(1, 1)`` is ``a @ b.T``, ``(0, 0)`` is ``a.T @ b``."""
    return lax.dot_general(a, b, (((contract[0],), (contract[1],)), ((), ())), preferred_element_type=jnp.float32)


def _visible(q_block, k_block, q_seg, k_seg, kern: _Kernel):
    """[block_q, block_k] bool: causal, not padding, same document (``q_seg`` [bq, 1], ``k_seg`` [1, bk])."""
    shape = (kern.block_q, kern.block_k)
    # 2-D iotas: TPU vectors are 2-D, and Triton is indifferent.
    q_pos = q_block * kern.block_q + lax.broadcasted_iota(jnp.int32, shape, 0)
    k_pos = k_block * kern.block_k + lax.broadcasted_iota(jnp.int32, shape, 1)
    visible = (k_pos <= q_pos) & (k_pos < kern.seq_len)
    if kern.window is not None:
        visible = visible & (k_pos > q_pos - kern.window)
    if q_seg is not None:
        visible = visible & (q_seg == k_seg)
    return visible


def _probs(q, k, lse, visible, kern: _Kernel):
    """Softmax probabilities of one tile recomputed from the forward's logsumexp; exactly 0 where masked."""
    return jnp.where(visible, jnp.exp(_dot(q, k, (1, 1)) * kern.scale - lse), 0.0)


def _keys(j, kern: _Kernel):
    return pl.ds(pl.multiple_of(j * kern.block_k, kern.block_k), kern.block_k)


def _queries(i, kern: _Kernel):
    return pl.ds(pl.multiple_of(i * kern.block_q, kern.block_q), kern.block_q)


def _key_blocks_through_diagonal(i, kern: _Kernel):
    """Key blocks that query block ``i`` can see end before this one: the causal skip is this loop bound."""
    return lax.div((i + 1) * kern.block_q + kern.block_k - 1, kern.block_k)


def _first_key_block(i, kern: _Kernel):
    """The first key block query block ``i`` can see: 0, or under a sliding window the one holding its first
    query's oldest visible key (the window's skip is this loop bound)."""
    if kern.window is None:
        return 0
    return lax.div(jnp.maximum(i * kern.block_q - (kern.window - 1), 0), kern.block_k)


def _query_blocks_seeing(j, kern: _Kernel, query_blocks: int):
    """(first, end) of the query blocks that can see key block ``j``: from the diagonal down, and under a
    sliding window only as far as the window of its last key reaches."""
    first = lax.div(j * kern.block_k, kern.block_q)
    if kern.window is None:
        return first, query_blocks
    last_query = (j + 1) * kern.block_k - 1 + kern.window - 1
    return first, jnp.minimum(lax.div(last_query, kern.block_q) + 1, query_blocks)


def _forward_kernel(q_ref, k_ref, v_ref, q_seg_ref, k_seg_ref, o_ref, lse_ref, *, kern: _Kernel):
    i = pl.program_id(2)
    q = q_ref[...]  # [block_q, head_dim]
    q_seg = None if q_seg_ref is None else q_seg_ref[...]  # [block_q, 1]

    def body(j, carry):
        acc, m, l = carry  # [block_q, head_dim], [block_q, 1], [block_q, 1]
        keys = _keys(j, kern)
        k, v = k_ref[keys, :], v_ref[keys, :]
        k_seg = None if k_seg_ref is None else k_seg_ref[:, keys]  # [1, block_k]
        visible = _visible(i, j, q_seg, k_seg, kern)
        scores = jnp.where(visible, _dot(q, k, (1, 1)) * kern.scale, _MASK_VALUE)
        m_new = jnp.maximum(m, scores.max(axis=1, keepdims=True))
        p = jnp.exp(scores - m_new)
        correction = jnp.exp(m - m_new)  # rescales what earlier tiles summed under the old max
        l = correction * l + p.sum(axis=1, keepdims=True)
        acc = correction * acc + _dot(p.astype(v.dtype), v)
        return acc, m_new, l

    init = (
        jnp.zeros(q.shape, jnp.float32),
        jnp.full((kern.block_q, 1), -jnp.inf, jnp.float32),
        jnp.zeros((kern.block_q, 1), jnp.float32),
    )
    acc, m, l = lax.fori_loop(_first_key_block(i, kern), _key_blocks_through_diagonal(i, kern), body, init)
    o_ref[...] = (acc / l).astype(o_ref.dtype)
    lse_ref[...] = m + jnp.log(l)


def _dq_kernel(q_ref, k_ref, v_ref, q_seg_ref, k_seg_ref, do_ref, lse_ref, delta_ref, dq_ref, *, kern: _Kernel):
    i = pl.program_id(2)
    q, do = q_ref[...], do_ref[...]  # [block_q, head_dim]
    lse, delta = lse_ref[...], delta_ref[...]  # [block_q, 1]
    q_seg = None if q_seg_ref is None else q_seg_ref[...]

    def body(j, dq):
        keys = _keys(j, kern)
        k, v = k_ref[keys, :], v_ref[keys, :]
        k_seg = None if k_seg_ref is None else k_seg_ref[:, keys]
        p = _probs(q, k, lse, _visible(i, j, q_seg, k_seg, kern), kern)
        ds = p * (_dot(do, v, (1, 1)) - delta)  # softmax backward: dS = P * (dP - rowsum(dO * O))
        return dq + _dot(ds.astype(k.dtype), k)

    zeros = jnp.zeros(q.shape, jnp.float32)
    dq = lax.fori_loop(_first_key_block(i, kern), _key_blocks_through_diagonal(i, kern), body, zeros)
    dq_ref[...] = (dq * kern.scale).astype(dq_ref.dtype)


def _dkv_kernel(
    q_ref, k_ref, v_ref, q_seg_ref, k_seg_ref, do_ref, lse_ref, delta_ref, dk_ref, dv_ref, *, kern: _Kernel
):
    """One key block of one kv head; ``q_ref``/``do_ref`` hold the group's query heads, whole sequence."""
    j = pl.program_id(2)
    k, v = k_ref[...], v_ref[...]  # [block_k, head_dim]
    k_seg = None if k_seg_ref is None else k_seg_ref[...]  # [1, block_k]
    group, seq_pad = q_ref.shape[0], q_ref.shape[1]
    first, end = _query_blocks_seeing(j, kern, seq_pad // kern.block_q)

    def over_query_blocks(h, carry):
        def body(i, carry):
            dk, dv = carry
            rows = _queries(i, kern)
            q, do = q_ref[h, rows, :], do_ref[h, rows, :]
            q_seg = None if q_seg_ref is None else q_seg_ref[rows, :]
            p = _probs(q, k, lse_ref[h, rows, :], _visible(i, j, q_seg, k_seg, kern), kern)
            dv = dv + _dot(p.astype(do.dtype), do, (0, 0))
            ds = p * (_dot(do, v, (1, 1)) - delta_ref[h, rows, :])
            return dk + _dot(ds.astype(q.dtype), q, (0, 0)), dv

        return lax.fori_loop(first, end, body, carry)

    zeros = jnp.zeros(k.shape, jnp.float32)
    dk, dv = lax.fori_loop(0, group, over_query_blocks, (zeros, zeros))
    dk_ref[...] = (dk * kern.scale).astype(dk_ref.dtype)
    dv_ref[...] = dv.astype(dv_ref.dtype)


def _pallas_call(kernel, kern: _Kernel, grid, in_specs, out_specs, out_shape, head_dim: int, name: str):
    if kern.platform == "gpu":
        # Pin the Triton lowering (jax 0.10 otherwise picks Mosaic GPU); warps as in JAX's GPU attention.
        params = pltriton.CompilerParams(num_warps=4 if head_dim <= 64 else 8, num_stages=2)
    elif kern.platform == "tpu":
        params = pltpu.CompilerParams(dimension_semantics=("parallel",) * len(grid))  # programs are independent
    else:
        params = None
    return pl.pallas_call(
        functools.partial(kernel, kern=kern),
        grid=grid,
        in_specs=in_specs,
        out_specs=out_specs,
        out_shape=out_shape,
        compiler_params=params,
        interpret=kern.platform == "cpu",  # the only way Pallas runs on CPU
        name=name,
    )


def _segment_specs(segment_ids, q_spec: pl.BlockSpec, k_spec: pl.BlockSpec):
    """Segment ids twice, as a [batch, seq, 1] column for queries and a [batch, 1, seq] row for keys,
    so the mask is a broadcast compare of two 2-D tiles (the shape TPU needs, and Triton accepts)."""
    if segment_ids is None:
        return [None, None], [None, None]
    batch, seq_pad = segment_ids.shape
    return [q_spec, k_spec], [segment_ids.reshape(batch, seq_pad, 1), segment_ids.reshape(batch, 1, seq_pad)]


def _query_block_specs(q_shape, kv_heads: int, segment_ids, kern: _Kernel):
    """BlockSpecs of the forward and dQ kernels, one program per (batch, head, query block): that query
    block's rows, its row statistics (lse, delta), the whole of its kv head, and its segment ids."""
    _, heads, seq_pad, head_dim = q_shape
    group = heads // kv_heads
    q_rows = pl.BlockSpec((None, None, kern.block_q, head_dim), lambda b, h, i: (b, h, i, 0))
    row_stats = pl.BlockSpec((None, None, kern.block_q, 1), lambda b, h, i: (b, h, i, 0))
    # GQA: query head h reads kv head h // group, so K/V are never repeated. lax.div, not //: jnp's
    # floor division adds sign fix-ups that Mosaic lowers only with a TPU attached (ids are >= 0 anyway).
    kv_all = pl.BlockSpec((None, None, seq_pad, head_dim), lambda b, h, i: (b, lax.div(h, group), 0, 0))
    seg_specs, segs = _segment_specs(
        segment_ids,
        pl.BlockSpec((None, kern.block_q, 1), lambda b, h, i: (b, i, 0)),
        pl.BlockSpec((None, 1, seq_pad), lambda b, h, i: (b, 0, 0)),
    )
    return q_rows, row_stats, kv_all, seg_specs, segs


def _forward(q, k, v, segment_ids, kern: _Kernel):
    """(out, lse): out like q, lse [batch, heads, seq_pad, 1] fp32."""
    batch, heads, seq_pad, head_dim = q.shape
    q_rows, row_stats, kv_all, seg_specs, segs = _query_block_specs(q.shape, k.shape[1], segment_ids, kern)
    return _pallas_call(
        _forward_kernel,
        kern,
        grid=(batch, heads, seq_pad // kern.block_q),
        in_specs=[q_rows, kv_all, kv_all, *seg_specs],
        out_specs=[q_rows, row_stats],
        out_shape=[
            jax.ShapeDtypeStruct(q.shape, q.dtype),
            jax.ShapeDtypeStruct((batch, heads, seq_pad, 1), jnp.float32),
        ],
        head_dim=head_dim,
        name="marin_flash_forward",
    )(q, k, v, *segs)


def _backward(q, k, v, segment_ids, o, lse, do, kern: _Kernel):
    """(dq, dk, dv) from the forward's residuals and the output cotangent ``do``."""
    batch, heads, seq_pad, head_dim = q.shape
    kv_heads = k.shape[1]
    group = heads // kv_heads
    # FlashAttention-2's preprocessing step; one fused elementwise-reduce in XLA.
    delta = jnp.sum(o.astype(jnp.float32) * do.astype(jnp.float32), axis=-1, keepdims=True)  # [b, h, seq, 1]

    q_rows, row_stats, kv_all, seg_specs, segs = _query_block_specs(q.shape, kv_heads, segment_ids, kern)
    dq = _pallas_call(
        _dq_kernel,
        kern,
        grid=(batch, heads, seq_pad // kern.block_q),
        in_specs=[q_rows, kv_all, kv_all, *seg_specs, q_rows, row_stats, row_stats],
        out_specs=q_rows,
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        head_dim=head_dim,
        name="marin_flash_dq",
    )(q, k, v, *segs, do, lse, delta)

    # The dK/dV grid runs over kv heads; block g of the heads axis, of size group, is g's query heads.
    group_all = pl.BlockSpec((None, group, seq_pad, head_dim), lambda b, g, j: (b, g, 0, 0))
    group_stats = pl.BlockSpec((None, group, seq_pad, 1), lambda b, g, j: (b, g, 0, 0))
    kv_rows = pl.BlockSpec((None, None, kern.block_k, head_dim), lambda b, g, j: (b, g, j, 0))
    seg_specs, segs = _segment_specs(
        segment_ids,
        pl.BlockSpec((None, seq_pad, 1), lambda b, g, j: (b, 0, 0)),
        pl.BlockSpec((None, 1, kern.block_k), lambda b, g, j: (b, 0, j)),
    )
    dk, dv = _pallas_call(
        _dkv_kernel,
        kern,
        grid=(batch, kv_heads, seq_pad // kern.block_k),
        in_specs=[group_all, kv_rows, kv_rows, *seg_specs, group_all, group_stats, group_stats],
        out_specs=[kv_rows, kv_rows],
        out_shape=[jax.ShapeDtypeStruct(k.shape, k.dtype), jax.ShapeDtypeStruct(v.shape, v.dtype)],
        head_dim=head_dim,
        name="marin_flash_dkv",
    )(q, k, v, *segs, do, lse, delta)
    return dq, dk, dv


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _flash(q, k, v, segment_ids, kern: _Kernel):
    """Kernel layout: q [batch, heads, seq_pad, head_dim], k/v [batch, kv_heads, seq_pad, head_dim]."""
    return _forward(q, k, v, segment_ids, kern)[0]


def _flash_fwd(q, k, v, segment_ids, kern: _Kernel):
    o, lse = _forward(q, k, v, segment_ids, kern)
    return o, (q, k, v, segment_ids, o, lse)


def _flash_bwd(kern: _Kernel, residuals, do):
    q, k, v, segment_ids, o, lse = residuals
    return (*_backward(q, k, v, segment_ids, o, lse, do, kern), None)  # segment ids: integers, no cotangent


_flash.defvjp(_flash_fwd, _flash_bwd)


def _tiling(seq: int, config: PallasAttentionConfig, platform: str) -> tuple[int, int, int]:
    """(block_q, block_k, padded seq). A short sequence gets blocks no longer than itself, rounded up to
    a legal size (16 for Triton's dot; 128 on TPU, where keys lie along the 128 lanes)."""
    return tiling(seq, config.block_q, config.block_k, min_block=128 if platform == "tpu" else 16)


def unsupported_reason(q_shape, kv_shape, dtype, config: PallasAttentionConfig, platform: str) -> str | None:
    """Why ``flash_attention`` cannot serve these inputs on ``platform``, or None if it can."""
    _, seq, heads, head_dim = q_shape
    if jnp.dtype(dtype) not in [jnp.dtype(d) for d in _SUPPORTED_DTYPES]:
        return f"dtype {jnp.dtype(dtype)} is not one of float32, bfloat16, float16"
    if platform == "gpu" and (head_dim < 16 or head_dim > 256 or head_dim & (head_dim - 1)):
        # Triton tiles are powers of two and its dot needs dims >= 16; past 256 the fp32
        # [block_q, head_dim] accumulator no longer fits in registers (FlashAttention-2's limit too).
        return f"head_dim {head_dim} is not a power of two in [16, 256] (Triton on GPU)"
    if platform == "tpu":
        if config.block_k % 128:
            return f"block_k {config.block_k} is not a multiple of 128 (TPU: keys lie along the 128 lanes)"
        # The dK/dV kernel stages the group's Q and dO and their [seq, 1] fp32 row statistics (padded
        # to 128 lanes) for the whole sequence, double-buffered.
        seq_pad = _tiling(seq, config, platform)[2]
        group = heads // kv_shape[2]
        vmem = 2 * group * seq_pad * (2 * head_dim * jnp.dtype(dtype).itemsize + 2 * 128 * 4)
        if vmem > _TPU_VMEM_BUDGET:
            return f"seq {seq}, group {group}, head_dim {head_dim} need ~{vmem >> 20} MiB of TPU VMEM; use splash"
    return None


def flash_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    segment_ids: jax.Array | None,
    *,
    config: PallasAttentionConfig = PallasAttentionConfig(),
    platform: str | None = None,
    window: int | None = None,
) -> jax.Array:
    """Causal grouped-query attention by our Pallas kernels (shapes and masking as in ``backends.py``), within
    a sliding ``window`` of keys if given.

    ``platform`` picks the lowering, by default ``jax.default_backend()``: "cpu" interprets, "gpu" is
    Triton, "tpu" is Mosaic. Raises ValueError when the kernel cannot serve the inputs there.
    """
    platform = platform or target_platform()
    reason = unsupported_reason(q.shape, k.shape, q.dtype, config, platform)
    if reason is not None:
        raise ValueError(f"pallas attention cannot serve these inputs: {reason}")
    batch, seq, heads, head_dim = q.shape
    block_q, block_k, seq_pad = _tiling(seq, config, platform)
    kern = _Kernel(block_q, block_k, seq, head_dim**-0.5, platform, window)
    if segment_ids is not None:
        segment_ids = pad_segment_ids(segment_ids, seq_pad)
    q, k, v = (to_kernel_layout(x, seq_pad) for x in (q, k, v))
    return from_kernel_layout(_flash(q, k, v, segment_ids, kern), seq)


def _backend_unsupported_reason(q, k, v, segment_ids) -> str | None:
    return unsupported_reason(q.shape, k.shape, q.dtype, PallasAttentionConfig(), target_platform())


@register_attention_backend("pallas", unsupported_reason=_backend_unsupported_reason)
def pallas_attention(q, k, v, segment_ids, window=None):
    """The registered backend: ``flash_attention`` with the default config on the default platform."""
    return flash_attention(q, k, v, segment_ids, window=window)
