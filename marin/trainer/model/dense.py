"""``dense(x, w)``: the model's one matmul helper, and an XLA:CPU workaround for weight gradients.

    q = dense(x, wq)              # x [batch, seq, embed] . wq [embed, heads, head_dim] -> [batch, seq, heads, head_dim]
    y = dense(attn, wo, n_in=2)   # contracts the last 2 dims of attn with the first 2 of wo

Every projection is a 2-D ``[tokens, in] @ [in, out]`` product after free (row-major) reshapes.
``matmul_dtype="float8"`` runs that product in FP8 with per-tensor scales (``fp8.py``); the default runs it
in the operands' dtype.

Why a helper, with its own backward on every platform:

* Gradients flow in the compute dtype. Plain autodiff of a product whose result is wider than its
  operands (the lm_head: bf16 operands, fp32 logits) multiplies the fp32 cotangent with the weights
  upcast to fp32: two fp32 matmuls per step where bf16 ones would do (found on an H100, where the step
  test saw them). The backward here casts the cotangent to the operands' dtype first, as torch's autocast
  does.
* On CPU, XLA hands matmuls to its fast YNNPACK kernels only when the left operand is not transposed.
  The weight gradient ``dW = x^T @ g`` is transposed on the left, so XLA runs it through a slow generic
  contraction (Eigen's operand packing shows up in profiles; docs/trainer.md) and may even materialise
  the far larger ``g^T`` (64 MB for nano's logits). On CPU the backward materialises ``x^T`` explicitly
  (an ``optimization_barrier`` stops XLA from folding it back into the dot), which is small; elsewhere
  the transposes stay free for the GEMM library to absorb. The math is the same either way.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp

from marin.trainer.model.fp8 import fp8_matmul

MATMUL_DTYPES = ("default", "float8")
"""How ``dense`` multiplies: in the operands' dtype, or in FP8 (``fp8.py``)."""


def dense(x: jax.Array, w: jax.Array, n_in: int = 1, out_dtype=None, matmul_dtype: str = "default") -> jax.Array:
    """Contract the last ``n_in`` dims of ``x`` with the first ``n_in`` dims of ``w``.

    The result has dtype ``out_dtype`` (default ``x.dtype``) whatever ``matmul_dtype`` is."""
    inner, outer = x.shape[-n_in:], w.shape[n_in:]
    if tuple(w.shape[:n_in]) != tuple(inner):
        raise ValueError(f"dense: x {x.shape} and w {w.shape} disagree on the contracted dims")
    if matmul_dtype not in MATMUL_DTYPES:
        raise ValueError(f"dense: matmul_dtype must be one of {MATMUL_DTYPES}, got {matmul_dtype!r}")
    x2 = x.reshape(-1, math.prod(inner))  # [tokens, in]
    w2 = w.reshape(math.prod(inner), math.prod(outer))  # [in, out]
    if matmul_dtype == "float8":
        y = fp8_matmul(x2, w2, jnp.dtype(out_dtype or x.dtype))
    else:
        y = _matmul_compute_dtype_grads(x2, w2, jnp.dtype(out_dtype or x.dtype), jax.default_backend() == "cpu")
    # y: [tokens, out]
    return y.reshape(*x.shape[:-n_in], *outer)


def _matmul(x: jax.Array, w: jax.Array, out_dtype) -> jax.Array:
    return jnp.dot(x, w, preferred_element_type=out_dtype)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def _matmul_compute_dtype_grads(x: jax.Array, w: jax.Array, out_dtype, materialize_x_t: bool) -> jax.Array:
    return _matmul(x, w, out_dtype)


def _forward(x, w, out_dtype, materialize_x_t):
    return _matmul(x, w, out_dtype), (x, w)


def _backward(out_dtype, materialize_x_t, residuals, g):
    x, w = residuals
    g = g.astype(x.dtype)  # gradients flow in the compute dtype
    dx = jnp.dot(g, w.T)  # [tokens, in]: a right-transposed operand is on XLA:CPU's fast path
    x_t = jax.lax.optimization_barrier(x.T) if materialize_x_t else x.T  # [in, tokens]
    dw = jnp.dot(x_t, g)  # [in, out]: on CPU not left-transposed, since x_t is materialised
    return dx, dw.astype(w.dtype)


_matmul_compute_dtype_grads.defvjp(_forward, _backward)
