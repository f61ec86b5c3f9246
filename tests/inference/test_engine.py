"""The continuous-batching engine: same tokens as recomputing the whole sequence under any load, seeded
sampling independent of the batch, exact prompt log-probabilities, stops, cancellation, a failure confined to
its request, and a steady state that never recompiles."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from marin.inference import InvalidRequest, SamplingParams
from marin.inference.engine import Engine, EngineConfig, QueueFull, compilations
from marin.inference.slots import cache_positions
from marin.trainer.model.llama import forward
from tests.export.tiny_model import make_tiny_export


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("engine") / "hf"
    cfg, params = make_tiny_export(str(path))
    from marin.tokenize import load_tokenizer

    return cfg, params, load_tokenizer(str(path))


def _prompts(n, seed=0, longest=90):
    rng = np.random.default_rng(seed)
    return [rng.integers(1, 300, size=int(rng.integers(1, longest))).tolist() for _ in range(n)]


_forward = jax.jit(forward, static_argnums=0)


def greedy_by_recomputation(cfg, params, prompt, n):
    """n greedy tokens, the whole sequence recomputed for each (right-padded to the context: causal, so the
    padding is unseen): no cache at all."""
    tokens = list(prompt)
    for _ in range(n):
        padded = np.zeros((1, cfg.seq_len), np.int32)
        padded[0, : len(tokens)] = tokens
        tokens.append(int(np.argmax(_forward(cfg, params, padded)[0, len(tokens) - 1])))
    return tokens[len(prompt) :]


def test_greedy_under_load_equals_recomputation(tiny):
    """More requests than slots, mixed prompt and output lengths, requests joining while others decode:
    every request gets exactly the greedy tokens of recomputing its whole sequence at every token."""
    cfg, params, _ = tiny
    prompts = _prompts(11)
    lengths = [3, 20, 7, 1, 15, 9, 30, 2, 12, 5, 25]
    alone = [greedy_by_recomputation(cfg, params, p, n) for p, n in zip(prompts, lengths)]
    engine = Engine(cfg, params, EngineConfig(slots=4, prefill_chunk=32))
    first = [engine.submit(p, SamplingParams(max_tokens=n, temperature=0)) for p, n in zip(prompts[:6], lengths)]
    for _ in range(5):  # the first wave is mid-flight (some prefilling, some decoding) when the rest arrive
        engine.step()
    assert any(r.tokens for r in first) and not all(r.done for r in first)
    rest = [engine.submit(p, SamplingParams(max_tokens=n, temperature=0)) for p, n in zip(prompts[6:], lengths[6:])]
    engine.run_until_idle()
    for request, want in zip(first + rest, alone):
        assert request.result().tokens == want
        assert request.result().finish_reason == "length"
    assert engine.free_slots() == 4


def test_a_seeded_request_draws_the_same_tokens_whatever_shares_its_batch(tiny):
    cfg, params, _ = tiny
    prompt = _prompts(1, seed=3)[0]
    params_ = SamplingParams(max_tokens=12, temperature=0.9, top_p=0.95, top_k=50, seed=42)
    engine = Engine(cfg, params, EngineConfig(slots=4, prefill_chunk=32))
    alone = engine.submit(prompt, params_)
    engine.run_until_idle()
    crowd = [engine.submit(p, SamplingParams(max_tokens=9, temperature=1.0)) for p in _prompts(3, seed=5)]
    again = engine.submit(prompt, params_)  # lands in another slot, beside three other requests
    engine.run_until_idle()
    assert again.result().tokens == alone.result().tokens
    other_seed = engine.submit(prompt, SamplingParams(**{**params_.__dict__, "seed": 43}))
    engine.run_until_idle()
    assert other_seed.result().tokens != alone.result().tokens
    assert all(r.result().tokens for r in crowd)


def test_prompts_arriving_together_are_read_several_per_step_with_the_same_tokens(tiny):
    """Prompts that arrive together are read several whole prompts per packed chunk: every one still gets the
    greedy tokens of recomputation, and a seeded sample is the one it draws alone, in its own chunk."""
    cfg, params, _ = tiny
    prompts = _prompts(8, seed=7, longest=14)
    lengths = [5, 2, 3, 6, 1, 4, 2, 3]
    engine = Engine(cfg, params, EngineConfig(slots=4, prefill_chunk=32))
    seeded = SamplingParams(max_tokens=6, temperature=1.0, top_p=0.9, seed=5)
    alone = engine.submit(prompts[0], seeded)
    engine.run_until_idle()
    assert engine.packed_steps == 0  # a lone prompt: its own chunk
    requests = [engine.submit(p, SamplingParams(max_tokens=n, temperature=0)) for p, n in zip(prompts, lengths)]
    again = engine.submit(prompts[0], seeded)
    engine.run_until_idle()
    for request, prompt, n in zip(requests, prompts, lengths):
        assert request.result().tokens == greedy_by_recomputation(cfg, params, prompt, n)
    assert again.result().tokens == alone.result().tokens
    assert engine.packed_steps >= 1  # the first four slots' prompts, read together


def test_generate_runs_a_batch_in_two_full_size_programs(tiny):
    """``generate`` (evals, RL rollouts) steps at full size: packed chunks of ``prefill_chunk`` tokens (a lone
    prompt too), decoding over every slot, no mixed steps. A batch whose prompts and outputs vary in length
    compiles two programs (the serving path would compile one per chunk size and decoding width) and gets
    the greedy tokens of recomputation."""
    cfg, params, _ = tiny
    prompts = _prompts(7, seed=11, longest=20)
    lengths = [3, 7, 1, 5, 2, 6, 4]
    engine = Engine(cfg, params, EngineConfig(slots=3, prefill_chunk=64, mixed_chunk=16))  # shapes no test uses
    before = compilations()
    results = engine.generate(prompts, [SamplingParams(max_tokens=n, temperature=0) for n in lengths])
    assert compilations() - before == 2 and engine.mixed_steps == 0 and engine.packed_steps >= 3
    for result, prompt, n in zip(results, prompts, lengths):
        assert result.tokens == greedy_by_recomputation(cfg, params, prompt, n)


def test_sampling_respects_top_k(tiny):
    cfg, params, _ = tiny
    engine = Engine(cfg, params, EngineConfig(slots=2, prefill_chunk=16))
    prompt = [5, 6, 7]
    request = engine.submit(prompt, SamplingParams(max_tokens=1, temperature=5.0, top_k=1, seed=1, logprobs=1))
    engine.run_until_idle()
    # top_k=1 leaves only the argmax, however hot the temperature
    [entry] = request.result().logprobs
    assert entry.token == entry.top[0][0]


@pytest.mark.parametrize("beside_decoding", [False, True])
def test_prompt_and_token_logprobs_are_the_models(tiny, beside_decoding):
    """Alone, the prompt goes in by prefill chunks; beside a decoding request, by mixed steps (the chunk
    and the decoding row in one program): the same log-probabilities either way."""
    cfg, params, _ = tiny
    prompt = _prompts(1, seed=7, longest=80)[0] + [11, 12]  # several prefill chunks of 16
    engine = Engine(cfg, params, EngineConfig(slots=2, prefill_chunk=16))
    if beside_decoding:
        other = engine.submit(_prompts(1, seed=8)[0], SamplingParams(max_tokens=60, temperature=0))
        while not other.tokens:
            engine.step()
    request = engine.submit(prompt, SamplingParams(max_tokens=4, temperature=0, logprobs=3, prompt_logprobs=2))
    engine.run_until_idle()
    assert (engine.mixed_steps >= len(prompt) // 16) if beside_decoding else engine.mixed_steps == 0
    result = request.result()
    row = np.asarray([prompt + result.tokens], np.int32)
    logp = np.asarray(jax.nn.log_softmax(forward(cfg, params, row[:, :-1])[0], axis=-1))
    expected_prompt = [logp[i, prompt[i + 1]] for i in range(len(prompt) - 1)]
    assert result.prompt_logprobs[0].logprob is None and result.prompt_logprobs[0].token == prompt[0]
    got = [e.logprob for e in result.prompt_logprobs[1:]]
    np.testing.assert_allclose(got, expected_prompt, atol=2e-4)
    for i, entry in enumerate(result.logprobs):
        position = len(prompt) - 1 + i
        assert entry.logprob == pytest.approx(logp[position, entry.token], abs=2e-4)
        best = np.argsort(-logp[position])[:3].tolist()
        assert [t for t, _ in entry.top] == best and entry.token == best[0]  # greedy: the top token


def test_stops_end_generation_and_are_not_returned(tiny):
    cfg, params, tokenizer = tiny
    prompt = _prompts(1, seed=11)[0]
    engine = Engine(cfg, params, EngineConfig(slots=2, prefill_chunk=32))
    free = engine.submit(prompt, SamplingParams(max_tokens=20, temperature=0), detokenize=tokenizer.decode)
    engine.run_until_idle()
    tokens = free.result().tokens
    # a stop token: generation ends there, the token is not in the output
    by_token = engine.submit(prompt, SamplingParams(max_tokens=20, temperature=0, stop_token_ids=(tokens[5],)))
    # a stop string taken from the middle of the free text: the text ends right before it
    text = free.result().text
    needle = text[len(text) // 2 : len(text) // 2 + 2]
    by_string = engine.submit(
        prompt, SamplingParams(max_tokens=20, temperature=0, stop=(needle,)), detokenize=tokenizer.decode
    )
    engine.run_until_idle()
    cut = tokens.index(tokens[5])
    # the stop token is the last generated token (its logprob is reported); the text ends before it
    assert by_token.result().tokens == tokens[: cut + 1] and by_token.result().finish_reason == "stop"
    assert by_string.result().text == text[: text.index(needle)] and by_string.result().finish_reason == "stop"
    # end tokens of the engine stop too, unless ignore_eos
    ended = Engine(cfg, params, EngineConfig(slots=1, prefill_chunk=32), end_tokens=(tokens[2],))
    a = ended.submit(prompt, SamplingParams(max_tokens=20, temperature=0))
    b = ended.submit(prompt, SamplingParams(max_tokens=20, temperature=0, ignore_eos=True))
    ended.run_until_idle()
    assert a.result().tokens == tokens[: tokens.index(tokens[2]) + 1] and a.result().finish_reason == "stop"
    assert b.result().tokens == tokens


def test_cancel_frees_the_slot_and_a_full_queue_refuses(tiny):
    cfg, params, _ = tiny
    engine = Engine(cfg, params, EngineConfig(slots=2, prefill_chunk=16, max_waiting=2))
    running = [engine.submit([1, 2, 3], SamplingParams(max_tokens=50, temperature=0)) for _ in range(4)]
    with pytest.raises(QueueFull):
        engine.submit([1], SamplingParams(max_tokens=1))
    engine.step()
    assert engine.free_slots() == 0
    running[0].cancel()
    running[3].cancel()  # still waiting: it never takes a slot
    engine.step()
    assert running[0].result().finish_reason == "cancelled" and running[3].result().finish_reason == "cancelled"
    assert running[2].slot is not None  # the freed slot went to the next waiting request
    engine.run_until_idle()
    assert [len(r.result().tokens) for r in running[1:3]] == [50, 50] and engine.free_slots() == 2


def test_bad_requests_name_their_field(tiny):
    cfg, params, _ = tiny
    engine = Engine(cfg, params, EngineConfig(slots=1, prefill_chunk=16))
    cases = [
        (lambda: engine.submit([], SamplingParams()), "prompt"),
        (lambda: engine.submit([cfg.vocab_size], SamplingParams()), "prompt"),
        (lambda: engine.submit([1] * 100, SamplingParams(max_tokens=29)), "max_tokens"),
        (lambda: SamplingParams(top_p=0), "top_p"),
        (lambda: SamplingParams(temperature=-1), "temperature"),
        (lambda: SamplingParams(logprobs=9), "logprobs"),
        (lambda: engine.submit([1], SamplingParams(stop=("x",))), "stop"),
    ]
    for call, field in cases:
        with pytest.raises(InvalidRequest) as error:
            call()
        assert error.value.param == field


@pytest.mark.parametrize("mixed_chunk", [16, 0])
def test_steady_state_never_recompiles(tiny, mixed_chunk):
    """After ``warmup()`` (every prefill chunk size at every attention span, the decoding and mixed steps at
    every width and span), requests of any prompt length, output length and sampling settings compile
    nothing, with mixed steps or without them."""
    cfg, params, _ = tiny
    engine = Engine(cfg, params, EngineConfig(slots=3, prefill_chunk=32, mixed_chunk=mixed_chunk))
    warm = engine.warmup()
    rng = np.random.default_rng(2)
    for n in [1, 15, 16, 17, 33, 64, 65, 100, 127]:
        prompt = rng.integers(1, 300, size=n).tolist()
        max_tokens = int(rng.integers(1, cfg.seq_len - n + 1))
        engine.submit(prompt, SamplingParams(max_tokens=max_tokens, temperature=0.7, top_p=0.9, logprobs=2))
    engine.submit([1] * 20, SamplingParams(max_tokens=100, temperature=0, prompt_logprobs=1, ignore_eos=True))
    engine.run_until_idle()
    assert compilations() == warm
    assert (engine.mixed_steps > 0) == bool(mixed_chunk)


def test_max_model_len_bounds_the_context_the_cache_and_the_programs(tiny):
    """A served context shorter than the model's: requests past it are refused naming the field, the cache
    holds only its positions, warm-up compiles fewer programs (no spans past it), and what runs is exact."""
    cfg, params, _ = tiny
    short = Engine(cfg, params, EngineConfig(slots=2, prefill_chunk=32, max_model_len=64))
    full = Engine(cfg, params, EngineConfig(slots=2, prefill_chunk=32))
    assert set(cache_positions(short.cache)) == {64 + 32} and set(cache_positions(full.cache)) == {cfg.seq_len + 32}
    with pytest.raises(InvalidRequest) as error:
        short.submit([1] * 60, SamplingParams(max_tokens=5))
    assert error.value.param == "max_tokens" and "64" in str(error.value)
    with pytest.raises(InvalidRequest) as error:
        short.submit([1] * 65, SamplingParams(max_tokens=1))
    assert error.value.param == "prompt"
    assert len(short.programs()) < len(full.programs())  # no programs for the longer spans
    assert max(span for *_, span in short.programs()) < max(span for *_, span in full.programs())
    short.warmup()
    warm = compilations()
    prompt = _prompts(1, seed=5, longest=40)[0]
    [result] = short.generate([prompt], SamplingParams(max_tokens=64 - len(prompt), temperature=0))
    assert result.tokens == greedy_by_recomputation(cfg, params, prompt, 64 - len(prompt))
    assert compilations() == warm  # warm-up covered what it served
    with pytest.raises(ValueError, match="max_model_len"):
        Engine(cfg, params, EngineConfig(max_model_len=cfg.seq_len + 1))


def test_bfloat16_serving_keeps_fp32_log_probabilities(tiny):
    """``dtype="bfloat16"``: weights and cache in bf16 (half the memory), an fp32 RL refresh cast on the way
    in, and log-probabilities still fp32 and within bf16's rounding of the fp32 engine's."""
    cfg, params, _ = tiny
    engine = Engine(cfg, params, EngineConfig(slots=2, prefill_chunk=32, dtype="bfloat16"))
    assert {leaf.dtype for leaf in jax.tree.leaves(engine.params)} == {jnp.dtype(jnp.bfloat16)}
    assert {leaf.dtype for leaf in jax.tree.leaves(engine.cache)} == {jnp.dtype(jnp.bfloat16)}
    prompts = _prompts(3, seed=11, longest=50)
    sampling = SamplingParams(max_tokens=6, temperature=0, logprobs=1, prompt_logprobs=1)
    half = engine.generate(prompts, sampling)
    exact = Engine(cfg, params, EngineConfig(slots=2, prefill_chunk=32)).generate(prompts, sampling)
    for h, e in zip(half, exact):
        assert h.tokens[0] == e.tokens[0]
        assert isinstance(h.logprobs[0].logprob, float)
        got = [x.logprob for x in h.prompt_logprobs[1:]]
        np.testing.assert_allclose(got, [x.logprob for x in e.prompt_logprobs[1:]], atol=0.05)
        assert got != [x.logprob for x in e.prompt_logprobs[1:]]  # it really computed in bf16
    engine.update_params(params)  # fp32 parameters from a trainer: cast, not refused
    assert engine.generate(prompts[:1], sampling)[0].tokens == half[0].tokens
    with pytest.raises(ValueError, match="dtype"):
        EngineConfig(dtype="float16")


def _solo(cfg, params, prompt, sampling, detokenize=None):
    engine = Engine(cfg, params, EngineConfig(slots=1, prefill_chunk=32))
    request = engine.submit(prompt, sampling, detokenize=detokenize)
    engine.run_until_idle()
    return request.result()


POISON = 4_000_000_000  # a valid seed; the failing programs below fail when a row carries it


@pytest.mark.parametrize("consumes_cache", [False, True])
def test_a_failing_program_fails_only_the_request_that_caused_it(tiny, monkeypatch, consumes_cache):
    """A decoding program that fails whenever one particular request is in it (before it ran, or after it
    consumed the donated cache): that request fails; every other request, decoding beside it or waiting,
    finishes with exactly the tokens it gets alone (after a consumed cache, by feeding its tokens again)."""
    import marin.inference.engine as engine_module

    cfg, params, _ = tiny
    real = engine_module.decode_slots

    def decode_slots(cfg, params, cache, tokens, positions, rows, span):
        if POISON in np.asarray(rows.seed).tolist():
            if consumes_cache:
                for x in jax.tree.leaves(cache):
                    x.delete()
            raise RuntimeError("injected program failure")
        return real(cfg, params, cache, tokens, positions, rows, span)

    monkeypatch.setattr(engine_module, "decode_slots", decode_slots)
    prompts = _prompts(6, seed=21, longest=40)
    each = [SamplingParams(max_tokens=12, temperature=0.8, seed=i, logprobs=1) for i in range(6)]
    each[2] = SamplingParams(max_tokens=12, temperature=0.8, seed=POISON)
    engine = Engine(cfg, params, EngineConfig(slots=4, prefill_chunk=32, mixed_chunk=0))
    requests = [engine.submit(p, s) for p, s in zip(prompts, each)]
    engine.run_until_idle()
    with pytest.raises(RuntimeError, match="injected"):
        requests[2].result()
    monkeypatch.setattr(engine_module, "decode_slots", real)
    for i in (0, 1, 3, 4, 5):
        alone = _solo(cfg, params, prompts[i], each[i])
        assert requests[i].result().tokens == alone.tokens
        assert [e.logprob for e in requests[i].result().logprobs] == pytest.approx(
            [e.logprob for e in alone.logprobs], abs=1e-4
        )
    assert engine.free_slots() == 4 and not engine.busy


def test_a_request_whose_text_fails_to_decode_fails_alone(tiny):
    cfg, params, tokenizer = tiny
    prompts = _prompts(3, seed=31, longest=20)
    greedy = SamplingParams(max_tokens=8, temperature=0)

    def broken(ids):
        raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "injected")

    engine = Engine(cfg, params, EngineConfig(slots=4, prefill_chunk=32))
    good = [engine.submit(p, greedy, detokenize=tokenizer.decode) for p in prompts]
    bad = engine.submit(prompts[0], greedy, detokenize=broken)
    engine.run_until_idle()
    with pytest.raises(UnicodeDecodeError):
        bad.result()
    for request, prompt in zip(good, prompts):
        assert request.result().text == _solo(cfg, params, prompt, greedy, tokenizer.decode).text


def test_extreme_valid_values_run_and_invalid_ones_never_reach_a_step(tiny):
    """The edges of what the programs represent (uint32 seeds, int32 top_k, float32 temperatures) run; one
    past them is refused when the parameters are made, naming the field."""
    cfg, params, _ = tiny
    engine = Engine(cfg, params, EngineConfig(slots=4, prefill_chunk=32))
    edges = [
        SamplingParams(max_tokens=3, temperature=1.0, seed=2**32 - 1),
        SamplingParams(max_tokens=3, temperature=3e38, top_k=2**31 - 1, seed=0),
        SamplingParams(max_tokens=3, temperature=1.2e-38, top_p=1e-9, seed=7),
        SamplingParams(max_tokens=3, temperature=0.9, top_k=-1, seed=7),  # -1: off, stored as 0
    ]
    requests = [engine.submit([1, 2, 3], p) for p in edges]
    engine.run_until_idle()
    assert all(len(r.result().tokens) == 3 for r in requests) and edges[3].top_k == 0
    for kwargs, field in [
        (dict(seed=-1), "seed"),
        (dict(seed=2**32), "seed"),
        (dict(seed=2**64), "seed"),
        (dict(top_k=10**12), "top_k"),
        (dict(top_k=-2), "top_k"),
        (dict(temperature=float("nan")), "temperature"),
        (dict(temperature=1e-50), "temperature"),  # float32 would make it 0: greedy
        (dict(temperature=1e39), "temperature"),
        (dict(top_p=float("nan")), "top_p"),
        (dict(max_tokens=True), "max_tokens"),
        (dict(logprobs=6), "logprobs"),
        (dict(stop="\ud800"), "stop"),
        (dict(stop_token_ids=(-1,)), "stop_token_ids"),
    ]:
        with pytest.raises(InvalidRequest) as error:
            SamplingParams(**kwargs)
        assert error.value.param == field, kwargs
