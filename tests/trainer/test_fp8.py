"""FP8 matmuls (``marin/trainer/model/fp8.py``): numerics on CPU, where XLA emulates FP8.

Tolerances come from the formats, not from the runs. Round-to-nearest into e4m3 (3 mantissa bits) leaves
a ~2.6% RMS relative error per operand element, and into e5m2 (2 bits) ~5.2%; independent errors add in
quadrature, so a product's relative Frobenius error is expected near sqrt(2)·2.6% = 3.7% forward and
sqrt(5.2² + 2.6²)% = 5.8% for each gradient. We allow 5% and 7.5%: below each format's unit roundoff
(2^-4 = 6.25%, 2^-3 = 12.5%), far below what a wrong scale (saturation, underflow) produces.
"""

import math
import re
from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from marin.trainer.data import DataConfig, SyntheticSourceConfig, TrainBatches
from marin.trainer.model import init_params, next_token_loss, param_axes
from marin.trainer.model.dense import dense
from marin.trainer.model.fp8 import E4M3, E5M2, fp8_matmul, quantize
from marin.trainer.optim import OptimizerConfig
from marin.trainer.step import PrecisionPolicy, StepConfig, init_state, make_eval_step, make_train_step
from tests.trainer.conftest import tiny_model

FORWARD_RTOL = 0.05  # measured 0.037 (fp32 and bf16 inputs, contraction 64 to 1024)
GRADIENT_RTOL = 0.075  # measured 0.059 for dx and dw
E4M3_MAX, E5M2_MAX = 448.0, 57344.0


