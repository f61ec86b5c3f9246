"""FP8 matmuls with per-tensor dynamic scaling: ``PrecisionPolicy(matmul_dtype="float8")``.

The torchtitan / torchao "tensorwise" recipe for the model's one matmul helper, ``dense``, and for the grouped
matmuls of a mixture of experts' blocks (``moe.py``):

    y = fp8_matmul(x, w, out_dtype)          # x [tokens, in], w [in, out] -> y [tokens, out] in out_dtype
    y = fp8_batched_matmul(x, w, out_dtype)  # x [blocks, rows, in], w [blocks, in, out] -> [blocks, rows, out]
    y = fp8_ragged_dot(x, w, sizes, out_dtype)  # x [rows, in] in groups of sizes[g] rows, w [groups, in, out]

Forward, each operand is quantized to ``float8_e4m3fn`` (max 448) with a scale from its current absolute
maximum, and the product accumulates in fp32::

    scale_x = 448 / amax(x)                       # per tensor: one scalar
    q_x     = e4m3(clip(x * scale_x, -448, 448))  # clip = saturate: a cast past 448 is NaN, not inf
    y       = dot(q_x, q_w, preferred_element_type=f32) / (scale_x * scale_w)

Backward (a ``jax.custom_vjp``), the incoming gradient is quantized to ``float8_e5m2`` (range over
precision, Micikevicius et al. 2022) and multiplied with the saved e4m3 operands; per-tensor scales make
the quantization of ``x^T`` that of ``x``, so the forward's FP8 operands are the residuals.

Guards: amax is floored at ``fp8_max · 2^-126`` (an all-zero tensor gets a finite scale instead of 448/0),
and the clip keeps every quantized value within ±fp8 max. Norms, embeddings, RoPE, attention, the loss and
the lm_head stay in higher precision (the lm_head feeds the softmax directly, as torchtitan keeps its
output projection out of float8). A worked example with exact values, the measured error, and how to
measure the speedup on Hopper GPUs are in docs/fp8.md. On CPU, XLA emulates FP8: numerics only.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

E4M3 = jnp.float8_e4m3fn
"""Forward operands: activations and weights."""
E5M2 = jnp.float8_e5m2
"""Gradients flowing backward."""


def quantize(x: jax.Array, dtype) -> tuple[jax.Array, jax.Array]:
    """``(q, inv_scale)`` with ``x ≈ q * inv_scale``: ``x`` scaled so its amax maps to ``dtype``'s max.

    ``q`` has dtype ``dtype`` and ``|q| <= finfo(dtype).max`` always; ``inv_scale`` is an fp32 scalar.
    """
    fp8_max = float(jnp.finfo(dtype).max)
    amax = jnp.max(jnp.abs(x)).astype(jnp.float32)
    # The floor keeps scale <= 2^126: an all-zero tensor (amax 0) gets a finite scale instead of 448/0 = inf
    # (then 0 * scale = 0, not 0 * inf = NaN), and both the scale and its inverse stay normal fp32 numbers
    # (XLA may flush subnormals to zero, as XLA:CPU does, which would zero the inverse of a huge scale).
    scale = fp8_max / jnp.maximum(amax, fp8_max * 2.0**-126)
    # Saturate: fp32 rounding can put amax * scale a hair above fp8_max, and e4m3fn has no inf (the cast
    # of anything past 464 is NaN).
    q = jnp.clip(x.astype(jnp.float32) * scale, -fp8_max, fp8_max).astype(dtype)
    return q, 1.0 / scale


def fp8_matmul(x: jax.Array, w: jax.Array, out_dtype=None) -> jax.Array:
    """``x [tokens, in] @ w [in, out]`` in FP8 (e4m3 operands, e5m2 gradients, fp32 accumulation).

    The result has dtype ``out_dtype`` (default ``x.dtype``); the gradients have ``x``'s and ``w``'s dtypes.
    """
    if x.ndim != 2 or w.ndim != 2:
        raise ValueError(f"fp8_matmul: x {x.shape} and w {w.shape} must be 2-D")
    return _fp8_matmul(x, w, jnp.dtype(out_dtype or x.dtype), x.dtype, w.dtype)


def fp8_batched_matmul(x: jax.Array, w: jax.Array, out_dtype=None) -> jax.Array:
    """``x[b] @ w[b]`` for every ``b`` of x [blocks, rows, in] and w [blocks, in, out], in FP8 as ``fp8_matmul``
    (one scale per tensor: all blocks share the activations' scale, and the weights'), e.g. a MoE's blocks
    of rows each times its expert's gathered weights."""
    if x.ndim != 3 or w.ndim != 3 or x.shape[0] != w.shape[0]:
        raise ValueError(f"fp8_batched_matmul: x {x.shape} and w {w.shape} must be [b, rows, in] and [b, in, out]")
    return _fp8_matmul(x, w, jnp.dtype(out_dtype or x.dtype), x.dtype, w.dtype)


