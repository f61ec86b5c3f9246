"""Shared by the attention-kernel tests: random inputs, one-compile outputs and gradients, max errors."""

import functools

import jax
import jax.numpy as jnp
import numpy as np

FWD_ATOL, GRAD_ATOL = 1e-5, 1e-4  # issue 7's fp32 bar


def inputs(seq, heads, kv_heads, *, packed, batch=2, head_dim=16, seed=0):
    """q, k, v, segment ids (documents of mean length ~3, some of length 1) and an output cotangent."""
    rng = np.random.default_rng(seed)
    q, ct = (jnp.asarray(rng.normal(size=(batch, seq, heads, head_dim)), jnp.float32) for _ in range(2))
    k, v = (jnp.asarray(rng.normal(size=(batch, seq, kv_heads, head_dim)), jnp.float32) for _ in range(2))
    segments = jnp.asarray(np.cumsum(rng.random((batch, seq)) < 0.3, axis=1), jnp.int32) if packed else None
    return q, k, v, segments, ct


@functools.partial(jax.jit, static_argnums=0)
def out_and_grads(attn, q, k, v, segments, ct):
    """One compile for the forward and the backward: the output and (dq, dk, dv) for cotangent ``ct``."""
    out, vjp = jax.vjp(lambda q, k, v: attn(q, k, v, segments), q, k, v)
    return out, vjp(ct.astype(out.dtype))


def max_errors(ours, theirs):
    """Max abs error of the output and of each of dq, dk, dv."""
    (out, grads), (ref_out, ref_grads) = ours, theirs
    err = lambda a, b: float(jnp.max(jnp.abs(a.astype(jnp.float32) - b.astype(jnp.float32))))  # noqa: E731
    return err(out, ref_out), [err(g, r) for g, r in zip(grads, ref_grads)]
