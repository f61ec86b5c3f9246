"""The ``splash`` backend (JAX's TPU splash kernel, interpreted on CPU) and how backends are chosen.

Values and gradients against ``reference_attention`` (fp32: max abs error <= 1e-5 forward, <= 1e-4
gradients, issue 7's bar; bf16 looser, stated at its test). Gradients go through splash's own
``custom_vjp`` backward kernels, which run in interpret mode too. The ``shard_map`` wiring runs on a
1-device mesh in this process and on 4 host devices (data=2 x tensor=2) in a subprocess (this file's
``__main__``: ``--xla_force_host_platform_device_count`` only counts before JAX initialises). Then the
selection rules: an explicitly chosen backend that cannot serve the inputs raises, ``"default"`` falls
back to ``xla`` with a warning. Splash blocks are multiples of 128, so every shape here is one to three
blocks: each costs ~2 s to compile in interpret mode.
"""

import functools
import json
import logging
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AbstractMesh

from marin.trainer.attention import (
    SplashAttentionConfig,
    attention,
    backends,
    reference_attention,
    resolve_backend,
    splash_attention,
    xla_attention,
)
from marin.trainer.attention.splash import unsupported_reason
from marin.trainer.axes import BATCH, HEAD_DIM, HEADS, KV_HEADS, SEQ, ShardingContext, use_sharding
from marin.trainer.mesh import SHARDING_PRESETS, MeshConfig
from tests.trainer.attention_cases import FWD_ATOL, GRAD_ATOL, inputs, max_errors, out_and_grads


def _splash(block_q, block_kv):
    return functools.partial(splash_attention, config=SplashAttentionConfig(block_q=block_q, block_kv=block_kv))


@pytest.mark.parametrize(
    "seq,heads,kv_heads,block_q,block_kv,packed",
    [
        (40, 4, 4, 128, 128, False),  # GQA 1; one block, seq padded 40 -> 128
        (300, 8, 2, 128, 128, True),  # GQA 4; 3 x 3 blocks (the 3 above the diagonal skipped), ~100 documents
        (150, 8, 1, 256, 128, True),  # GQA 8; block_q > block_kv
    ],
)
def test_matches_reference_values_and_gradients_fp32(seq, heads, kv_heads, block_q, block_kv, packed):
    q, k, v, segments, ct = inputs(seq, heads, kv_heads, packed=packed)
    ours = out_and_grads(_splash(block_q, block_kv), q, k, v, segments, ct)
    assert ours[0].shape == q.shape and ours[0].dtype == jnp.float32
    fwd, grads = max_errors(ours, out_and_grads(reference_attention, q, k, v, segments, ct))
    assert fwd <= FWD_ATOL and max(grads) <= GRAD_ATOL, (fwd, grads)


def test_bf16_within_bf16_rounding_of_fp32_reference():
    """bf16 has an 8-bit significand (spacing 2^-7 = 0.0078 at 1): outputs and gradients are O(1), so we
    allow 2e-2 forward and 5e-2 gradients against fp32 on the same (bf16-rounded) inputs, as for
    ``pallas``. q is scaled in bf16 before the kernel (splash does not scale); head_dim 16 makes that
    scale 0.25, exact."""
    q, k, v, segments, ct = inputs(45, 8, 2, packed=True)
    q, k, v = (x.astype(jnp.bfloat16) for x in (q, k, v))
    ours = out_and_grads(_splash(128, 128), q, k, v, segments, ct)
    assert ours[0].dtype == jnp.bfloat16 and all(g.dtype == jnp.bfloat16 for g in ours[1])
    fp32 = [x.astype(jnp.float32) for x in (q, k, v)]
    fwd, grads = max_errors(ours, out_and_grads(reference_attention, *fp32, segments, ct))
    assert fwd <= 2e-2 and max(grads) <= 5e-2, (fwd, grads)


@pytest.mark.parametrize("field,value", [("block_q", 64), ("block_kv", 384), ("block_q", True)])
def test_config_validation_names_field_and_value(field, value):
    with pytest.raises(ValueError, match=f"SplashAttentionConfig.{field} must be a power of two >= 128, got {value}"):
        SplashAttentionConfig(**{field: value})


# ----------------------------------------------------------------------------------------------------------
# shard_map wiring


def _one_device_context(preset="fsdp_tp") -> ShardingContext:
    return ShardingContext(MeshConfig(data=1, fsdp=1, tensor=1).build(jax.devices()[:1]), SHARDING_PRESETS[preset])


