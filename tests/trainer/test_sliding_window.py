"""Sliding-window attention (Mistral, Qwen2/3's windowed layers) in every attention backend.

The semantics are Hugging Face's (``masking_utils.sliding_window_overlay``: key ``s`` is visible to query ``t``
when ``s > t - window``, on top of causal), checked against a mask written the slow way; then each backend's
values and gradients against ``reference`` with the window, packed and not (fp32: 1e-5 forward, 1e-4
gradients); that the block kernels really skip the key blocks left of the window (a NaN placed there never
reaches a row whose window excludes it); and that the windowed Pallas kernels lower for GPU and TPU. cuDNN's
windowed routes run only on a GPU (``test_cudnn_attention.py``).
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from marin.trainer.attention import (
    PallasAttentionConfig,
    SplashAttentionConfig,
    attention,
    attention_mask,
    blockwise_attention,
    flash_attention,
    reference_attention,
    splash_attention,
)
from tests.trainer.attention_cases import FWD_ATOL, GRAD_ATOL, inputs, max_errors, out_and_grads


def slow_mask(segments: np.ndarray, window: int | None) -> np.ndarray:
    """[batch, q, k]: HF's rule, one position pair at a time."""
    batch, seq = segments.shape
    out = np.zeros((batch, seq, seq), bool)
    for b in range(batch):
        for t in range(seq):
            for s in range(seq):
                in_window = window is None or s > t - window
                out[b, t, s] = s <= t and in_window and segments[b, s] == segments[b, t]
    return out


@pytest.mark.parametrize("window", [1, 3, 8, 40, None])
def test_the_mask_is_hugging_faces_sliding_window(window):
    _, _, _, segments, _ = inputs(20, 1, 1, packed=True)
    got = np.asarray(attention_mask(segments, 20, window=window))[:, 0]
    np.testing.assert_array_equal(got, slow_mask(np.asarray(segments), window))


def test_window_one_sees_only_itself_and_a_long_window_is_full_attention():
    q, k, v, segments, _ = inputs(24, 4, 2, packed=True)
    own = reference_attention(q, k, v, segments, window=1)
    np.testing.assert_allclose(own, jnp.repeat(v, 2, axis=2), atol=1e-6)  # softmax over one key
    full = reference_attention(q, k, v, segments)
    np.testing.assert_array_equal(reference_attention(q, k, v, segments, window=24), full)
    assert (
        float(jnp.max(jnp.abs(reference_attention(q, k, v, None, window=5) - reference_attention(q, k, v, None)))) > 0.1
    )


_BACKENDS = {
    "xla": lambda **_: functools.partial(attention, backend="xla"),
    "blockwise": lambda **_: blockwise_attention,
    "pallas": lambda block_q=16, block_k=16: functools.partial(
        flash_attention, config=PallasAttentionConfig(block_q=block_q, block_k=block_k)
    ),
    "splash": lambda **_: functools.partial(splash_attention, config=SplashAttentionConfig(block_q=128, block_kv=128)),
}


@pytest.mark.parametrize(
    "backend,seq,heads,kv_heads,window,packed",
    [
        ("xla", 40, 4, 2, 7, True),
        ("blockwise", 300, 4, 2, 70, False),  # 3 query blocks of 128: the last starts its keys at 187
        ("blockwise", 150, 8, 2, 5, True),
        ("pallas", 50, 8, 2, 20, False),  # blocks of 16: query block 3 starts at key block 1
        ("pallas", 37, 4, 1, 5, True),
        ("pallas", 64, 4, 4, 64, True),  # the window covers everything: plain causal
        ("splash", 300, 4, 2, 100, True),  # 3 x 3 blocks of 128: the band skips block (2, 0)
    ],
)
def test_backends_match_reference_values_and_gradients_fp32(backend, seq, heads, kv_heads, window, packed):
    q, k, v, segments, ct = inputs(seq, heads, kv_heads, packed=packed)
    fn = functools.partial(_BACKENDS[backend](), window=window)
    ours = out_and_grads(fn, q, k, v, segments, ct)
    ref = out_and_grads(functools.partial(reference_attention, window=window), q, k, v, segments, ct)
    fwd, grads = max_errors(ours, ref)
    assert fwd <= FWD_ATOL and max(grads) <= GRAD_ATOL, (fwd, grads)


def test_pallas_never_reads_key_blocks_left_of_the_window():
    """NaN values at keys 0-15 (key block 0 of 16): with window 16, query block 1 (rows 16-31) still reaches
    key 1, but blocks 2 and 3 start at key block 1. A tile that read the NaN would spread it to every row it
    serves, masked or not (0 * NaN = NaN), so rows 32+ stay finite only if block 0 is skipped for them."""
    q, k, v, _, ct = inputs(64, 2, 1, packed=False)
    fn = functools.partial(_BACKENDS["pallas"](), window=16)
    out, (dq, _, _) = out_and_grads(fn, q, k, v.at[:, :16].set(jnp.nan), None, ct)
    reads = np.isnan(np.asarray(out)).any(axis=(0, 2, 3))
    assert reads[:32].all() and not reads[32:].any()  # the probe detects reads; the skip holds
    assert np.isfinite(np.asarray(dq)[:, 32:]).all()
    ref = reference_attention(q, k, v, None, window=16)
    np.testing.assert_allclose(out[:, 32:], ref[:, 32:], atol=FWD_ATOL, rtol=0)
    # The dK/dV kernel: key block j sees query blocks j and j + 1 only, so the NaN cotangent of rows 48-63
    # (query block 3) reaches key blocks 2 and 3 and never 0 or 1.
    _, (_, dk, dv) = out_and_grads(fn, q, k, v, None, ct.at[:, 48:].set(jnp.nan))
    assert np.isfinite(dk[:, :32]).all() and np.isfinite(dv[:, :32]).all()
    assert np.isnan(dk[:, 32:]).all() and np.isnan(dv[:, 32:]).all()


