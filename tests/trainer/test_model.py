"""The Llama model: shapes, causal and document masking, backends, sizes and FLOPs against known numbers."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from marin.trainer import axes as ax
from marin.trainer.attention import ATTENTION_BACKENDS, attention
from marin.trainer.attention.backends import cannot_serve
from marin.trainer.model import (
    LlamaConfig,
    init_params,
    model_preset,
    next_token_loss,
    param_axes,
    param_specs,
)
from marin.trainer.model import forward as model_forward
from marin.trainer.model.llama import rope_frequencies
from tests.trainer.conftest import init, tiny_model


def forward(cfg, params, tokens, segment_ids=None):
    return jax.jit(model_forward, static_argnums=0)(cfg, params, tokens, segment_ids)


def _tokens(cfg, batch=2, seed=0):
    return jnp.asarray(np.random.default_rng(seed).integers(0, cfg.vocab_size, (batch, cfg.seq_len)), jnp.int32)


def _lm_batch(cfg) -> dict:
    """A next-token batch of ``_tokens``: one document per row, every target counted."""
    tokens = _tokens(cfg)
    return {
        "input_ids": tokens,
        "targets": jnp.roll(tokens, -1, 1),
        "segment_ids": jnp.zeros_like(tokens),
        "loss_mask": jnp.ones(tokens.shape),
    }


@pytest.mark.parametrize("scan", [True, False])
def test_shapes_and_scan_equals_unrolled(tiny, scan):
    cfg = dataclasses.replace(tiny, scan_layers=scan)
    params = init(cfg, 0)
    logits = forward(cfg, params, _tokens(cfg))
    assert logits.shape == (2, cfg.seq_len, cfg.vocab_size) and logits.dtype == jnp.float32
    other = forward(dataclasses.replace(cfg, scan_layers=not scan), params, _tokens(cfg))
    np.testing.assert_allclose(logits, other, atol=1e-5)


def test_causal_masking(tiny):
    """Changing token t changes no logit before t and does change logits at t."""
    params = init(tiny, 0)
    tokens = _tokens(tiny)
    t = 17
    changed = tokens.at[:, t].set((tokens[:, t] + 1) % tiny.vocab_size)
    a, b = forward(tiny, params, tokens), forward(tiny, params, changed)
    np.testing.assert_array_equal(a[:, :t], b[:, :t])
    assert float(jnp.max(jnp.abs(a[:, t:] - b[:, t:]))) > 1e-4


def _runs_here(backend: str) -> bool:
    """Whether a backend serves fp32 inputs on this platform (``cudnn`` needs a GPU and refuses here)."""
    probe = jnp.zeros((1, 8, 2, 16), jnp.float32)
    return cannot_serve(backend, probe, probe, probe, None) is None


RUNNABLE_BACKENDS = sorted(b for b in ATTENTION_BACKENDS if _runs_here(b))


# fp32 inputs: cudnn serves only bf16/fp16 on a GPU (nothing elsewhere) and splash only TPUs. The suite
# runs on CPU; on a GPU machine it ran with MARIN_TEST_JAX_PLATFORMS=cuda (tests/trainer/conftest.py).
NOT_RUNNABLE_IN_FP32 = {
    "cpu": {"cudnn", "cudnn_masked"},
    "gpu": {"cudnn", "cudnn_masked", "splash"},
    "tpu": {"cudnn", "cudnn_masked"},
}


def test_every_backend_but_another_platforms_kernel_runs_here():
    assert set(ATTENTION_BACKENDS) - set(RUNNABLE_BACKENDS) == NOT_RUNNABLE_IN_FP32[jax.default_backend()]


@pytest.mark.parametrize("backend", RUNNABLE_BACKENDS)
def test_packed_documents_do_not_attend_across_segments(tiny, backend):
    """With segment ids, the second document's logits equal those of the document alone at position 0."""
    cfg = dataclasses.replace(tiny, attention_backend=backend)
    params = init(cfg, 1)
    tokens = _tokens(cfg, batch=1)
    split = 12
    segments = jnp.asarray((np.arange(cfg.seq_len) >= split)[None].astype(np.int32))
    packed = forward(cfg, params, tokens, segments)
    alone = forward(cfg, params, tokens[:, split:])
    # RoPE is relative, so starting the document at position `split` instead of 0 changes nothing.
    np.testing.assert_allclose(packed[:, split:], alone, atol=2e-5)