def test_under_a_sharding_context_runs_through_shard_map_and_matches_reference():
    q, k, v, segments, ct = inputs(60, 4, 2, packed=True)

    def sharded(q, k, v, segments):
        with use_sharding(_one_device_context()):  # entered while tracing, as the train step does
            return attention(q, k, v, segments, backend="splash")

    assert "shard_map" in str(jax.make_jaxpr(sharded)(q, k, v, segments))
    assert "shard_map" not in str(jax.make_jaxpr(splash_attention)(q, k, v, segments))  # no context: plain call
    fwd, grads = max_errors(
        out_and_grads(sharded, q, k, v, segments, ct), out_and_grads(reference_attention, q, k, v, segments, ct)
    )
    assert fwd <= FWD_ATOL and max(grads) <= GRAD_ATOL, (fwd, grads)


def test_on_four_devices_batch_and_heads_are_sharded_and_match_reference():
    """data=2 x tensor=2 with the ``tp`` preset: each device holds 1 of 2 examples and 2 of 4 query heads
    with their 1 kv head (this file's ``__main__``, in a subprocess with 4 host devices)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=root)  # the script imports tests.trainer
    env["XLA_FLAGS"] = env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
    proc = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["devices"] == 4 and report["shard_map"]
    assert report["out_placed_as_q"], report  # batch over data x fsdp, heads over tensor
    assert report["fwd"] <= FWD_ATOL and max(report["grads"]) <= GRAD_ATOL, report


def _four_device_report() -> dict:
    q, k, v, segments, ct = inputs(60, 4, 2, packed=True)
    context = ShardingContext(MeshConfig(data=2, fsdp=1, tensor=2).build(), SHARDING_PRESETS["tp"])

    def sharded(q, k, v, segments):
        with use_sharding(context):
            return attention(q, k, v, segments, backend="splash")

    ours = out_and_grads(sharded, q, k, v, segments, ct)
    fwd, grads = max_errors(ours, out_and_grads(reference_attention, q, k, v, segments, ct))
    return {
        "devices": len(jax.devices()),
        "shard_map": "shard_map" in str(jax.make_jaxpr(sharded)(q, k, v, segments)),
        "out_placed_as_q": ours[0].sharding.is_equivalent_to(context.sharding((BATCH, SEQ, HEADS, HEAD_DIM)), 4),
        "fwd": fwd,
        "grads": grads,
    }


def test_sharding_rules_splash_cannot_follow_are_named():
    """Pure shape logic, on an abstract 8-device mesh (no devices needed)."""
    mesh = AbstractMesh((2, 2, 1, 1, 2), ("data", "fsdp", "expert", "context", "tensor"))
    reason = functools.partial(unsupported_reason, dtype=jnp.float32, platform="tpu")
    tp = ShardingContext(mesh, SHARDING_PRESETS["fsdp_tp"])  # batch over data x fsdp x expert (4), heads on tensor
    assert reason((4, 256, 8, 64), (4, 256, 2, 64), context=tp) is None
    assert reason((2, 256, 8, 64), (2, 256, 2, 64), context=tp) == (
        "batch 2 does not divide into 4 shards over mesh axes ('data', 'fsdp', 'expert')"
    )
    assert "kv_heads 1 does not divide into 2 shards" in reason((4, 256, 8, 64), (4, 256, 1, 64), context=tp)
    heads_only = ShardingContext(mesh, (*SHARDING_PRESETS["dp"], (HEADS, "tensor")))
    assert "heads over tensor but kv_heads over None" in reason((4, 256, 8, 64), (4, 256, 2, 64), context=heads_only)
    seq = ShardingContext(mesh, ((SEQ, "tensor"), (KV_HEADS, "fsdp")))
    assert "split 'seq' over tensor; splash shards only batch and heads" in reason(
        (4, 256, 8, 64), (4, 256, 2, 64), context=seq
    )


# ----------------------------------------------------------------------------------------------------------
# Choosing a backend: explicit choices raise, the default falls back


def test_platform_defaults(monkeypatch):
    for platform, expected in (("tpu", "splash"), ("gpu", "cudnn"), ("cpu", "blockwise"), ("metal", "xla")):
        monkeypatch.setattr(jax, "default_backend", lambda platform=platform: platform)
        assert resolve_backend("default") == expected
    assert resolve_backend("pallas") == "pallas"  # explicit names pass through on every platform


def test_gpu_default_takes_pallas_where_cudnn_refuses(monkeypatch):
    """On a GPU, fp32 inputs (cuDNN serves only bf16/fp16) go to our Pallas kernel, not to XLA's
    materializing attention; the platform is faked, so Pallas is asked to lower for the GPU and the
    check is which backend was called."""
    monkeypatch.setattr(backends.jax, "default_backend", lambda: "gpu")
    monkeypatch.setattr(backends, "ATTENTION_BACKENDS", dict(backends.ATTENTION_BACKENDS))
    called = []
    for name in ("cudnn", "pallas", "xla"):
        monkeypatch.setitem(backends.ATTENTION_BACKENDS, name, lambda q, *a, name=name: called.append(name) or q)
    q, k, v, segments, _ = inputs(8, 2, 1, packed=True, batch=1)
    attention(q, k, v, segments)
    attention(*(x.astype(jnp.bfloat16) for x in (q, k, v)), segments)
    assert called == ["pallas", "cudnn"]


@pytest.fixture
def dummy_backend(monkeypatch):
    """A registered backend that refuses every input (registries copied, so nothing leaks); returns the
    list of calls it received, which must stay empty."""
    monkeypatch.setattr(backends, "ATTENTION_BACKENDS", dict(backends.ATTENTION_BACKENDS))
    monkeypatch.setattr(backends, "_UNSUPPORTED_CHECKS", dict(backends._UNSUPPORTED_CHECKS))
    calls = []
    backends.register_attention_backend("dummy", unsupported_reason=lambda q, k, v, s: f"forced for {q.shape}")(
        lambda *args: calls.append(args)
    )
    return calls


def test_explicit_backend_that_cannot_serve_raises_naming_backend_and_reason(dummy_backend):
    q, k, v, segments, _ = inputs(8, 2, 1, packed=True, batch=1)
    with pytest.raises(ValueError, match=r"dummy attention cannot serve these inputs: forced for \(1, 8, 2, 16\)"):
        attention(q, k, v, segments, backend="dummy")
    assert dummy_backend == []


def test_default_backend_that_cannot_serve_falls_back_to_xla_with_a_warning(dummy_backend, monkeypatch, caplog):
    monkeypatch.setitem(backends._PLATFORM_DEFAULTS, jax.default_backend(), ("dummy",))
    q, k, v, segments, _ = inputs(8, 2, 1, packed=True, batch=1)
    with caplog.at_level(logging.WARNING, logger=backends.__name__):
        out = attention(q, k, v, segments)  # backend="default"
    assert dummy_backend == []
    np.testing.assert_array_equal(out, xla_attention(q, k, v, segments))
    assert (
        "default attention backends cannot serve these inputs (dummy: forced for (1, 8, 2, 16)); "
        "falling back to 'xla'" in caplog.text
    )


def test_splash_refusals_raise_when_explicit_and_fall_back_by_default(monkeypatch, caplog):
    """The real checks: float16 (not a splash dtype) refused; a rule that puts seq on a mesh axis of one device
    splits nothing, so splash serves it (every preset names the context axis for seq; a real split goes to
    context parallelism, ``attention/context.py``, and ``test_sharding_rules_splash_cannot_follow_are_named``
    has splash's own refusal of it)."""
    q, k, v, segments, _ = inputs(8, 2, 1, packed=True, batch=1)
    half = [x.astype(jnp.float16) for x in (q, k, v)]
    with pytest.raises(ValueError, match="splash attention cannot serve these inputs: dtype float16 is not one of"):
        attention(*half, segments, backend="splash")
    seq_rules = ShardingContext(_one_device_context().mesh, ((SEQ, "data"),))
    with use_sharding(seq_rules):
        served = attention(q, k, v, segments, backend="splash")
    np.testing.assert_allclose(served, xla_attention(q, k, v, segments), atol=1e-5)
    assert "cannot run on gpu; use xla or pallas" in unsupported_reason(q.shape, k.shape, q.dtype, "gpu", None)

    monkeypatch.setitem(backends._PLATFORM_DEFAULTS, jax.default_backend(), ("splash",))  # as on TPU
    with caplog.at_level(logging.WARNING, logger=backends.__name__):
        np.testing.assert_array_equal(attention(*half, segments), xla_attention(*half, segments))
    assert caplog.text.count("default attention backends cannot serve these inputs (splash: ") == 1


def test_cudnn_backend_refuses_off_gpu_and_names_why(monkeypatch):
    """The cuDNN backend only ever runs on a GPU (not here): its checks, with the platform faked."""
    q, k, v, segments, _ = inputs(8, 2, 1, packed=True, batch=1)
    with pytest.raises(
        ValueError, match=r"cudnn attention cannot serve these inputs: cuDNN runs only on a GPU \(platform: cpu\)"
    ):
        attention(q, k, v, segments, backend="cudnn")
    monkeypatch.setattr(backends.jax, "default_backend", lambda: "gpu")
    assert backends.cannot_serve("cudnn", q, k, v, segments) == "dtype float32 is not bfloat16 or float16"
    half = [x.astype(jnp.bfloat16) for x in (q, k, v)]
    assert backends.cannot_serve("cudnn", *half, segments) is None


if __name__ == "__main__":  # the 4-device half of test_on_four_devices_..., run in a subprocess
    print(json.dumps(_four_device_report()))