def fp8_ragged_dot(x: jax.Array, w: jax.Array, group_sizes: jax.Array, out_dtype=None) -> jax.Array:
    """``jax.lax.ragged_dot(x, w, group_sizes)`` in FP8 as ``fp8_matmul``: the rows of x [rows, in] in consecutive
    groups of ``group_sizes[g]``, group g times w[g] [in, out] (rows past the groups come out zero), one scale
    for all rows and one for every group's weights, e4m3 forward, an e5m2 gradient backward, fp32
    accumulation: a MoE's sorted assignments each times its expert (the ``ragged`` dispatch). The weights'
    gradient is the ragged product over the rows, ``ragged_dot_general`` with the groups on its contracting
    dimension, as JAX's own transpose of ``ragged_dot`` computes it."""
    if x.ndim != 2 or w.ndim != 3 or x.shape[1] != w.shape[1] or group_sizes.shape != (w.shape[0],):
        raise ValueError(
            f"fp8_ragged_dot: x {x.shape}, w {w.shape} and group_sizes {group_sizes.shape} must be [rows, in], "
            "[groups, in, out] and [groups]"
        )
    sizes = group_sizes.astype(jnp.int32)
    return _fp8_ragged_dot(x, w, sizes, jnp.dtype(out_dtype or x.dtype), x.dtype, w.dtype)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5))
def _fp8_ragged_dot(x, w, group_sizes, out_dtype, x_dtype, w_dtype):
    return _ragged_forward(x, w, group_sizes, out_dtype, x_dtype, w_dtype)[0]


def _ragged_forward(x, w, group_sizes, out_dtype, x_dtype, w_dtype):
    qx, x_inv = quantize(x, E4M3)
    qw, w_inv = quantize(w, E4M3)
    acc = jax.lax.ragged_dot(qx, qw, group_sizes, preferred_element_type=jnp.float32)
    return (acc * x_inv * w_inv).astype(out_dtype), (qx, qw, x_inv, w_inv, group_sizes)


def _ragged_backward(out_dtype, x_dtype, w_dtype, residuals, g):
    qx, qw, x_inv, w_inv, group_sizes = residuals
    qg, g_inv = quantize(g, E5M2)
    # dx [rows, in]: each group's gradient rows times its expert's weights transposed
    dx = jax.lax.ragged_dot(qg, jnp.swapaxes(qw, 1, 2), group_sizes, preferred_element_type=jnp.float32)
    # dw [groups, in, out]: x^T g over each group's rows (the ragged dimension contracted)
    numbers = jax.lax.RaggedDotDimensionNumbers(
        dot_dimension_numbers=(((0,), (0,)), ((), ())), lhs_ragged_dimensions=[0], rhs_group_dimensions=[]
    )
    dw = jax.lax.ragged_dot_general(qx, qg, group_sizes, numbers, preferred_element_type=jnp.float32)
    dx, dw = dx * g_inv * w_inv, dw * x_inv * g_inv
    return dx.astype(x_dtype), dw.astype(w_dtype), None


_fp8_ragged_dot.defvjp(_ragged_forward, _ragged_backward)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3, 4))
def _fp8_matmul(x, w, out_dtype, x_dtype, w_dtype):
    return _forward(x, w, out_dtype, x_dtype, w_dtype)[0]


# Dims below count from the end, so one rule serves [tokens, in] . [in, out] and its batched form with a
# leading [blocks] dim on both operands (a batch dim of the dot).


def _forward(x, w, out_dtype, x_dtype, w_dtype):
    qx, x_inv = quantize(x, E4M3)
    qw, w_inv = quantize(w, E4M3)
    y = _scaled_dot(qx, qw, x_inv, w_inv, contract=(-1, -2))  # [.., tokens, out]
    return y.astype(out_dtype), (qx, qw, x_inv, w_inv)


def _backward(out_dtype, x_dtype, w_dtype, residuals, g):
    qx, qw, x_inv, w_inv = residuals
    qg, g_inv = quantize(g, E5M2)
    dx = _scaled_dot(qg, qw, g_inv, w_inv, contract=(-1, -1))  # [.., tokens, out] . [.., in, out]^T -> [.., tokens, in]
    dw = _scaled_dot(qx, qg, x_inv, g_inv, contract=(-2, -2))  # [.., tokens, in]^T . [.., tokens, out] -> [.., in, out]
    return dx.astype(x_dtype), dw.astype(w_dtype)


_fp8_matmul.defvjp(_forward, _backward)


def _scaled_dot(a, b, a_inv, b_inv, contract: tuple[int, int]) -> jax.Array:
    """fp32 ``a . b`` over dim ``contract[0]`` of ``a`` and ``contract[1]`` of ``b`` (negative: from the end),
    batched over the leading dim when both are 3-D, then unscaled."""
    batch = ((0,), (0,)) if a.ndim == 3 else ((), ())
    dims = (((contract[0] % a.ndim,), (contract[1] % b.ndim,)), batch)
    acc = jax.lax.dot_general(a, b, dims, preferred_element_type=jnp.float32)
    # One scale at a time: the product of two inverse scales can underflow where each factor does not.
    return acc * a_inv * b_inv