@pytest.mark.parametrize("seq", [24, 300])  # 300: several blocks of the blockwise backend, the last one short
def test_backends_agree_with_reference_values_and_gradients(seq):
    rng = np.random.default_rng(0)
    q = jnp.asarray(rng.normal(size=(2, seq, 8, 16)), jnp.float32)
    k = jnp.asarray(rng.normal(size=(2, seq, 2, 16)), jnp.float32)
    v = jnp.asarray(rng.normal(size=(2, seq, 2, 16)), jnp.float32)
    segments = jnp.asarray(np.sort(rng.integers(0, 5, size=(2, seq)), axis=1), jnp.int32)  # ragged documents

    def loss(backend, q, k, v):
        return jnp.sum(jnp.sin(attention(q, k, v, segments, backend=backend)))

    def run(backend):
        out = jax.jit(lambda q, k, v: attention(q, k, v, segments, backend=backend))(q, k, v)
        return out, jax.jit(jax.grad(lambda *a: loss(backend, *a), argnums=(0, 1, 2)))(q, k, v)

    ref_out, ref_grads = run("reference")
    for backend in RUNNABLE_BACKENDS:
        out, grads = run(backend)
        np.testing.assert_allclose(out, ref_out, atol=1e-5)
        for g, r in zip(grads, ref_grads):
            np.testing.assert_allclose(g, r, atol=1e-4)


def test_unknown_backend_is_a_clear_error(tiny):
    with pytest.raises(ValueError, match="unknown attention backend 'nope'"):
        forward(dataclasses.replace(tiny, attention_backend="nope"), init(tiny, 0), _tokens(tiny))


def test_loss_is_summed_over_unmasked_targets(tiny):
    params = init(tiny, 0)
    tokens = _tokens(tiny)
    mask = np.ones(tokens.shape, np.float32)
    mask[:, :5] = 0
    batch = {
        "input_ids": tokens,
        "targets": jnp.roll(tokens, -1, 1),
        "segment_ids": jnp.zeros_like(tokens),
        "loss_mask": jnp.asarray(mask),
    }
    total, weight = jax.jit(lambda p, b: next_token_loss(tiny, p, b))(params, batch)
    assert float(weight) == mask.sum()
    logits = forward(tiny, params, tokens)
    per_token = -jnp.take_along_axis(jax.nn.log_softmax(logits), batch["targets"][..., None], -1)[..., 0]
    np.testing.assert_allclose(total, jnp.sum(per_token * mask), rtol=1e-5)
    # Fresh init predicts roughly uniformly: mean loss near ln(vocab).
    assert abs(float(total / weight) - np.log(tiny.vocab_size)) < 0.1


def test_param_counts_match_published_models():
    assert model_preset("llama_8b").param_count == 8_030_261_248  # Meta-Llama-3-8B
    assert model_preset("llama_1b").param_count == 1_235_814_400  # Llama-3.2-1B (tied embeddings)
    assert model_preset("nano").param_count == 5_776_640
    for name in ("nano", "small", "llama_8b"):
        cfg = model_preset(name)
        params = jax.eval_shape(lambda cfg=cfg: init(cfg, 0))
        assert sum(int(np.prod(p.shape)) for p in jax.tree.leaves(params)) == cfg.param_count


def test_flops_per_token():
    cfg = model_preset("llama_8b")
    # 6 * (7,504,658,432 matmul params incl. lm_head) + 12 * 32 layers * 4096 * 4096 seq
    assert cfg.flops_per_token() == 6 * 7_504_658_432 + 12 * 32 * 4096 * 4096 == 51_470_401_536


