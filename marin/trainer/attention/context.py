"""Attention over sequences split across devices (context parallelism): a ring, or all-gathered keys and values.

Under a mesh whose ``context`` axis splits the ``seq`` logical axis (``MeshConfig(context=k)``), every device holds
``seq / k`` positions of every row, and ``backends.attention`` comes here. Each device attends its own queries to
every key of the sequence, by one of two methods:

* ``ring`` (Liu et al. 2023, "Ring Attention"): keys and values go round the context axis in ``k - 1`` steps of
  ``ppermute``; each device folds every block it receives into its queries' output with the online softmax
  (running output and log-sum-exp). The backward is a second ring that recomputes the probabilities from the saved
  log-sum-exp (flash attention's backward) and carries each block's dK/dV accumulator round with it, home after
  ``k`` steps. Per device it keeps O(seq / k) of everything: no device ever holds the whole sequence.
* ``all_gather`` (Llama 3's choice, Dubey et al. 2024, section 3.3.2): keys and values are all-gathered over the
  axis (cheap under GQA: kv_heads / heads of the queries' size), each device attends its queries to all of them
  block by block, and autodiff turns the gather into a reduce-scatter of dK/dV. Per device it holds the whole
  sequence's K/V per layer.

Both run the same block math, ``blockwise.py``'s (GQA heads as rows of ``[batch, kv_heads, seq * group, head_dim]``,
products contracting their left operand's last dim) with a log-sum-exp per row so blocks merge exactly. Masks
come from the global positions of the rows and keys (causal, the sliding window, equal segment ids), so any
layout of the sequence over the devices is correct; blocks that no query of the block may see are skipped
(``lax.cond``). ``docs/trainer.md`` ("Context parallelism") has the measurements behind ``default_method``.

Load balance: the zigzag layout. With positions in order, device 0's queries see only its own keys and device
``k - 1``'s see everything: causal skipping would leave device 0 idle for most of the ring. The trainer's loss
(``model/llama.py``) instead permutes each sequence by ``zigzag_order``: cut into ``2k`` chunks, device ``i`` holds
chunks ``i`` and ``2k - 1 - i``. Worked example, seq 16, ``k = 2`` (chunks of 4)::

    zigzag_order(16, 2) = [0 1 2 3 | 12 13 14 15 || 4 5 6 7 | 8 9 10 11]
                            device 0 (chunks 0, 3)   device 1 (chunks 1, 2)

Each device's queries and keys are two half-blocks of 4 positions. Of the 4 (query half, key half) pairs, the
home step computes 3 (two diagonal, one full) and every other step exactly 2 (device ``j < i``'s keys: its first
half is visible to both of ``i``'s halves, its second to neither), so every device does the same work at every
step. Positions drive RoPE too (``hidden_states(..., positions=...)``), so each token is rotated by its position in
the global sequence, wherever it sits. Every position-wise layer (norms, MLP, the loss) is indifferent to the order.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec

from marin.trainer.attention.blockwise import _dot, _dot_t
from marin.trainer.axes import BATCH, HEAD_DIM, HEADS, KV_HEADS, SEQ, ShardingContext, active_sharding, partition_spec

CONTEXT_METHODS = ("ring", "all_gather")
_NEG = -1e30  # the log-sum-exp of no keys: finite, so merging two empty blocks gives 0, never NaN


def default_method(platform: str) -> str:
    """``all_gather`` on CPU, ``ring`` elsewhere. Measured on 8 host devices (docs/trainer.md, "Context
    parallelism"): the all-gather sends about 2/3 of the ring's bytes (the ring's backward passes K/V round again
    and dK/dV with them) in one collective per layer and pass instead of one per ring step, for slightly more
    temporary memory (the gathered K/V of each layer, saved for the backward); both hold a small fraction of one
    device's. On TPU and GPU the ring: its per-device memory stays O(seq / k) where a long context's gathered
    K/V per layer (a 128k-token 8B layer: 512 MiB in bf16) is what context parallelism exists to avoid, and
    each step's neighbour exchange overlaps that step's compute."""
    return "all_gather" if platform == "cpu" else "ring"


def sequence_axes(context: ShardingContext | None) -> tuple[str, ...]:
    """The mesh axes that split ``seq`` under ``context``'s rules (empty without a context or a rule)."""
    if context is None:
        return ()
    target = partition_spec((SEQ,), context.rules)[0]
    return (target,) if isinstance(target, str) else tuple(target or ())


def sequence_shards(context: ShardingContext | None = None) -> int:
    """Into how many pieces each sequence is split (by default under the active ``use_sharding`` context)."""
    context = active_sharding() if context is None else context
    return math.prod(context.mesh.shape[name] for name in sequence_axes(context)) if context is not None else 1


