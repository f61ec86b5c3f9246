"""The cuDNN backends: how packed documents are described to cuDNN (here, on any platform), and on a GPU
(``MARIN_TEST_JAX_PLATFORMS=cuda``, benchmarks/gpu_proof.sh) each route against ``reference``."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from marin.trainer.attention import attention, cannot_serve, segment_runs
from marin.trainer.attention.cudnn import CAUSAL, FALLBACK, PACKED, attention_route


def runs_oracle(row: np.ndarray) -> list[tuple[int, int]]:
    """(start, length) of each run of equal ids, written the slow way."""
    out, start = [], 0
    for t in range(1, len(row) + 1):
        if t == len(row) or row[t] != row[t - 1]:
            out.append((start, t - start))
            start = t
    return out


@pytest.mark.parametrize("seed", range(5))
def test_segment_runs_gives_each_documents_start_and_length(seed):
    rng = np.random.default_rng(seed)
    ids = np.cumsum(rng.random((4, 97)) < 0.05, axis=1).astype(np.int32)  # ~5 documents per row
    seqlens, offsets, fits = segment_runs(jnp.asarray(ids), max_segments=16)
    assert bool(fits)
    for row, lens, offs in zip(ids, np.asarray(seqlens), np.asarray(offsets)):
        runs = runs_oracle(row)
        assert [(int(o), int(n)) for o, n in zip(offs, lens) if n >= 0] == runs
        assert list(lens[len(runs) :]) == [-1] * (16 - len(runs))
        assert list(offs[len(runs) :]) == [-1] * (17 - len(runs))  # M + 1 offsets


def test_rows_the_packed_layout_cannot_describe_do_not_fit():
    many = jnp.asarray(np.arange(12, dtype=np.int32)[None])  # 12 documents of one token
    assert not bool(segment_runs(many, max_segments=8)[2])
    assert bool(segment_runs(many, max_segments=12)[2])
    resumed = jnp.asarray([[0, 0, 1, 1, 0, 0]], jnp.int32)  # document 0 in two pieces: runs != documents
    assert not bool(segment_runs(resumed, max_segments=8)[2])


def test_route_is_causal_packed_or_fallback_per_batch():
    one = jnp.zeros((2, 16), jnp.int32) + jnp.asarray([[3], [7]], jnp.int32)  # one document per row
    packed = jnp.asarray(np.repeat(np.arange(4), 4)[None].repeat(2, 0), jnp.int32)
    assert int(attention_route(one)) == CAUSAL
    assert int(attention_route(packed)) == PACKED
    assert int(attention_route(jnp.concatenate([one[:1], packed[:1]]))) == PACKED  # any packed row
    assert int(attention_route(packed, max_segments=3)) == FALLBACK
    assert int(attention_route(jnp.asarray([[0, 1, 0, 1]], jnp.int32))) == FALLBACK


on_gpu = pytest.mark.skipif(jax.default_backend() != "gpu", reason="cuDNN runs only on a GPU")


def _bf16_inputs(seq=512, batch=2, heads=8, kv_heads=2, head_dim=64):
    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    q = jax.random.normal(keys[0], (batch, seq, heads, head_dim), jnp.bfloat16)
    k, v = (jax.random.normal(key, (batch, seq, kv_heads, head_dim), jnp.bfloat16) for key in keys[1:3])
    return q, k, v, jax.random.normal(keys[3], q.shape, jnp.bfloat16)


def _segments(kind: str, batch=2, seq=512):
    rng = np.random.default_rng(0)
    if kind == "one":
        return jnp.zeros((batch, seq), jnp.int32)
    rate = {"packed": 8 / seq, "many": 0.2}[kind]
    return jnp.asarray(np.cumsum(rng.random((batch, seq)) < rate, axis=1), jnp.int32)


@on_gpu
@pytest.mark.parametrize("kind, route", [("one", CAUSAL), ("packed", PACKED), ("many", FALLBACK)])
@pytest.mark.parametrize("backend", ["cudnn", "cudnn_masked"])
@pytest.mark.parametrize("window", [None, 100])  # a sliding window (Mistral's) through every route
def test_cudnn_backends_match_the_fp32_reference(kind, route, backend, window):
    q, k, v, ct = _bf16_inputs()
    segments = _segments(kind)
    assert int(attention_route(segments)) == route
    assert cannot_serve(backend, q, k, v, segments) is None

    def run(name, *args):
        out, vjp = jax.vjp(lambda q, k, v: attention(q, k, v, segments, backend=name, window=window), *args)
        return (out, *vjp(ct.astype(out.dtype)))

    with jax.default_matmul_precision("highest"):
        ref = jax.jit(lambda *a: run("reference", *a))(*(x.astype(jnp.float32) for x in (q, k, v)))
    got = jax.jit(lambda *a: run(backend, *a))(q, k, v)
    for name, g, r in zip(("out", "dq", "dk", "dv"), got, ref):
        g, r = np.asarray(g, np.float32), np.asarray(r, np.float32)
        assert np.all(np.isfinite(g)), name
        assert np.linalg.norm(g - r) / np.linalg.norm(r) < 1e-2, name  # bf16 rounding is ~2e-3