def _rel(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def _operands(scale: float = 1.0, dtype=jnp.float32, k: int = 256, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((128, k)) * scale  # [tokens, in]
    w = rng.standard_normal((k, 64)) * 0.02  # [in, out], the model's init scale
    g = rng.standard_normal((128, 64))  # cotangent [tokens, out]
    return jnp.asarray(x, dtype), jnp.asarray(w, dtype), jnp.asarray(g, dtype)


@jax.jit
def _fp8_vjp(x, w, g):
    y, vjp = jax.vjp(fp8_matmul, x, w)
    return (y, *vjp(g))


def _reference(x, w, g):
    """float64 ``y = x @ w`` and its gradients ``(g @ w^T, x^T @ g)``."""
    x, w, g = (np.asarray(a, np.float64) for a in (x, w, g))
    return x @ w, g @ w.T, x.T @ g


def test_worked_example_from_the_module_docstring():
    x, w = jnp.array([[1.0, -2.0], [0.5, 4.0]]), jnp.array([[0.3], [0.1]])
    np.testing.assert_array_equal(quantize(x, E4M3)[0].astype(jnp.float32), [[112, -224], [56, 448]])
    np.testing.assert_array_equal(quantize(w, E4M3)[0].astype(jnp.float32), [[448], [144]])
    scales = 112 * (448 / 0.3)
    np.testing.assert_allclose(fp8_matmul(x, w), [[17920 / scales], [89600 / scales]], rtol=1e-6)
    np.testing.assert_allclose(fp8_matmul(x, w), [[0.10714], [0.53571]], rtol=1e-4)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_value_and_gradients_close_to_fp32(dtype):
    x, w, g = _operands(dtype=dtype)
    y, dx, dw = _fp8_vjp(x, w, g)
    assert (y.dtype, dx.dtype, dw.dtype) == (dtype, dtype, dtype)  # cast back to the compute dtype
    y_ref, dx_ref, dw_ref = _reference(x, w, g)  # of the (bf16-rounded) inputs
    assert _rel(y.astype(jnp.float32), y_ref) < FORWARD_RTOL
    assert _rel(dx.astype(jnp.float32), dx_ref) < GRADIENT_RTOL
    assert _rel(dw.astype(jnp.float32), dw_ref) < GRADIENT_RTOL


def test_batched_form_is_each_blocks_product_within_the_same_error():
    """``fp8_batched_matmul`` (a MoE's blocks, each with its expert's weights): one scale per tensor across
    the blocks, the errors of the 2-D product (measured 0.037 forward, 0.059 for dx and dw)."""
    from marin.trainer.model.fp8 import fp8_batched_matmul

    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((6, 128, 256)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((6, 256, 64)) * 0.02, jnp.float32)
    g = jnp.asarray(rng.standard_normal((6, 128, 64)), jnp.float32)
    y, vjp = jax.vjp(fp8_batched_matmul, x, w)
    dx, dw = vjp(g)
    assert y.shape == (6, 128, 64) and dx.shape == x.shape and dw.shape == w.shape
    assert _rel(y, jnp.einsum("brk,bkn->brn", x, w)) < FORWARD_RTOL
    assert _rel(dx, jnp.einsum("brn,bkn->brk", g, w)) < GRADIENT_RTOL
    assert _rel(dw, jnp.einsum("brk,brn->bkn", x, g)) < GRADIENT_RTOL
    with pytest.raises(ValueError, match=r"must be \[b, rows, in\] and \[b, in, out\]"):
        fp8_batched_matmul(x, w[:3])


def test_ragged_form_is_each_groups_product_within_the_same_error():
    """``fp8_ragged_dot`` (a MoE's sorted rows in groups, the ``ragged`` dispatch): each group's rows times its
    expert's weights, the errors of the 2-D product; rows past the groups come out zero with zero gradient, and
    an empty group's weights get a zero gradient, as ``jax.lax.ragged_dot``'s own."""
    from marin.trainer.model.fp8 import fp8_ragged_dot

    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((200, 256)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((6, 256, 64)) * 0.02, jnp.float32)
    g = jnp.asarray(rng.standard_normal((200, 64)), jnp.float32)
    sizes = jnp.asarray([30, 50, 0, 40, 25, 35], jnp.int32)  # 180 rows in groups, 20 past them
    y, vjp = jax.vjp(lambda x, w: fp8_ragged_dot(x, w, sizes), x, w)
    dx, dw = vjp(g)
    ref_y, ref_vjp = jax.vjp(lambda x, w: jax.lax.ragged_dot(x, w, sizes), x, w)
    ref_dx, ref_dw = ref_vjp(g)
    assert _rel(y, ref_y) < FORWARD_RTOL
    assert _rel(dx, ref_dx) < GRADIENT_RTOL and _rel(dw, ref_dw) < GRADIENT_RTOL
    assert not np.any(np.asarray(y[180:])) and not np.any(np.asarray(dx[180:])) and not np.any(np.asarray(dw[2]))
    with pytest.raises(ValueError, match=r"must be \[rows, in\], \[groups, in, out\] and \[groups\]"):
        fp8_ragged_dot(x, w, sizes[:3])


def test_backward_multiplies_an_e5m2_gradient_with_the_e4m3_operands():
    """dx and dw equal a numpy reference built from explicitly quantized tensors (ml_dtypes' casts)."""
    x, w, g = _operands()

    def q(a, fmt, fp8_max):  # the recipe: per-tensor scale from the current amax, saturate, cast
        scale = np.float32(fp8_max) / np.max(np.abs(a))
        return np.clip(np.asarray(a) * scale, -fp8_max, fp8_max).astype(fmt).astype(np.float64) / scale

    qx, qw, qg = q(x, E4M3, E4M3_MAX), q(w, E4M3, E4M3_MAX), q(g, E5M2, E5M2_MAX)
    y, dx, dw = _fp8_vjp(x, w, g)
    # Hopper's FP8 tensor cores accumulate in reduced precision (DeepSeek-V3 report, sec. 3.3.2): on an
    # H100 (2026-11-25) dw was off by up to 6.6e-5 of its largest value, so a GPU gets 2e-4 of it.
    atol = 2e-4 if jax.default_backend() == "gpu" else 1e-6
    np.testing.assert_allclose(y, qx @ qw, rtol=1e-5, atol=atol * np.abs(qx @ qw).max())
    np.testing.assert_allclose(dx, qg @ qw.T, rtol=1e-5, atol=atol * np.abs(qg @ qw.T).max())
    np.testing.assert_allclose(dw, qx.T @ qg, rtol=1e-5, atol=atol * np.abs(qx.T @ qg).max())
    # ... and jax.grad goes through the same custom_vjp (equal up to the fusion's fp32 rounding)
    grads = jax.jit(jax.grad(lambda x, w: jnp.sum(fp8_matmul(x, w) * g), argnums=(0, 1)))(x, w)
    np.testing.assert_allclose(grads[0], dx, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(grads[1], dw, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("scale", [1e-30, 1e-4, 1e4, 1e30])
def test_scaling_never_overflows(scale):
    """Huge and tiny amax: quantized values fill the fp8 range exactly up to its max and never past it,
    and results stay finite and as accurate as at scale 1. The activations carry ``scale`` and the
    cotangent ``1 / scale``, so both quantizers see both extremes and every true result is representable."""
    x, w, g = _operands(scale)
    g = g / scale
    for tensor, fmt, fp8_max in ((x, E4M3, E4M3_MAX), (g, E5M2, E5M2_MAX)):
        q, inv_scale = quantize(tensor, fmt)
        assert float(jnp.max(jnp.abs(q.astype(jnp.float32)))) == fp8_max  # amax maps to max, not beyond
        assert np.isfinite(float(inv_scale)) and float(inv_scale) > 0
    y, dx, dw = _fp8_vjp(x, w, g)
    y_ref, dx_ref, dw_ref = _reference(x, w, g)
    assert all(bool(jnp.all(jnp.isfinite(a))) for a in (y, dx, dw))
    assert _rel(y, y_ref) < FORWARD_RTOL
    assert _rel(dx, dx_ref) < GRADIENT_RTOL and _rel(dw, dw_ref) < GRADIENT_RTOL


def test_all_zero_and_subnormal_inputs():
    x, w, g = _operands()
    for inputs in ((jnp.zeros_like(x), w), (jnp.full_like(x, 1e-42), w)):  # amax 0; amax below fp32's normals
        y, dx, dw = _fp8_vjp(*inputs, g)
        np.testing.assert_array_equal(y, 0.0)
        np.testing.assert_array_equal(dw, 0.0)
        assert _rel(dx, g @ w.T) < GRADIENT_RTOL
    y, dx, dw = _fp8_vjp(x, w, jnp.zeros_like(g))  # an all-zero gradient
    assert bool(jnp.all(jnp.isfinite(y)))
    np.testing.assert_array_equal(dx, 0.0)
    np.testing.assert_array_equal(dw, 0.0)


def test_config_switch_is_validated_and_off_by_default():
    assert PrecisionPolicy().matmul_dtype == "default"
    with pytest.raises(ValueError, match=r"PrecisionPolicy.matmul_dtype must be one of .*got 'fp8'"):
        PrecisionPolicy(matmul_dtype="fp8")
    with pytest.raises(ValueError, match=r"dense: matmul_dtype must be one of .*got 'e4m3'"):
        dense(jnp.ones((2, 4)), jnp.ones((4, 3)), matmul_dtype="e4m3")


def _dots(program_text: str) -> Counter:
    """``(lhs, rhs, result)`` tensor types of every dot_general in a lowered (StableHLO) program."""
    return Counter(
        re.findall(
            r"stablehlo\.dot_general[^\n]*: \((tensor<[^>]*>), (tensor<[^>]*>)\) -> (tensor<[^>]*>)", program_text
        )
    )


def test_switch_reaches_the_projections_but_not_the_lm_head():
    """Lowered (not compiled) programs: with float8 the 7 projections of a block multiply e4m3 operands
    forward and an e5m2 gradient backward; every dot touching the vocab (256) is the lm_head's and stays
    bf16; the default policy has no FP8 anywhere. Checked through the train and the eval step too."""
    cfg = tiny_model(seq_len=64, scan_layers=True)  # one compiled block: each projection's dot appears once
    tokens = np.ones((2, 64), np.int32)  # 128 tokens
    batch = {
        "input_ids": tokens,
        "targets": tokens,
        "segment_ids": np.zeros_like(tokens),
        "loss_mask": np.ones((2, 64), np.float32),
    }
    params = jax.eval_shape(lambda k: init_params(cfg, k, jnp.bfloat16), jax.random.PRNGKey(0))  # shapes suffice

    def loss_grad_program(matmul_dtype):
        grad = jax.grad(lambda p: next_token_loss(cfg, p, batch, matmul_dtype=matmul_dtype)[0])
        return jax.jit(grad).lower(params).as_text()

    dots = _dots(loss_grad_program("float8"))
    e4, e5 = "f8E4M3FN>", "f8E5M2>"
    forward = sorted((lhs, rhs) for lhs, rhs, _ in dots.elements() if lhs.endswith(e4) and rhs.endswith(e4))
    projections = [(64, 64), (64, 32), (64, 32), (64, 64), (64, 128), (64, 128), (128, 64)]  # q k v o gate up down
    assert forward == sorted((f"tensor<128x{i}xf8E4M3FN>", f"tensor<{i}x{o}xf8E4M3FN>") for i, o in projections)
    backward = [(lhs, rhs) for lhs, rhs, _ in dots.elements() if e5 in lhs + rhs]  # dx = g w^T, dw = x^T g
    assert len(backward) == 14 and all(lhs.endswith((e4, e5)) and rhs.endswith((e4, e5)) for lhs, rhs in backward)
    lm_head = [t for t in dots if any(re.search(r"[<x]256x", part) for part in t)]  # the only vocab-sized dots
    assert lm_head and not any("f8" in part for t in lm_head for part in t)
    assert "f8E" not in loss_grad_program("default")

    opt = OptimizerConfig(learning_rate=1e-2, schedule="constant", warmup=0)
    tx = opt.build(10, param_axes(cfg))
    for policy, has_fp8 in ((PrecisionPolicy(), False), (PrecisionPolicy(matmul_dtype="float8"), True)):
        state = jax.eval_shape(
            lambda k, policy=policy: init_state(cfg, tx, k, ema=False, policy=policy), jax.random.PRNGKey(0)
        )
        train = make_train_step(cfg, tx, opt.lr_schedule(10), StepConfig(precision=policy)).lower(state, batch)
        evaluate = make_eval_step(cfg, policy).lower(state.params, batch)
        assert ("f8E5M2" in train.as_text()) == has_fp8 and ("f8E4M3FN" in evaluate.as_text()) == has_fp8


def _train_losses(cfg, policy: PrecisionPolicy, steps: int, batch_size: int = 8) -> np.ndarray:
    """Per-step training losses of ``steps`` steps on arithmetic-progression documents (the learnable
    synthetic source), from one seed and one data order for every policy."""
    source = SyntheticSourceConfig(vocab_size=cfg.vocab_size, num_tokens=200_000)
    batches = TrainBatches(
        {"s": source.build()}, DataConfig(train={"s": source}), seq_len=cfg.seq_len, batch_size=batch_size
    )
    opt = OptimizerConfig(learning_rate=1e-2, warmup=0.1, schedule="cosine", min_lr_ratio=0.1)
    tx = opt.build(steps, param_axes(cfg))
    state = jax.jit(lambda k: init_state(cfg, tx, k, ema=False, policy=policy))(jax.random.PRNGKey(0))
    step = make_train_step(cfg, tx, opt.lr_schedule(steps), StepConfig(precision=policy))
    losses = []
    for i in range(steps):
        state, metrics = step(state, batches.batch(i))
        losses.append(metrics["loss"])
    return np.asarray(jax.device_get(losses))


@pytest.mark.slow
def test_fp8_training_reaches_the_bf16_loss():
    """100 steps of a 2-layer, width-64, vocab-256, seq-64 model with bf16 compute, projections in bf16 vs
    FP8 (26-45 s on the shared 2-core machine, most of it compiling the two steps). The final loss
    (mean of the last 10 steps, 1.43 nats, down from ln 256 = 5.55) must agree within 0.05 nats: ~1% of
    the loss drop, about the spread between two init seeds of the bf16 run itself (0.048). Measured: 0.016
    (fp8 1.449 vs bf16 1.433). Every 10-step window must agree within 0.1 (measured at most 0.026)."""
    cfg = tiny_model(seq_len=64)
    bf16 = _train_losses(cfg, PrecisionPolicy(compute_dtype="bfloat16"), steps=100)
    fp8 = _train_losses(cfg, PrecisionPolicy(compute_dtype="bfloat16", matmul_dtype="float8"), steps=100)
    assert np.all(np.isfinite(fp8))
    final_bf16, final_fp8 = bf16[-10:].mean(), fp8[-10:].mean()
    assert final_bf16 < 0.4 * math.log(cfg.vocab_size)  # it learned, so the comparison means something
    assert abs(final_fp8 - final_bf16) < 0.05, (final_fp8, final_bf16)
    windows = np.abs(fp8.reshape(10, 10).mean(1) - bf16.reshape(10, 10).mean(1))
    assert windows.max() < 0.1, windows
