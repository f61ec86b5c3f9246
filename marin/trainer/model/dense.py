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
  in row-major order (``layouts.row_major``: a layout constraint stops XLA from folding it back into the
  dot, and from upcasting a bf16 dot to fp32 over its layout), which is small; elsewhere the transposes
  stay free for the GEMM library to absorb. The math is the same either way.
* On CPU, a product of bf16 operands asks for an fp32 result and casts it down. XLA:CPU sends
  bf16 x bf16 -> fp32 to YNNPACK (AMX/AVX512-BF16 where the host has them) but runs bf16 -> bf16
  through a slower path: at the baby Shakespeare model's shapes ([768, 128] x [128, 344] and the like)
  2.3-3.7x faster than fp32 and ~3.5x faster than bf16 -> bf16 on the Intel host (AMX; docs/trainer.md,
  "Built (2026-11-30)"). Accelerators accumulate in fp32 inside the GEMM anyway, so there the product keeps
  the operands' dtype and no convert is added.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp

from marin.trainer.axes import target_platform
from marin.trainer.layouts import row_major
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
        y = _matmul_compute_dtype_grads(x2, w2, jnp.dtype(out_dtype or x.dtype), target_platform() == "cpu")
    # y: [tokens, out]
    return y.reshape(*x.shape[:-n_in], *outer)


NN = (((1,), (0,)), ((), ()))  # a @ b
NT = (((1,), (1,)), ((), ()))  # a @ b.T, with no transpose op for XLA to lay out


def dot_for_backend(a: jax.Array, b: jax.Array, dims, out_dtype, on_cpu: bool) -> jax.Array:
    """A 2-D product in ``out_dtype``; on CPU, narrow operands go through an fp32 result (the fast kernels)."""
    if on_cpu and jnp.dtype(a.dtype).itemsize < 4:
        return jax.lax.dot_general(a, b, dims, preferred_element_type=jnp.float32).astype(out_dtype)
    return jax.lax.dot_general(a, b, dims, preferred_element_type=out_dtype)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def _matmul_compute_dtype_grads(x: jax.Array, w: jax.Array, out_dtype, on_cpu: bool) -> jax.Array:
    return dot_for_backend(x, w, NN, out_dtype, on_cpu)


def _forward(x, w, out_dtype, on_cpu):
    return dot_for_backend(x, w, NN, out_dtype, on_cpu), (x, w)


def _backward(out_dtype, on_cpu, residuals, g):
    x, w = residuals
    g = g.astype(x.dtype)  # gradients flow in the compute dtype
    dx = dot_for_backend(g, w, NT, x.dtype, on_cpu)  # [tokens, in]: a right-transposed operand: XLA:CPU's fast path
    x_t = row_major(x.T) if on_cpu else x.T  # [in, tokens]
    dw = dot_for_backend(x_t, g, NN, w.dtype, on_cpu)  # [in, out]: on CPU not left-transposed (x_t materialised)
    return dx, dw


_matmul_compute_dtype_grads.defvjp(_forward, _backward)