def test_flops_per_token_matches_xla_cost_analysis(tiny):
    """XLA's own count of the forward pass is a third of our training FLOPs (matmuls dominate).

    Counted on the lowered program, before the backend's passes: XLA:GPU's count of its compiled module
    leaves out the matmuls it hands to cuBLAS (0.61x ours on an H100, 2026-11-25)."""
    cfg = dataclasses.replace(tiny, vocab_size=1024, hidden_dim=128, mlp_dim=384, seq_len=64, scan_layers=False)
    params = jax.eval_shape(lambda: init(cfg, 0))
    tokens = jax.ShapeDtypeStruct((4, cfg.seq_len), jnp.int32)
    cost = jax.jit(lambda p, t: forward(cfg, p, t)).lower(params, tokens).cost_analysis()
    if cost is None:  # the count is of the platform-independent program: the CPU run checks it
        pytest.skip("XLA:GPU gives no cost analysis of a lowered module (jax 0.11.2, H200, 2026-11-26)")
    xla_flops = cost["flops"] if isinstance(cost, dict) else cost[0]["flops"]
    ours = cfg.flops_per_token() / 3 * 4 * cfg.seq_len
    assert 1.0 <= xla_flops / ours < 1.1, (xla_flops, ours)


def test_rope_llama3_scaling_matches_hf_formula():
    cfg = dataclasses.replace(model_preset("llama_8b"))
    inv = rope_frequencies(cfg)
    base = 1.0 / (500_000.0 ** (np.arange(0, 128, 2) / 128))
    wavelen = 2 * np.pi / base
    # HF transformers `_compute_llama3_parameters`: high freq kept, low freq / 8, smooth in between.
    expected = np.where(wavelen > 8192 / 1.0, base / 8.0, base)
    mid = (wavelen >= 8192 / 4.0) & (wavelen <= 8192 / 1.0)
    smooth = (8192 / wavelen - 1.0) / (4.0 - 1.0)
    expected = np.where(mid, (1 - smooth) * base / 8.0 + smooth * base, expected)
    np.testing.assert_allclose(inv, expected, rtol=1e-12)


def _per_shape_init(cfg, key, dtype):
    """``init_params`` as it was written first: every normal leaf drawn in a program of its own shape."""
    from marin.trainer.model.llama import _is_spec, _normal

    specs, treedef = jax.tree.flatten(param_specs(cfg), is_leaf=_is_spec)
    leaves = [
        jnp.full(s.shape, 1.0 if s.init == "ones" else 0.0, dtype)
        if s.init in ("ones", "zeros")
        else _normal(jax.random.fold_in(key, i), s.shape, cfg.initializer_range, jnp.dtype(dtype))
        for i, s in enumerate(specs)
    ]
    return jax.tree.unflatten(treedef, leaves)


@pytest.mark.parametrize(
    "cfg, key, dtype",
    [
        (tiny_model(vocab_size=1000, hidden_dim=48, mlp_dim=136), jax.random.key(7), jnp.bfloat16),
        (
            tiny_model(vocab_size=300, num_experts=3, experts_per_token=2, qk_norm="head"),
            jax.random.PRNGKey(0),
            jnp.float32,
        ),
    ],
    ids=["dense-typed-key-bf16", "moe"],
)
def test_eager_init_draws_the_same_bits_as_one_program_per_shape(cfg, key, dtype):
    """Leaves draw a power-of-two bucket and keep its prefix (``_draw_normal``): bit for bit the per-shape
    draws (sizes that are not powers of two, so the prefix is a real cut), so checkpoints, losses and resumes
    are those of the per-shape init."""
    expected = _per_shape_init(cfg, key, dtype)
    params = init_params(cfg, key, dtype)
    assert jax.tree.structure(params) == jax.tree.structure(expected)
    for got, want in zip(jax.tree.leaves(params), jax.tree.leaves(expected), strict=True):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(want, np.float32))


