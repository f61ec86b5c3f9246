"""The engine's rolling cache for sliding-window layers: a windowed layer keeps ``window - 1 + chunk`` positions
per slot in a ring, and everything it serves equals recomputing the whole sequence with the window (greedy
tokens) and the engine that keeps the whole context (log-probabilities, prompt scores), across prompts longer
than a chunk, generations that wrap the ring many times, slots reused by shorter requests, mixed and packed
steps, and models whose every layer is windowed."""

import dataclasses

import jax
import numpy as np
import pytest

from marin.inference import SamplingParams
from marin.inference.engine import Engine, EngineConfig
from marin.inference.slots import cache_positions, ring_length
from marin.trainer.model.config import model_preset
from marin.trainer.model.llama import forward, init_params
from tests.inference.test_engine import greedy_by_recomputation

WINDOW, CHUNK = 6, 16
BASE = dataclasses.replace(
    model_preset("nano"),
    vocab_size=128,
    hidden_dim=64,
    mlp_dim=128,
    num_layers=3,
    num_heads=4,
    num_kv_heads=2,
    seq_len=96,
    sliding_window=WINDOW,
)
MODELS = {
    "gemma-like": dataclasses.replace(BASE, sliding_window_layers=(0, 2)),  # windowed layers around a full one
    "mistral-like": BASE,  # every layer windowed: no full-attention layer at all
}
_forward = jax.jit(forward, static_argnums=0)


@pytest.fixture(scope="module", params=sorted(MODELS))
def model(request):
    cfg = MODELS[request.param]
    return cfg, init_params(cfg, jax.random.PRNGKey(3))


def _requests(seed=0):
    """Prompts from 3 tokens (packed together) to 40 (three chunks), outputs up to 50 tokens (past the ring of
    21 positions several times); the shorter ones land in slots a longer one used before."""
    rng = np.random.default_rng(seed)
    lengths = [40, 3, 25, 9, 33, 4, 17]
    outputs = [50, 30, 12, 41, 8, 45, 20]
    return [(rng.integers(1, 128, size=n).tolist(), m) for n, m in zip(lengths, outputs)]


def test_windowed_layers_keep_a_ring_of_window_plus_chunk_positions(model):
    cfg, params = model
    rolling = Engine(cfg, params, EngineConfig(slots=3, prefill_chunk=CHUNK))
    whole = Engine(cfg, params, EngineConfig(slots=3, prefill_chunk=CHUNK, rolling_windows=False))
    ring = ring_length(WINDOW, cfg.seq_len, CHUNK)
    assert ring == WINDOW - 1 + CHUNK == 21
    expected = [ring if w is not None else cfg.seq_len + CHUNK for w in cfg.layer_windows]
    assert cache_positions(rolling.cache) == expected
    assert cache_positions(whole.cache) == [cfg.seq_len + CHUNK] * cfg.num_layers
    nbytes = lambda cache: sum(x.nbytes for x in jax.tree.leaves(cache))  # noqa: E731
    windowed = sum(w is not None for w in cfg.layer_windows)
    full_layer = nbytes(whole.cache) // cfg.num_layers
    assert nbytes(whole.cache) - nbytes(rolling.cache) == windowed * full_layer * (1 - ring / (cfg.seq_len + CHUNK))
    # a window as long as the context needs the whole of it: no ring
    assert ring_length(cfg.seq_len, cfg.seq_len, CHUNK) is None and ring_length(None, cfg.seq_len, CHUNK) is None


def _serve(cfg, params, rolling: bool):
    """One engine (3 slots, chunks of 16, mixed steps) through three loads: seven greedy requests joining
    while others decode; an echoed prompt three chunks long; ``generate``'s packed prompts and full-width
    decoding with seeded sampling. Returns each load's results."""
    engine = Engine(cfg, params, EngineConfig(slots=3, prefill_chunk=CHUNK, mixed_chunk=16, rolling_windows=rolling))
    submitted = []
    for i, (prompt, n) in enumerate(_requests()):
        submitted.append(engine.submit(prompt, SamplingParams(max_tokens=n, temperature=0, logprobs=1)))
        if i == 2:  # the first three are mid-flight when the rest arrive
            for _ in range(6):
                engine.step()
    engine.run_until_idle()
    assert engine.mixed_steps > 0
    echo = engine.submit(_requests(seed=1)[0][0], SamplingParams(max_tokens=1, prompt_logprobs=1))
    engine.run_until_idle()
    sampled = SamplingParams(max_tokens=30, temperature=0.8, top_p=0.9, seed=5, logprobs=1)
    batch = engine.generate([p for p, _ in _requests(seed=2)], sampled)
    assert engine.packed_steps > 0
    return [r.result() for r in submitted], echo.result(), batch