def test_blockwise_never_reads_key_blocks_left_of_the_window():
    """At seq 512 (query blocks of 128) with window 64, block 3 (rows 384-511) reads keys 321-511 and block 2
    keys 193-383: NaN values at keys 0-255 reach block 2's rows, never block 3's."""
    q, k, v, _, ct = inputs(512, 2, 1, packed=False, batch=1)
    fn = functools.partial(blockwise_attention, window=64)
    out, (dq, _, _) = out_and_grads(fn, q, k, v.at[:, :256].set(jnp.nan), None, ct)
    reads = np.isnan(np.asarray(out)).any(axis=(0, 2, 3))
    assert reads[:384].all() and not reads[384:].any()
    assert np.isfinite(np.asarray(dq)[:, 384:]).all()
    ref = reference_attention(q, k, v, None, window=64)
    np.testing.assert_allclose(out[:, 384:], ref[:, 384:], atol=FWD_ATOL, rtol=0)


@pytest.mark.parametrize("window", [0, -3, 2.5, True])
def test_a_window_that_is_not_a_positive_int_is_refused(window):
    q, k, v, _, _ = inputs(8, 2, 1, packed=False)
    with pytest.raises(ValueError, match=f"attention window must be a positive int .* got {window!r}"):
        attention(q, k, v, None, window=window)


@pytest.mark.parametrize("platform,lowering", [("gpu", "cuda"), ("tpu", "tpu")])
def test_windowed_pallas_kernels_lower_for_accelerators(platform, lowering):
    q = jax.ShapeDtypeStruct((1, 384, 8, 128), jnp.bfloat16)
    kv = jax.ShapeDtypeStruct((1, 384, 2, 128), jnp.bfloat16)
    attn = functools.partial(flash_attention, platform=platform, window=200)
    grads = jax.grad(lambda *a: jnp.sum(attn(*a, None).astype(jnp.float32)), argnums=(0, 1, 2))
    text = jax.jit(grads).trace(q, kv, kv).lower(lowering_platforms=(lowering,)).as_text()
    for kernel in ("marin_flash_forward", "marin_flash_dq", "marin_flash_dkv"):
        assert kernel in text


# ----------------------------------------------------------------------------------------------------------
# The model option: LlamaConfig.sliding_window / sliding_window_layers


def _windowed(**change):
    import dataclasses

    from marin.trainer.model import model_preset

    return dataclasses.replace(model_preset("nano"), num_layers=3, seq_len=64, vocab_size=256, **change)


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(sliding_window=0), "sliding_window must be a positive int"),
        (dict(sliding_window_layers=(0,)), r"sliding_window_layers \(0,\) given without a sliding_window"),
        (dict(sliding_window=8, sliding_window_layers=(0, 3)), r"distinct layer indices in \[0, 3\), got \(0, 3\)"),
        (dict(sliding_window=8, sliding_window_layers=(1, 1)), "distinct layer indices"),
    ],
)
def test_config_refuses_bad_windows_naming_the_field(change, message):
    with pytest.raises(ValueError, match=message):
        _windowed(**change)


def test_config_layers_are_a_sorted_tuple_and_flops_count_only_the_window():
    cfg = _windowed(sliding_window=16, sliding_window_layers=[2, 0])  # a list, as JSON or draccus give it
    assert cfg.sliding_window_layers == (0, 2) and hash(cfg)
    assert cfg.layer_windows == (16, None, 16)
    full = _windowed()
    per_key = 12 * cfg.num_heads * cfg.resolved_head_dim  # the attention FLOPs of one key, one layer
    assert full.flops_per_token() - cfg.flops_per_token() == 2 * per_key * (64 - 16)
    assert _windowed(sliding_window=64).flops_per_token() == full.flops_per_token()


def test_mixed_windows_scanned_equal_unrolled_in_value_and_gradient():
    """Under scan the layer picks its variant with lax.cond; unrolled each layer has its own: same loss and
    gradients (remat on, as the big presets run), and both differ from the unwindowed model."""
    import dataclasses

    from marin.trainer.model import init_params, next_token_loss

    cfg = _windowed(sliding_window=8, sliding_window_layers=(1,), remat="full")
    params = init_params(cfg, jax.random.PRNGKey(0))
    tokens = jax.random.randint(jax.random.PRNGKey(1), (2, 64), 0, 256)
    batch = dict(input_ids=tokens, targets=jnp.roll(tokens, -1, 1), segment_ids=jnp.zeros_like(tokens))
    batch["loss_mask"] = jnp.ones(tokens.shape)

    def loss_and_grads(cfg):
        return jax.jit(jax.value_and_grad(lambda p: next_token_loss(cfg, p, batch)[0]))(params)

    unrolled = loss_and_grads(dataclasses.replace(cfg, scan_layers=False))
    scanned = loss_and_grads(dataclasses.replace(cfg, scan_layers=True))
    full = loss_and_grads(dataclasses.replace(cfg, sliding_window=None, sliding_window_layers=None))
    assert float(unrolled[0]) == pytest.approx(float(scanned[0]), rel=1e-6)
    # fp32 rounding of two programs: without LLVM's optimizations (the suite's flags) sums are ordered otherwise
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5), unrolled[1], scanned[1])
    assert abs(float(full[0]) - float(unrolled[0])) > 1e-3