def test_eager_init_shares_draw_programs_across_model_sizes(monkeypatch):
    """Three widths of a 2-layer model add at most three bucketed draws to the process's compiled programs
    (one per shape would be ~8 per width), and one model's leaves share one bucket; a leaf above the bucketed
    range draws its own shape, with the same values; another PRNG, or the non-partitionable threefry, is never
    bucketed."""
    from marin.trainer.model import llama

    before = llama._normal._cache_size()
    for width in (40, 56, 72):  # widths no other test uses, so their draws are not cached yet
        init_params(tiny_model(hidden_dim=width, mlp_dim=2 * width, vocab_size=300), jax.random.PRNGKey(0))
    assert llama._normal._cache_size() - before <= 3

    cfg, key = tiny_model(hidden_dim=40, mlp_dim=80, vocab_size=300), jax.random.PRNGKey(0)
    monkeypatch.setattr(llama, "_LARGEST_BUCKETED_DRAW", 10_000)  # the embedding and head (12,000): own shape
    shapes, draw = [], llama._normal
    monkeypatch.setattr(llama, "_normal", lambda key, shape, *a: shapes.append(shape) or draw(key, shape, *a))
    params = init_params(cfg, key)
    monkeypatch.setattr(llama, "_normal", draw)
    assert sorted(set(shapes)) == [(40, 300), (300, 40), (8192,)]  # the rest (up to 2 x 40 x 80): one bucket
    specs = jax.tree.leaves(param_specs(cfg), is_leaf=llama._is_spec)
    for i, (spec, leaf) in enumerate(zip(specs, jax.tree.leaves(params), strict=True)):
        if spec.init == "normal" and math.prod(spec.shape) > 10_000:
            want = llama._normal(jax.random.fold_in(key, i), spec.shape, cfg.initializer_range, jnp.dtype("float32"))
            np.testing.assert_array_equal(np.asarray(leaf), np.asarray(want))
    assert not llama._prefix_stable(jax.random.key(0, impl="rbg")) and llama._prefix_stable(jax.random.key(0))
    with jax.threefry_partitionable(False):
        assert not llama._prefix_stable(jax.random.PRNGKey(0))


def test_every_parameter_has_logical_axes_from_the_closed_set(tiny):
    specs = jax.tree.leaves(param_specs(tiny), is_leaf=lambda s: hasattr(s, "axes"))
    for spec in specs:
        assert len(spec.axes) == len(spec.shape)
        ax.check_axes(spec.axes)
    params = init(tiny, 0)
    shapes = jax.tree.map(lambda p: p.ndim, params)
    ranks = jax.tree.map(len, param_axes(tiny), is_leaf=lambda x: isinstance(x, tuple))
    assert shapes == ranks


def test_partition_spec_follows_the_rule_table():
    fsdp = (("embed", "fsdp"), ("batch", ("data", "fsdp")))
    tp = (("heads", "tensor"), ("kv_heads", "tensor"), ("mlp", "tensor"))
    wq = ("layers", "embed", "heads", "head_dim")
    assert ax.partition_spec(wq, fsdp) == jax.sharding.PartitionSpec(None, "fsdp", None, None)
    assert ax.partition_spec(wq, tp) == jax.sharding.PartitionSpec(None, None, "tensor", None)
    # A mesh axis is used once per array: embed takes fsdp, mlp stays replicated.
    both = (("embed", "fsdp"), ("mlp", "fsdp"))
    assert ax.partition_spec(("embed", "mlp"), both) == jax.sharding.PartitionSpec("fsdp", None)
    with pytest.raises(ValueError, match="unknown logical axes"):
        ax.partition_spec(("embedding",), fsdp)


@pytest.mark.parametrize(
    "field,value,match",
    [
        ("num_kv_heads", 3, "multiple of num_kv_heads"),
        ("remat", "some", "remat must be one of"),
        ("hidden_dim", 0, "hidden_dim must be a positive int"),
    ],
)
def test_config_validation_names_field_and_value(field, value, match):
    with pytest.raises(ValueError, match=match):
        dataclasses.replace(tiny_model(), **{field: value})


@pytest.mark.parametrize("remat", ["minimal", "full"])
def test_remat_policies_give_the_same_gradients(tiny, remat):
    params = init(tiny, 0)
    batch = _lm_batch(tiny)

    def grads(cfg):
        return jax.jit(jax.grad(lambda p: next_token_loss(cfg, p, batch)[0]))(params)

    base, other = grads(tiny), grads(dataclasses.replace(tiny, remat=remat))
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), base, other)


def _grad_temp_bytes(cfg):
    """XLA's temp buffer size for the loss gradient, compiled from shapes alone."""
    params = jax.eval_shape(lambda k: init_params(cfg, k, jnp.float32), jax.random.PRNGKey(0))
    ids = jax.ShapeDtypeStruct((8, cfg.seq_len), jnp.int32)
    batch = {
        "input_ids": ids,
        "targets": ids,
        "segment_ids": ids,
        "loss_mask": jax.ShapeDtypeStruct((8, cfg.seq_len), jnp.float32),
    }
    grad = jax.jit(jax.grad(lambda p, b: next_token_loss(cfg, p, b)[0]))
    return grad.lower(params, batch).compile().memory_analysis().temp_size_in_bytes