def check_sequence_split(seq: int, context: ShardingContext | None, *, what: str = "seq_len") -> None:
    """Refuse a sequence length the context axis cannot cut into its zigzag's ``2k`` equal chunks."""
    shards = sequence_shards(context)
    if shards > 1 and seq % (2 * shards):
        axes = ", ".join(f"{name}={context.mesh.shape[name]}" for name in sequence_axes(context))
        raise ValueError(
            f"{what} {seq} does not split over the context axis ({axes}): context parallelism cuts each sequence "
            f"into 2 x {shards} = {2 * shards} equal chunks (zigzag), so it needs a multiple of {2 * shards}"
        )


def zigzag_order(seq: int, shards: int) -> np.ndarray | None:
    """The global positions in the order the devices hold them (device ``i``: chunks ``i`` and ``2k - 1 - i`` of
    ``2k``); None for an unsplit sequence. Indexing a ``[batch, seq]`` array with it gives the zigzag layout."""
    if shards == 1:
        return None
    if seq % (2 * shards):
        raise ValueError(f"zigzag_order: seq {seq} is not a multiple of 2 x {shards} context shards")
    chunk = seq // (2 * shards)
    return np.concatenate(
        [
            np.r_[i * chunk : (i + 1) * chunk, (2 * shards - 1 - i) * chunk : (2 * shards - i) * chunk]
            for i in range(shards)
        ]
    )


def context_parallel_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    segment_ids: jax.Array | None,
    positions: np.ndarray | None = None,
    *,
    window: int | None = None,
    method: str = "default",
) -> jax.Array:
    """Causal GQA attention (``backends.attention``'s contract) with ``seq`` split over the active context's mesh.

    ``positions`` [seq] (static numpy) are the global positions of the sequence's slots, in the order the
    arrays hold them (``zigzag_order``'s, or ``arange(seq)`` when None); masks and skipping follow them."""
    context = active_sharding()
    shards = sequence_shards(context)
    if shards == 1:
        raise ValueError("context_parallel_attention: the active sharding does not split 'seq' over any mesh axis")
    if method == "default":
        method = default_method(context.mesh.devices.flat[0].platform)
    if method not in CONTEXT_METHODS:
        raise ValueError(f"context attention method must be one of {CONTEXT_METHODS} or 'default', got {method!r}")
    batch, seq, heads, head_dim = q.shape
    if seq % shards:
        raise ValueError(f"attention: seq {seq} does not split over {shards} context shards")
    positions = np.arange(seq) if positions is None else np.asarray(positions)
    if positions.shape != (seq,):
        raise ValueError(f"attention: positions {positions.shape} != (seq,) ({seq},)")
    if segment_ids is None:
        segment_ids = jnp.zeros((batch, seq), jnp.int32)
    q_spec, kv_spec, seg_spec, pos_spec = _specs(context, q.shape, k.shape)
    axes = sequence_axes(context)
    local = functools.partial(_on_device, axes=axes, shards=shards, window=window, method=method)
    fn = jax.shard_map(
        local,
        mesh=context.mesh,
        in_specs=(q_spec, kv_spec, kv_spec, seg_spec, pos_spec),
        out_specs=q_spec,
        check_vma=False,
    )
    return fn(q, k, v, segment_ids.astype(jnp.int32), jnp.asarray(positions, jnp.int32))


def _specs(context: ShardingContext, q_shape, kv_shape):
    rules = context.rules
    q_spec = partition_spec((BATCH, SEQ, HEADS, HEAD_DIM), rules)
    kv_spec = partition_spec((BATCH, SEQ, KV_HEADS, HEAD_DIM), rules)
    if q_spec[3] is not None or kv_spec[3] is not None:
        raise ValueError(f"context parallel attention: the sharding rules split 'head_dim' over {q_spec[3]}")
    if q_spec[2] != kv_spec[2]:
        raise ValueError(
            f"context parallel attention: the rules put heads over {q_spec[2]} but kv_heads over {kv_spec[2]}; both "
            "must be on the same mesh axes, so that each device holds its query heads' kv heads"
        )
    names = lambda t: (t,) if isinstance(t, str) else tuple(t or ())  # noqa: E731
    for what, size, target in (("heads", q_shape[2], q_spec[2]), ("kv_heads", kv_shape[2], kv_spec[2])):
        ways = math.prod(context.mesh.shape[n] for n in names(target))
        if size % ways:
            raise ValueError(f"context parallel attention: {what} {size} does not divide into {ways} shards")
    return q_spec, kv_spec, PartitionSpec(q_spec[0], q_spec[1]), PartitionSpec(q_spec[1])


