"""``blockwise``: causal attention by blocks of queries over only the keys each block can see (the CPU default).

    out = blockwise_attention(q, k, v, segment_ids)  # q [batch, seq, heads, head_dim], k/v [.., kv_heads, ..]

At seq 512 with blocks of 128 queries, block ``i`` scores its queries against keys ``[0, 128 (i + 1))``: 10 of the
16 key tiles of the full square, so 5/8 of its FLOPs and memory, and each block's softmax is exact (every key a
query may see is in its block). Grouped-query heads ride along as rows: q is laid out
``[batch, kv_heads, seq * group, head_dim]`` (row ``t * group + g`` is query ``t`` of the group's head ``g``), so one
batched matmul per block serves the whole group and K/V are never repeated. With a sliding ``window`` a block
also starts its keys where its first query's window does (``start - window + 1``), so a windowed layer costs
O(seq * (block + window)).

The backward is written out (``custom_vjp``) rather than differentiated: it reuses the forward's probabilities
(``dS = P * (dP - rowsum(dO * O))``), and every matmul contracts its left operand's last dim. XLA:CPU sends only
such dots to its fast (YNNPACK) kernels; autodiff's ``dK = dS^T Q`` and ``dV = P^T dO`` contract the left operand's
first dim and fell to a slow generic dot. Here they are ``dK^T = Q^T dS`` and ``dV^T = dO^T P``, with the small
``Q^T`` / ``dO^T`` ([head_dim, rows]) materialised instead of the large transposed probabilities.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from marin.trainer.layouts import row_major

BLOCKWISE_QUERY_BLOCK = 128
"""Query positions per block from seq 512 up; shorter sequences use blocks of 64 (docs/trainer.md has the
measurements)."""


def blockwise_attention(q, k, v, segment_ids, window=None):
    """Causal grouped-query attention (within ``window`` keys if given); see the module docstring. Exact: a
    full softmax per query row."""
    batch, seq, heads, head_dim = q.shape
    kv_heads = k.shape[2]
    group = heads // kv_heads
    rows = q.reshape(batch, seq, kv_heads, group, head_dim).transpose(0, 2, 1, 3, 4)  # [b, kv, seq, group, hd]
    rows = row_major(rows.reshape(batch, kv_heads, seq * group, head_dim))  # [batch, kv_heads, seq * group, hd]
    k_t, v_t = row_major(k.transpose(0, 2, 1, 3)), row_major(v.transpose(0, 2, 1, 3))  # [b, kv_heads, seq, hd]
    block = BLOCKWISE_QUERY_BLOCK if seq > 256 else BLOCKWISE_QUERY_BLOCK // 2
    out = _attend(rows, k_t, v_t, segment_ids, group, block, window)  # [batch, kv_heads, seq * group, hd]
    out = out.reshape(batch, kv_heads, seq, group, head_dim).transpose(0, 2, 1, 3, 4)  # [b, seq, kv, group, hd]
    return out.reshape(batch, seq, heads, head_dim)


def _blocks(seq: int, block: int, window: int | None) -> list[tuple[int, int, int]]:
    """(first key, first query, end) of each query block: its queries are ``start:stop``, its keys ``lo:stop``."""
    out = []
    for start in range(0, seq, block):
        lo = 0 if window is None else max(0, start - window + 1)
        out.append((lo, start, min(start + block, seq)))
    return out


def _mask(segment_ids, lo: int, start: int, stop: int, group: int, window: int | None) -> jax.Array:
    """Boolean [batch or 1, 1, (stop - start) * group, stop - lo]: query rows of positions start:stop vs keys
    lo:stop."""
    q_pos = jnp.repeat(jnp.arange(start, stop), group)[:, None]  # row r is position start + r // group
    k_pos = jnp.arange(lo, stop)[None, :]
    visible = k_pos <= q_pos
    if window is not None:
        visible = visible & (k_pos > q_pos - window)
    mask = visible[None, None]
    if segment_ids is not None:
        q_seg = jnp.repeat(segment_ids[:, start:stop], group, axis=1)  # [batch, rows]
        mask = mask & (q_seg[:, None, :, None] == segment_ids[:, None, None, lo:stop])
    return mask


def _dot(a, b):
    """[b, kv, m, k] @ [b, kv, k, n] in fp32."""
    return jax.lax.dot_general(a, b, (((3,), (2,)), ((0, 1), (0, 1))), preferred_element_type=jnp.float32)


def _dot_t(a, b):
    """[b, kv, m, k] @ [b, kv, n, k]^T in fp32 (a right-transposed operand is on XLA:CPU's fast path too)."""
    return jax.lax.dot_general(a, b, (((3,), (3,)), ((0, 1), (0, 1))), preferred_element_type=jnp.float32)


def _forward(rows, k, v, segment_ids, group, block, window):
    scale = rows.shape[-1] ** -0.5
    outs, probs = [], []
    for lo, start, stop in _blocks(k.shape[2], block, window):
        scores = _dot_t(rows[:, :, start * group : stop * group], k[:, :, lo:stop]) * scale  # [b, kv, rows, keys]
        scores = jnp.where(_mask(segment_ids, lo, start, stop, group, window), scores, jnp.finfo(jnp.float32).min)
        p = jax.nn.softmax(scores, axis=-1)  # fp32
        outs.append(_dot(p.astype(v.dtype), v[:, :, lo:stop]).astype(v.dtype))  # [b, kv, rows, head_dim]
        probs.append(p)
    return jnp.concatenate(outs, axis=2), probs


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5, 6))
def _attend(rows, k, v, segment_ids, group, block, window):
    return _forward(rows, k, v, segment_ids, group, block, window)[0]