def test_the_ring_serves_what_recomputation_and_the_whole_cache_serve(model):
    """Every greedy token equals recomputing the windowed model over the whole sequence; every log-probability
    (generated and echoed) and every seeded sample equals the whole-context engine's; echoed prompt scores
    equal the model's own log-softmax."""
    cfg, params = model
    ring, whole = _serve(cfg, params, rolling=True), _serve(cfg, params, rolling=False)
    logprobs = lambda result: [t.logprob for t in result.logprobs]  # noqa: E731
    for (prompt, n), a, b in zip(_requests(), ring[0], whole[0]):
        assert a.tokens == greedy_by_recomputation(cfg, params, prompt, n)
        assert a.tokens == b.tokens
        np.testing.assert_allclose(logprobs(a), logprobs(b), atol=2e-5, rtol=0)
    prompt = _requests(seed=1)[0][0]
    scores = [[t.logprob for t in echo.prompt_logprobs[1:]] for echo in (ring[1], whole[1])]  # [0]: unscored
    logits = np.asarray(_forward(cfg, params, np.asarray([prompt + [0] * (cfg.seq_len - len(prompt))])))[0]
    logp = logits - np.logaddexp.reduce(logits, axis=-1, keepdims=True)
    np.testing.assert_allclose(scores[0], [logp[i, t] for i, t in enumerate(prompt[1:])], atol=2e-5, rtol=0)
    np.testing.assert_allclose(scores[0], scores[1], atol=2e-5, rtol=0)
    for a, b in zip(ring[2], whole[2]):
        assert a.tokens == b.tokens and len(a.tokens) == 30
        np.testing.assert_allclose(logprobs(a), logprobs(b), atol=2e-5, rtol=0)


@pytest.mark.parametrize("rolling", [True, False])
def test_rows_at_the_scratch_position_stay_finite(rolling):
    """A decoding step computes every row of its width; rows of slots that are not decoding sit at the scratch
    position, past every window. They see every entry (their output is thrown away): in a windowed layer that
    keeps the whole context they saw none and came out NaN, harmless while rows stay apart, not once anything
    reduces over the rows (an FP8 scale)."""
    from marin.inference.slots import SamplingRows, decode_slots, init_slot_cache, split_layers

    cfg = dataclasses.replace(BASE, seq_len=300)  # a cache longer than the first span of 128
    params = split_layers(init_params(cfg, jax.random.PRNGKey(0)))
    cache = init_slot_cache(cfg, slots=4, chunk=CHUNK, rolling=rolling)
    scratch = cfg.seq_len + CHUNK - 1
    positions = np.asarray([5, scratch, scratch, scratch], np.int32)
    rows = SamplingRows.of([(0.0, 0, 1.0, 0, 0)] * 4)
    out, _ = decode_slots(cfg, params, cache, np.zeros(4, np.int32), positions, rows, 128)
    assert np.all(np.isfinite(np.asarray(out.logprob))) and np.all(np.isfinite(np.asarray(out.top_logprob)))


def test_a_ring_of_several_segments_read_before_and_after_it_wraps():
    """A window of 150 with chunks of 16: a ring of 165 positions in two segments ([0, 128), [128, 165)). A
    request of 270 positions reads the ring's first segment alone (span 128 < ring), then all of it, then
    wraps past it: the same tokens and log-probabilities as the whole-context engine."""
    cfg = dataclasses.replace(BASE, num_layers=2, seq_len=320, sliding_window=150)
    params = init_params(cfg, jax.random.PRNGKey(5))
    prompt = np.random.default_rng(4).integers(1, 128, size=20).tolist()
    out = {}
    for rolling in (True, False):
        engine = Engine(cfg, params, EngineConfig(slots=1, prefill_chunk=CHUNK, rolling_windows=rolling))
        assert cache_positions(engine.cache) == [165 if rolling else 336] * 2
        # every layer a ring: no program for spans past it (128 and 165, against 128, 256 and 336)
        assert sorted({span for kind, _, span in engine.programs() if kind == "decode"}) == (
            [128, 165] if rolling else [128, 256, 336]
        )
        out[rolling] = engine.generate([prompt], SamplingParams(max_tokens=250, temperature=0, logprobs=1))[0]
    assert out[True].tokens == out[False].tokens
    np.testing.assert_allclose(
        [t.logprob for t in out[True].logprobs], [t.logprob for t in out[False].logprobs], atol=2e-5, rtol=0
    )


def test_a_chunk_longer_than_the_ring_was_made_for_is_refused():
    from marin.inference.slots import SamplingRows, init_slot_cache, prefill_chunk, split_layers

    params = split_layers(init_params(BASE, jax.random.PRNGKey(0)))
    cache = init_slot_cache(BASE, slots=2, chunk=CHUNK)
    tokens, row = np.zeros(2 * CHUNK, np.int32), SamplingRows.of([(0.0, 0, 1.0, 0, 0)])
    with pytest.raises(ValueError, match="a chunk of 32 tokens does not fit a ring of 21 positions for window 6"):
        prefill_chunk(BASE, params, cache, 0, tokens, tokens, 0, 1, False, row, 128)