# ----------------------------------------------------------------------------------------------------------
# Per device: q [b, c, heads, hd], k/v [b, c, kv, hd], segment ids [b, c], positions [c] (c = seq / shards)


def _on_device(q, k, v, segment_ids, positions, *, axes, shards, window, method):
    batch, chunk, heads, head_dim = q.shape
    kv_heads = k.shape[2]
    group = heads // kv_heads
    rows = q.reshape(batch, chunk, kv_heads, group, head_dim).transpose(0, 2, 1, 3, 4)  # [b, kv, c, group, hd]
    rows = rows.reshape(batch, kv_heads, chunk * group, head_dim)  # row r is position r // group
    k_t, v_t = k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)  # [b, kv, c, hd]
    halves = 2 if chunk % 2 == 0 else 1  # the zigzag's two chunks per device: the unit of skipping
    static = (group, halves, window)
    if method == "ring":
        out = _ring(rows, k_t, v_t, positions, segment_ids, axes, shards, static)
    else:
        gather = functools.partial(jax.lax.all_gather, axis_name=axes, tiled=True)
        keys = (gather(k_t, axis=2), gather(v_t, axis=2), gather(positions, axis=0), gather(segment_ids, axis=1))
        out = _gathered(rows, positions, segment_ids, *keys, shards, static)
    out = out.reshape(batch, kv_heads, chunk, group, head_dim).transpose(0, 2, 1, 3, 4)  # [b, c, kv, group, hd]
    return out.reshape(batch, chunk, heads, head_dim).astype(q.dtype)


def _split(x, parts: int, axis: int, group: int = 1) -> list:
    """``x`` cut into ``parts`` equal pieces along ``axis`` (of ``group`` rows per position)."""
    size = x.shape[axis] // parts
    return [jax.lax.slice_in_dim(x, i * size, (i + 1) * size, axis=axis) for i in range(parts)]


def _rows_of(positions, segment_ids, group):
    """Per-row positions [rows] and segment ids [b, rows] of queries laid out as rows (``group`` rows each)."""
    return jnp.repeat(positions, group), jnp.repeat(segment_ids, group, axis=1)


def _visible(q_pos, k_pos, window):
    """Whether any key of a block may be seen by any query of a block (positions: contiguous runs)."""
    seen = jnp.min(k_pos) <= jnp.max(q_pos)
    if window is not None:
        seen = seen & (jnp.max(k_pos) > jnp.min(q_pos) - window)
    return seen


def _mask(q_pos, q_seg, k_pos, k_seg, window):
    """[b, 1, rows, keys]: causal, within the window, within one segment."""
    visible = k_pos[None, :] <= q_pos[:, None]
    if window is not None:
        visible = visible & (k_pos[None, :] > q_pos[:, None] - window)
    return visible[None, None] & (q_seg[:, None, :, None] == k_seg[:, None, None, :])


def _block_forward(rows, k, v, q_pos, q_seg, k_pos, k_seg, window):
    """One (query block, key block): the normalised output [b, kv, rows, hd] fp32 and log-sum-exp [b, kv, rows]."""
    scores = _dot_t(rows, k) * rows.shape[-1] ** -0.5  # [b, kv, rows, keys] fp32
    mask = _mask(q_pos, q_seg, k_pos, k_seg, window)
    top = jnp.max(jnp.where(mask, scores, _NEG), axis=-1, keepdims=True)
    p = jnp.where(mask, jnp.exp(scores - top), 0.0)
    total = jnp.sum(p, axis=-1)
    out = _dot(p.astype(v.dtype), v) / jnp.maximum(total, 1e-30)[..., None]
    return out, jnp.where(total > 0, top[..., 0] + jnp.log(jnp.maximum(total, 1e-30)), _NEG)


def _merge(a, b):
    """Two (output, log-sum-exp) partial softmaxes over disjoint keys merged into one (online softmax)."""
    (out_a, lse_a), (out_b, lse_b) = a, b
    lse = jnp.logaddexp(lse_a, lse_b)
    return out_a * jnp.exp(lse_a - lse)[..., None] + out_b * jnp.exp(lse_b - lse)[..., None], lse