def test_remat_lowers_peak_temp_memory_of_the_layer_scan():
    """8 scanned layers, seq 256, batch 8: without remat the backward keeps every layer's activations
    (attention probabilities dominate). Measured temp memory with the blockwise CPU attention: none 140 MB,
    minimal 55 MB (2.5x less), full 29 MB (4.8x less); asserted with margin: >= 2.2x and >= 4.2x. (None was
    164 MB until the SwiGLU activation's own backward kept only its two inputs, 2026-12-06.) (Unrolled
    layers, the CPU default, gain ~3% on XLA:CPU: docs/trainer.md.) The attention is pinned to
    ``blockwise``: the ratio depends on what attention saves, and on a GPU the fp32 default is the Pallas
    flash kernel, which saves little (none 134 MB vs minimal 73 MB, 1.8x, on an H200, 2026-11-26)."""
    cfg = tiny_model(num_layers=8, seq_len=256, scan_layers=True, attention_backend="blockwise")
    none, minimal, full = (_grad_temp_bytes(dataclasses.replace(cfg, remat=r)) for r in ("none", "minimal", "full"))
    assert none >= 2.2 * minimal, (none, minimal)
    assert none >= 4.2 * full, (none, full)


def test_z_loss_adds_its_formula_to_the_loss(tiny):
    """``z_loss * logsumexp(logits)**2`` per unmasked target, summed: checked against numpy on the
    model's own logits, with a mask so masked positions provably do not count."""
    params = init(tiny, 0)
    tokens = _tokens(tiny)
    mask = np.ones(tokens.shape, np.float32)
    mask[0, :10] = 0.0
    batch = {
        "input_ids": tokens,
        "targets": jnp.roll(tokens, -1, 1),
        "segment_ids": jnp.zeros_like(tokens),
        "loss_mask": jnp.asarray(mask),
    }
    logits = np.asarray(model_forward(tiny, params, tokens, batch["segment_ids"]), np.float64)
    log_z = np.log(np.sum(np.exp(logits - logits.max(-1, keepdims=True)), -1)) + logits.max(-1)
    target = np.take_along_axis(logits, np.asarray(batch["targets"])[..., None], -1)[..., 0]
    for weight in (0.0, 1e-4, 0.1):
        expected = np.sum(mask * (log_z - target + weight * log_z**2))
        loss, count = next_token_loss(tiny, params, batch, z_loss=weight)
        np.testing.assert_allclose(float(loss), expected, rtol=2e-6)
        assert float(count) == mask.sum()
    assert float(next_token_loss(tiny, params, batch, z_loss=0.1)[0]) > float(next_token_loss(tiny, params, batch)[0])


def test_presets_registry():
    assert isinstance(model_preset("small"), LlamaConfig)
    with pytest.raises(KeyError, match="unknown model preset"):
        model_preset("gpt5")


def test_unrolled_layers_take_the_stacks_gradient_as_a_stack_bit_for_bit(tiny, monkeypatch):
    """Unrolled, each layer indexes the stacked parameters; the stack's gradient is the layers' gradients stacked
    (``llama._unstack``), not a sum of each layer's gradient padded to the whole stack, which XLA:CPU ran as a
    slow loop over every layer per element. Same values, bit for bit, and no pad of a stacked parameter left."""
    from marin.trainer.model import llama

    cfg = dataclasses.replace(tiny, scan_layers=False)
    params = init(cfg, 0)
    batch = _lm_batch(cfg)

    def compiled_grad():
        return jax.jit(jax.grad(lambda p: next_token_loss(cfg, p, batch)[0])).lower(params).compile()

    stacked = {f"[{','.join(map(str, leaf.shape))}]" for leaf in jax.tree.leaves(params["layers"])}

    def stacked_pads(hlo: str) -> list[str]:
        return [line for line in hlo.splitlines() if " pad(" in line and any(s in line.split("=")[1] for s in stacked)]

    ours = compiled_grad()
    assert not stacked_pads(ours.as_text())
    with monkeypatch.context() as m:  # plain indexing: the stack's gradient as the sum of padded layers'
        m.setattr(llama, "_unstack", lambda stacked: tuple(stacked[i] for i in range(stacked.shape[0])))
        indexed = compiled_grad()
    assert stacked_pads(indexed.as_text())  # the pattern this replaces is really there without it
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(a, b), ours(params), indexed(params))
