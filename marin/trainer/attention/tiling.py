"""Tiling and padding shared by the block kernels (our Pallas flash kernel, TPU splash).

A kernel works on ``[rows, head_dim]`` tiles of one head, so the wrapper moves heads before the sequence
and pads the sequence to a multiple of both block sizes; it crops the result back afterwards. Padded keys
come after every real query, so the causal mask hides them; segment ids are edge-padded, which puts padded
rows in the last real document, so every row sees at least one real key (finite softmax everywhere).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def tiling(seq: int, block_q: int, block_k: int, min_block: int) -> tuple[int, int, int]:
    """(block_q, block_k, padded seq). Blocks are powers of two; a short sequence gets blocks no longer than
    itself rounded up to ``min_block`` (a legal size for the hardware), and the padded seq is a multiple of
    both blocks (the larger is a multiple of the smaller)."""
    longest = max(min_block, 1 << max(seq - 1, 0).bit_length())
    block_q, block_k = min(block_q, longest), min(block_k, longest)
    tile = max(block_q, block_k)
    return block_q, block_k, -(-seq // tile) * tile


def to_kernel_layout(x: jax.Array, seq_pad: int) -> jax.Array:
    """[batch, seq, heads, head_dim] -> [batch, heads, seq_pad, head_dim], zero-padded."""
    seq = x.shape[1]
    return jnp.pad(x, ((0, 0), (0, seq_pad - seq), (0, 0), (0, 0))).transpose(0, 2, 1, 3)


def from_kernel_layout(x: jax.Array, seq: int) -> jax.Array:
    """[batch, heads, seq_pad, head_dim] -> [batch, seq, heads, head_dim] (padding dropped)."""
    return x.transpose(0, 2, 1, 3)[:, :seq]


def pad_segment_ids(segment_ids: jax.Array, seq_pad: int) -> jax.Array:
    """[batch, seq] -> [batch, seq_pad] int32, edge-padded (padded rows join the last real document)."""
    seq = segment_ids.shape[1]
    return jnp.pad(segment_ids.astype(jnp.int32), ((0, 0), (0, seq_pad - seq)), mode="edge")