def _block_backward(rows, k, v, d_out, lse, delta, q_pos, q_seg, k_pos, k_seg, window):
    """Flash attention's backward for one block: (dq [b, kv, rows, hd], dk, dv [b, kv, keys, hd]), fp32."""
    scale = rows.shape[-1] ** -0.5
    scores = _dot_t(rows, k) * scale
    p = jnp.where(_mask(q_pos, q_seg, k_pos, k_seg, window), jnp.exp(scores - lse[..., None]), 0.0)
    d_v = _dot(jnp.swapaxes(p, 2, 3), d_out)  # [b, kv, keys, hd]
    d_s = p * (_dot_t(d_out, v) - delta[..., None]) * scale
    return _dot(d_s, k), _dot(jnp.swapaxes(d_s, 2, 3), rows), d_v


def _skipped_forward(rows, *_):
    return jnp.zeros(rows.shape, jnp.float32), jnp.full(rows.shape[:-1], _NEG, jnp.float32)


def _skipped_backward(rows, k, v, *_):
    return jnp.zeros(rows.shape, jnp.float32), jnp.zeros(k.shape, jnp.float32), jnp.zeros(v.shape, jnp.float32)


def _key_halves(keys, halves):
    k, v, k_pos, k_seg = keys
    return list(zip(*(_split(x, halves, axis) for x, axis in ((k, 2), (v, 2), (k_pos, 0), (k_seg, 1)))))


def _attend(queries, keys, acc, group, halves, window):
    """Fold one key chunk into the running (output, lse) of each query half, skipping invisible block pairs."""
    rows_h, qpos_h, qseg_h = queries
    forward = functools.partial(_block_forward, window=window)
    acc = list(acc)
    for a in range(halves):
        q_pos, q_seg = _rows_of(qpos_h[a], qseg_h[a], group)
        for k_b, v_b, kp_b, ks_b in _key_halves(keys, halves):
            visible = _visible(qpos_h[a], kp_b, window)
            block = jax.lax.cond(visible, forward, _skipped_forward, rows_h[a], k_b, v_b, q_pos, q_seg, kp_b, ks_b)
            acc[a] = _merge(acc[a], block)
    return acc


def _grad_chunk(queries, grads, keys, group, halves, window):
    """dq of each query half and (dk, dv) of one key chunk, skipping invisible block pairs."""
    rows_h, qpos_h, qseg_h = queries
    dout_h, lse_h, delta_h = grads
    backward = functools.partial(_block_backward, window=window)
    split_keys = _key_halves(keys, halves)
    d_q, d_k, d_v = [], [None] * halves, [None] * halves
    for a in range(halves):
        q_pos, q_seg = _rows_of(qpos_h[a], qseg_h[a], group)
        dq_a = None
        for b, (k_b, v_b, kp_b, ks_b) in enumerate(split_keys):
            operands = (rows_h[a], k_b, v_b, dout_h[a], lse_h[a], delta_h[a], q_pos, q_seg, kp_b, ks_b)
            dq, dk, dv = jax.lax.cond(_visible(qpos_h[a], kp_b, window), backward, _skipped_backward, *operands)
            dq_a = dq if dq_a is None else dq_a + dq
            d_k[b] = dk if d_k[b] is None else d_k[b] + dk
            d_v[b] = dv if d_v[b] is None else d_v[b] + dv
        d_q.append(dq_a)
    return jnp.concatenate(d_q, axis=2), jnp.concatenate(d_k, axis=2), jnp.concatenate(d_v, axis=2)


def _queries(rows, positions, segment_ids, group, halves):
    return _split(rows, halves, 2), _split(positions, halves, 0), _split(segment_ids, halves, 1)


def _empty(rows, halves):
    shape = rows.shape[:2] + (rows.shape[2] // halves,)
    return [(jnp.zeros(shape + rows.shape[3:], jnp.float32), jnp.full(shape, _NEG, jnp.float32))] * halves


def _grads(rows, out, lse, d_out, halves):
    delta = jnp.sum(d_out.astype(jnp.float32) * out, axis=-1)  # [b, kv, rows]
    return _split(d_out.astype(jnp.float32), halves, 2), _split(lse, halves, 2), _split(delta, halves, 2)


def _finish(acc):
    return jnp.concatenate([o for o, _ in acc], axis=2), jnp.concatenate([lse for _, lse in acc], axis=2)


# ---- the ring


def _rotate(x, axes, shards):
    """Send each device's ``x`` to the next device along the context axes (the last wraps to the first)."""
    return jax.lax.ppermute(x, axes, [(i, (i + 1) % shards) for i in range(shards)])


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6, 7))
def _ring(rows, k, v, positions, segment_ids, axes, shards, static):
    return _ring_forward(rows, k, v, positions, segment_ids, axes, shards, static)[0]


