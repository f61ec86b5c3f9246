"""Our Pallas flash-attention kernel (``marin/trainer/attention/pallas.py``), interpreted on CPU.

Values and gradients against ``reference_attention`` (fp32: max abs error <= 1e-5 forward, <= 1e-4
gradients; bf16 looser, stated at its test) and against JAX's own Pallas attention kernel; that the causal
loop bounds really skip blocks; and that the GPU (Triton) and TPU (Mosaic) paths *lower* from this
machine (they are not compiled or run here). Shapes are small and blocks 16/32 because interpret mode
compiles the kernel bodies into XLA loops: each shape costs ~1-3 s to compile.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.pallas.ops.gpu import attention as jax_pallas_attention

from marin.trainer.attention import PallasAttentionConfig, attention, flash_attention, reference_attention
from marin.trainer.attention.pallas import unsupported_reason
from tests.trainer.attention_cases import FWD_ATOL, GRAD_ATOL, inputs, max_errors, out_and_grads


def _pallas(block_q, block_k):
    return functools.partial(flash_attention, config=PallasAttentionConfig(block_q=block_q, block_k=block_k))


@pytest.mark.parametrize(
    "seq,heads,kv_heads,block_q,block_k,packed",
    [
        (40, 4, 4, 16, 32, False),  # GQA 1; 40 is a multiple of neither block
        (37, 8, 2, 16, 16, True),  # GQA 4; ~12 documents per row, some a single token
        (50, 8, 1, 32, 16, True),  # GQA 8; block_q > block_k
    ],
)
def test_matches_reference_values_and_gradients_fp32(seq, heads, kv_heads, block_q, block_k, packed):
    q, k, v, segments, ct = inputs(seq, heads, kv_heads, packed=packed)
    ours = out_and_grads(_pallas(block_q, block_k), q, k, v, segments, ct)
    assert ours[0].shape == q.shape and ours[0].dtype == jnp.float32
    fwd, grads = max_errors(ours, out_and_grads(reference_attention, q, k, v, segments, ct))
    assert fwd <= FWD_ATOL and max(grads) <= GRAD_ATOL, (fwd, grads)


def test_bf16_within_bf16_rounding_of_fp32_reference():
    """bf16 has an 8-bit significand (spacing 2^-7 = 0.0078 at 1): outputs and gradients here are O(1),
    so we allow 2e-2 forward and 5e-2 gradients against fp32 on the same (bf16-rounded) inputs. The
    reference itself run in bf16 is off by ~1.2e-2 / ~3e-2 on this shape (measured)."""
    q, k, v, segments, ct = inputs(45, 8, 2, packed=True)
    q, k, v = (x.astype(jnp.bfloat16) for x in (q, k, v))
    ours = out_and_grads(_pallas(16, 16), q, k, v, segments, ct)
    assert ours[0].dtype == jnp.bfloat16 and all(g.dtype == jnp.bfloat16 for g in ours[1])
    fp32 = [x.astype(jnp.float32) for x in (q, k, v)]
    fwd, grads = max_errors(ours, out_and_grads(reference_attention, *fp32, segments, ct))
    assert fwd <= 2e-2 and max(grads) <= 5e-2, (fwd, grads)


def test_matches_jax_pallas_gpu_attention_kernel():
    """JAX's ``mha`` in interpret mode with its own Pallas backward ("triton"; "xla" would just
    differentiate a jnp reference). It needs seq a multiple of its blocks and has no GQA."""
    q, _, _, segments, ct = inputs(48, 4, 4, packed=True)
    _, k, v, _, _ = inputs(48, 4, 4, packed=False, seed=1)
    blocks = jax_pallas_attention.BlockSizes(
        block_q=16, block_k=16, block_q_dkv=16, block_kv_dkv=16, block_q_dq=16, block_kv_dq=16
    )
    theirs = functools.partial(
        jax_pallas_attention.mha,
        sm_scale=16**-0.5,
        causal=True,
        block_sizes=blocks,
        backward_pass_impl="triton",
        interpret=True,
    )
    ours = out_and_grads(_pallas(16, 16), q, k, v, segments, ct)
    fwd, grads = max_errors(ours, out_and_grads(theirs, q, k, v, segments, ct))
    assert fwd <= FWD_ATOL and max(grads) <= GRAD_ATOL, (fwd, grads)


def test_causal_loop_bounds_never_read_blocks_above_the_diagonal():
    """A NaN spreads through any tile that reads it, even a fully masked one (0 * NaN = NaN), so NaNs
    placed where only skipped tiles would look stay out of every row that must not read them."""
    q, k, v, _, ct = inputs(64, 2, 1, packed=False)  # 4 query blocks x 4 key blocks of 16
    run = functools.partial(out_and_grads, _pallas(16, 16), q, k)
    # V's last key block: only query block 3 may read it, in the forward and in the dQ kernel.
    out, (dq, _, _) = run(v.at[:, 48:].set(jnp.nan), None, ct)
    assert np.isfinite(out[:, :48]).all() and np.isfinite(dq[:, :48]).all()
    assert np.isnan(out[:, 48:]).all()  # the diagonal tile is read: the probe does detect reads
    ref_out, _ = out_and_grads(reference_attention, q, k, v, None, ct)
    np.testing.assert_allclose(out[:, :48], ref_out[:, :48], atol=FWD_ATOL, rtol=0)
    # The cotangent of query block 0: only key block 0 may read it in the dK/dV kernel.
    _, (_, dk, dv) = run(v, None, ct.at[:, :16].set(jnp.nan))
    assert np.isfinite(dk[:, 16:]).all() and np.isfinite(dv[:, 16:]).all()
    assert np.isnan(dk[:, :16]).all() and np.isnan(dv[:, :16]).all()


@pytest.mark.parametrize("field,value", [("block_q", 48), ("block_k", 8), ("block_q", True)])
def test_config_validation_names_field_and_value(field, value):
    with pytest.raises(ValueError, match=f"PallasAttentionConfig.{field} must be a power of two >= 16, got {value}"):
        PallasAttentionConfig(**{field: value})


def test_inputs_the_kernel_cannot_serve_are_a_clear_error():
    q, k, v, _, _ = inputs(24, 4, 2, packed=False, head_dim=24)
    with pytest.raises(ValueError, match="pallas attention cannot serve these inputs: dtype int32"):
        attention(q.astype(jnp.int32), k.astype(jnp.int32), v.astype(jnp.int32), None, backend="pallas")
    with pytest.raises(ValueError, match=r"head_dim 24 is not a power of two in \[16, 256\] \(Triton on GPU\)"):
        flash_attention(q, k, v, None, platform="gpu")
    assert flash_attention(q, k, v, None, platform="cpu").shape == q.shape  # interpreted, any head_dim works
    config = PallasAttentionConfig()
    assert "block_k 64 is not a multiple of 128" in unsupported_reason(
        (1, 256, 8, 128), (1, 256, 2, 128), jnp.bfloat16, PallasAttentionConfig(block_k=64), "tpu"
    )
    tpu = functools.partial(unsupported_reason, dtype=jnp.bfloat16, config=config, platform="tpu")
    assert tpu((1, 1024, 8, 128), (1, 1024, 2, 128)) is None
    assert "~24 MiB of TPU VMEM" in tpu((1, 2048, 8, 128), (1, 2048, 2, 128))


@pytest.mark.parametrize(
    "platform,lowering,custom_call",
    [
        ("gpu", "cuda", "__gpu$xla.gpu.triton"),
        ("tpu", "tpu", "tpu_custom_call"),
    ],
)
def test_accelerator_paths_lower(platform, lowering, custom_call):
    """The same kernels, forward and backward, lower through Pallas's Triton and Mosaic TPU lowerings.
    Lowering is not compiling: the Triton and Mosaic compilers run only on the accelerator."""
    q = jax.ShapeDtypeStruct((2, 200, 8, 128), jnp.bfloat16)
    kv = jax.ShapeDtypeStruct((2, 200, 2, 128), jnp.bfloat16)
    segments = jax.ShapeDtypeStruct((2, 200), jnp.int32)
    attn = functools.partial(flash_attention, platform=platform)
    grads = jax.grad(lambda *a: jnp.sum(attn(*a).astype(jnp.float32)), argnums=(0, 1, 2))
    text = jax.jit(grads).trace(q, kv, kv, segments).lower(lowering_platforms=(lowering,)).as_text()
    assert custom_call in text
    for kernel in ("marin_flash_forward", "marin_flash_dq", "marin_flash_dkv"):
        assert kernel in text