def _attend_fwd(rows, k, v, segment_ids, group, block, window):
    out, probs = _forward(rows, k, v, segment_ids, group, block, window)
    return out, (rows, k, v, out, probs)


def _attend_bwd(group, block, window, residuals, d_out):
    rows, k, v, out, probs = residuals
    seq, scale = k.shape[2], rows.shape[-1] ** -0.5
    delta = jnp.sum(d_out.astype(jnp.float32) * out.astype(jnp.float32), axis=-1, keepdims=True)  # [b, kv, rows, 1]
    # [b, kv, head_dim, rows], materialised row-major (XLA would otherwise fold the transposes into the dots)
    rows_t, d_out_t = row_major(jnp.swapaxes(rows, 2, 3)), row_major(jnp.swapaxes(d_out, 2, 3))
    d_rows, d_k_t, d_v_t = [], [], []
    for (lo, start, stop), p in zip(_blocks(seq, block, window), probs):
        r = slice(start * group, stop * group)
        d_p = _dot_t(d_out[:, :, r], v[:, :, lo:stop])  # [b, kv, rows, keys]
        d_s = (p * (d_p - delta[:, :, r]) * scale).astype(rows.dtype)
        d_rows.append(_dot(d_s, k[:, :, lo:stop]).astype(rows.dtype))  # [b, kv, rows, head_dim]
        pad = ((0, 0), (0, 0), (0, 0), (lo, seq - stop))  # keys outside lo:stop saw none of this block's queries
        # [b, kv, head_dim, seq]; row_major keeps XLA from turning the final transpose into dS^T Q (slow)
        d_k_t.append(jnp.pad(row_major(_dot(rows_t[..., r], d_s)), pad))
        d_v_t.append(jnp.pad(row_major(_dot(d_out_t[..., r], p.astype(d_out.dtype))), pad))
    d_k = jnp.swapaxes(sum(d_k_t), 2, 3).astype(k.dtype)  # [b, kv, seq, head_dim]
    d_v = jnp.swapaxes(sum(d_v_t), 2, 3).astype(v.dtype)
    return jnp.concatenate(d_rows, axis=2), d_k, d_v, None  # segment ids: integers, no gradient


_attend.defvjp(_attend_fwd, _attend_bwd)