def _ring_forward(rows, k, v, positions, segment_ids, axes, shards, static):
    group, halves, window = static
    queries = _queries(rows, positions, segment_ids, group, halves)
    keys = (k, v, positions, segment_ids)
    acc = _attend(queries, keys, _empty(rows, halves), group, halves, window)

    def step(carry, _):
        keys, acc = carry
        keys = tuple(_rotate(x, axes, shards) for x in keys)  # after step s: device (i - s)'s chunk
        return (keys, _attend(queries, keys, acc, group, halves, window)), None

    (_, acc), _ = jax.lax.scan(step, (keys, acc), None, length=shards - 1)
    out, lse = _finish(acc)
    return out, (rows, k, v, positions, segment_ids, out, lse)


def _ring_fwd(rows, k, v, positions, segment_ids, axes, shards, static):
    return _ring_forward(rows, k, v, positions, segment_ids, axes, shards, static)


def _ring_bwd(axes, shards, static, residuals, d_out):
    group, halves, window = static
    rows, k, v, positions, segment_ids, out, lse = residuals
    queries = _queries(rows, positions, segment_ids, group, halves)
    grads = _grads(rows, out, lse, d_out, halves)
    keys = (k, v, positions, segment_ids)
    d_q, d_k, d_v = _grad_chunk(queries, grads, keys, group, halves, window)

    def step(carry, _):
        keys, d_q, d_k, d_v = carry
        # the chunk's dK/dV accumulators travel with it; after ``shards`` rotations they are home
        keys, d_k, d_v = (
            tuple(_rotate(x, axes, shards) for x in keys),
            _rotate(d_k, axes, shards),
            _rotate(d_v, axes, shards),
        )
        dq, dk, dv = _grad_chunk(queries, grads, keys, group, halves, window)
        return (keys, d_q + dq, d_k + dk, d_v + dv), None

    (_, d_q, d_k, d_v), _ = jax.lax.scan(step, (keys, d_q, d_k, d_v), None, length=shards - 1)
    d_k, d_v = _rotate(d_k, axes, shards), _rotate(d_v, axes, shards)
    return d_q.astype(rows.dtype), d_k.astype(k.dtype), d_v.astype(v.dtype), None, None


_ring.defvjp(_ring_fwd, _ring_bwd)


# ---- all-gathered keys and values (the gather is outside: autodiff makes its transpose a reduce-scatter)


@functools.partial(jax.custom_vjp, nondiff_argnums=(7, 8))
def _gathered(rows, positions, segment_ids, k, v, k_pos, k_seg, shards, static):
    return _gathered_forward(rows, positions, segment_ids, k, v, k_pos, k_seg, shards, static)[0]


def _chunks(k, v, k_pos, k_seg, shards):
    """The gathered keys as [shards, ...] stacks of each device's chunk, for ``scan``."""
    split = lambda x, axis: jnp.stack(_split(x, shards, axis))  # noqa: E731
    return split(k, 2), split(v, 2), split(k_pos, 0), split(k_seg, 1)


def _gathered_forward(rows, positions, segment_ids, k, v, k_pos, k_seg, shards, static):
    group, halves, window = static
    queries = _queries(rows, positions, segment_ids, group, halves)

    def step(acc, keys):
        return _attend(queries, keys, acc, group, halves, window), None

    acc, _ = jax.lax.scan(step, _empty(rows, halves), _chunks(k, v, k_pos, k_seg, shards))
    out, lse = _finish(acc)
    return out, (rows, positions, segment_ids, k, v, k_pos, k_seg, out, lse)


def _gathered_fwd(rows, positions, segment_ids, k, v, k_pos, k_seg, shards, static):
    return _gathered_forward(rows, positions, segment_ids, k, v, k_pos, k_seg, shards, static)


def _gathered_bwd(shards, static, residuals, d_out):
    group, halves, window = static
    rows, positions, segment_ids, k, v, k_pos, k_seg, out, lse = residuals
    queries = _queries(rows, positions, segment_ids, group, halves)
    grads = _grads(rows, out, lse, d_out, halves)

    def step(d_q, keys):
        dq, dk, dv = _grad_chunk(queries, grads, keys, group, halves, window)
        return d_q + dq, (dk, dv)

    d_q, (d_k, d_v) = jax.lax.scan(step, jnp.zeros(rows.shape, jnp.float32), _chunks(k, v, k_pos, k_seg, shards))
    join = lambda x: jnp.concatenate(list(x), axis=2)  # noqa: E731  [shards, b, kv, c, hd] -> [b, kv, seq, hd]
    return d_q.astype(rows.dtype), None, None, join(d_k).astype(k.dtype), join(d_v).astype(v.dtype), None, None


_gathered.defvjp(_gathered_fwd, _gathered_bwd)
