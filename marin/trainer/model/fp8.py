"""FP8 matmuls with per-tensor dynamic scaling: ``PrecisionPolicy(matmul_dtype="float8")``.

The torchtitan lesson (issue 7: +33% throughput from FP8 linear layers at equal loss) is that on Hopper
GPUs a transformer's linear layers can run on FP8 tensor cores with nothing more than per-tensor scales.
This module is that recipe (torchao's "tensorwise" scaling with dynamic scales) for the model's one
matmul helper, ``dense``:

    y = fp8_matmul(x, w, out_dtype)     # x [tokens, in], w [in, out] -> y [tokens, out] in out_dtype

Forward, each operand is quantized to ``float8_e4m3fn`` (3 mantissa bits, max 448) with a scale
computed from its *current* absolute maximum, and the product accumulates in fp32::

    scale_x = 448 / amax(x)                       # per tensor: one scalar
    q_x     = e4m3(clip(x * scale_x, -448, 448))  # clip = saturate: a cast past 448 is NaN, not inf
    y       = dot(q_x, q_w, preferred_element_type=f32) / (scale_x * scale_w)

Backward (a ``jax.custom_vjp``), the incoming gradient is quantized to ``float8_e5m2`` (2 mantissa bits,
max 57344: gradients need range more than precision, Micikevicius et al. 2022, "FP8 formats for deep
learning") and multiplied with the saved e4m3 operands: ``dx = g @ w^T``, ``dw = x^T @ g``. Per-tensor
scales make the quantization of ``x^T`` the same as that of ``x``, so the forward's FP8 operands are the
residuals (1 byte per element, half of bf16). Hopper multiplies e5m2 by e4m3 but not e5m2 by e5m2, which
no matmul here asks for.

Worked example (exact values; run it)::

    x = [[1.0, -2.0], [0.5, 4.0]]      amax 4    scale 448/4 = 112   q_x = [[112, -224], [56, 448]]
    w = [[0.3], [0.1]]                  amax 0.3  scale 448/0.3       q_w = [[448], [149.33 -> 144]]
    dot(q_x, q_w) = [[112·448 - 224·144], [56·448 + 448·144]] = [[17920], [89600]]
    y = dot / (112 · 1493.33)         = [[0.1071], [0.5357]]      fp32: [[0.1], [0.55]]

The 0.1 -> 0.107 is e4m3's rounding of 0.1·1493.3 = 149.3 to 144 (steps of 16 between 128 and 256; at
most 2^-4 = 6% of a value), magnified by the cancellation in that row. On random matrices the error is
statistical: ~2.6% RMS per e4m3 operand and ~5.2% per e5m2 gradient, so products come out with ~3.7%
relative (Frobenius) error forward and ~5.9% backward, whatever the contraction length; yet a 100-step
run of a tiny model ends 0.016 nats from the bf16 run's loss of 1.43 (``tests/trainer/test_fp8.py``).

Guards: amax is floored at ``fp8_max · 2^-126``, so an all-zero tensor gets a finite scale (2^126; its
zeros stay zeros) instead of 448/0 = inf (whose 0·inf would be NaN), and the scale of a tiny tensor and
its inverse stay normal fp32 numbers; the clip keeps every quantized value within ±fp8 max, so scaling
never overflows, whether amax is 1e-30 or 1e30. A tensor holding inf or NaN still gives NaN: the loop
stops on a non-finite loss, as it would in bf16.

What stays in higher precision: norms, embeddings, RoPE, attention (scores, softmax, values: the
attention backend's own precision), the loss, and the lm_head. The lm_head is excluded, as torchtitan
keeps its ``output`` projection out of float8: its product feeds the softmax directly, so its error lands
on the loss undiluted by later layers, and with tied embeddings it *is* the (high-precision) embedding
table. It is a small share of a large model's FLOPs (7% of Llama 3 8B's matmul parameters) but most of a
nano model's, one more reason small models gain nothing here.

Where it runs fast. On CPU, XLA emulates FP8 (it widens the operands, so the numerics are exactly FP8's
and the speed is not): every test here checks numerics only. FP8 tensor cores exist on NVIDIA Hopper
(H100/H200) and later; there XLA rewrites these dots into cuBLASLt FP8 GEMMs, which want matmul dims that
are multiples of 16 (all presets' are). To measure the speedup on an H100/H200, A/B the same config with
the option off and on, nothing else changed, and compare tokens/s (not MFU: its peak is bf16's)::

    .venv/bin/python benchmarks/trainer_bench.py --configs small --peers jax --peak 989e12 \\
        --jax-variant bf16='{"compute_dtype": "bfloat16"}' \\
        --jax-variant fp8='{"compute_dtype": "bfloat16", "matmul_dtype": "float8"}'

(989e12 is H100 SXM's dense bf16 peak; the script rewrites ``benchmarks/results/trainer_bench.json``, so
keep a copy of this CPU's numbers.) ``small`` is too narrow for FP8 to pay, so then measure where it can:
two short ``train_lm`` runs of ``llama_1b`` or ``llama_8b`` with ``TrainerConfig(precision=
PrecisionPolicy(matmul_dtype=...))`` "default" vs "float8", comparing ``throughput/tokens_per_s`` in each
``metrics.jsonl`` once compilation is past. Check that FP8 GEMMs ran: the compiled step's HLO
(``train_step.lower(state, batch).compile().as_text()``) has ``__cublas$lt$matmul$f8`` custom calls.
Expect little at small widths: the amax reductions and casts are memory-bound work that only large
matmuls amortise. Under FSDP/TP each amax is a max over the tensor's shards, so XLA adds one scalar
all-reduce per quantized tensor (torchtitan batches the weights' into one; not done here).
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
    return _fp8_matmul(x, w, jnp.dtype(out_dtype or x.dtype), x.dtype, w.dtype)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3, 4))
def _fp8_matmul(x, w, out_dtype, x_dtype, w_dtype):
    return _forward(x, w, out_dtype, x_dtype, w_dtype)[0]


def _forward(x, w, out_dtype, x_dtype, w_dtype):
    qx, x_inv = quantize(x, E4M3)
    qw, w_inv = quantize(w, E4M3)
    y = _scaled_dot(qx, qw, x_inv, w_inv, contract=(1, 0))  # [tokens, out]
    return y.astype(out_dtype), (qx, qw, x_inv, w_inv)


def _backward(out_dtype, x_dtype, w_dtype, residuals, g):
    qx, qw, x_inv, w_inv = residuals
    qg, g_inv = quantize(g, E5M2)
    dx = _scaled_dot(qg, qw, g_inv, w_inv, contract=(1, 1))  # [tokens, out] . [in, out]^T -> [tokens, in]
    dw = _scaled_dot(qx, qg, x_inv, g_inv, contract=(0, 0))  # [tokens, in]^T . [tokens, out] -> [in, out]
    return dx.astype(x_dtype), dw.astype(w_dtype)


_fp8_matmul.defvjp(_forward, _backward)


def _scaled_dot(a, b, a_inv, b_inv, contract: tuple[int, int]) -> jax.Array:
    """fp32 ``a . b`` over dim ``contract[0]`` of ``a`` and ``contract[1]`` of ``b``, then unscaled."""
    dims = (((contract[0],), (contract[1],)), ((), ()))
    acc = jax.lax.dot_general(a, b, dims, preferred_element_type=jnp.float32)
    # One scale at a time: the product of two inverse scales can underflow where each factor does not.
    return acc * a_inv * b_inv
