"""Hostile and odd input never hurts a neighbour: values past what the engine represents, lone surrogates,
deep JSON, unsupported fields, echo at a stop token, text offsets, incremental decoding, and a property test
that sends random mixes of valid and invalid values for every field from concurrent clients."""

from __future__ import annotations

import concurrent.futures
import json

import httpx
import numpy as np
import pytest

from marin.inference import SamplingParams
from marin.inference.openai_request import completion_prompts, sampling_params
from tests.export.tiny_model import make_tiny_export
from tests.inference.serving import client, offline, serving
from tests.requirements import require_module

openai = require_module("openai", "the openai client (the dev extra)")
require_module("uvicorn", "uvicorn (the serve extra)")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("hostile") / "base")
    make_tiny_export(path)
    with serving(path) as served:
        yield served


def _post(url, body, timeout=60):
    return httpx.post(f"{url}/v1/completions", content=json.dumps(body), timeout=timeout)


def test_values_the_engine_cannot_hold_are_refused_and_hurt_no_neighbour(served):
    """seed -1 or 2**64 and top_k 10**12 passed validation and overflowed when the engine packed the batch,
    failing every request in flight: now they are 400s naming the field, and the others get their own
    answers."""
    url, model, _ = served
    good = [
        {"prompt": f"The {animal} said", "max_tokens": 12, "temperature": 0.8, "seed": i, "ignore_eos": True}
        for i, animal in enumerate(["cow", "dog", "crow", "cat", "hen", "pig"])
    ]
    bad = [({"seed": -1}, "seed"), ({"seed": 2**64}, "seed"), ({"top_k": 10**12}, "top_k"), ({"seed": 2**32}, "seed")]
    bodies = good[:3] + [{**good[0], **b} for b, _ in bad] + good[3:]
    with concurrent.futures.ThreadPoolExecutor(len(bodies)) as pool:
        responses = list(pool.map(lambda body: _post(url, body), bodies))
    for response, (_, field) in zip(responses[3:7], bad):
        assert response.status_code == 400 and response.json()["error"]["param"] == field
    answers = [r.json()["choices"][0]["text"] for r in responses[:3] + responses[7:]]
    ids = [completion_prompts(model, body["prompt"])[0] for body in good]
    params = [sampling_params(body, 16, None, None) for body in good]
    assert answers == [r.text for r in offline(model, ids, params)]


def test_top_k_minus_one_is_off(served):
    url, model, _ = served
    body = {"prompt": "The cow said", "max_tokens": 8, "temperature": 1.0, "seed": 5, "ignore_eos": True}
    off = _post(url, {**body, "top_k": -1})
    assert off.status_code == 200, off.text
    assert off.json()["choices"][0]["text"] == _post(url, {**body, "top_k": 0}).json()["choices"][0]["text"]
    assert _post(url, {**body, "top_k": -2}).json()["error"]["param"] == "top_k"


def test_lone_surrogates_and_deep_json_are_400s(served):
    url, model, _ = served
    for body, field in [
        ({"prompt": "Pip \ud800 went"}, "prompt"),
        ({"prompt": ["fine", "Pip \udfff went"]}, "prompt"),
        ({"prompt": "x", "stop": ["\ud800"]}, "stop"),
    ]:
        response = _post(url, body)
        assert response.status_code == 400 and response.json()["error"]["param"] == field, response.text
    deep = b"[" * 100_000 + b"]" * 100_000
    response = httpx.post(f"{url}/v1/completions", content=deep, timeout=60)
    assert response.status_code == 400 and "nested too deeply" in response.json()["error"]["message"]
    assert client(url).completions.create(model=model.name, prompt="x", max_tokens=2).choices  # still serving


def test_echo_at_a_stop_token_returns_the_generated_token_and_its_logprob(served):
    """What lm-eval's local-completions sends for every log-likelihood: echo, max_tokens 1. When the model's
    token there ends generation, the response still holds exactly one generated entry after the prompt's."""
    url, model, _ = served
    ids = [*model.prefix, *model.encode_text("Once upon a time")]
    [free] = offline(model, [ids], SamplingParams(max_tokens=1, temperature=0, logprobs=1))
    stop = free.tokens[0]  # the greedy next token, made a stop token
    body = {"prompt": ids, "max_tokens": 1, "temperature": 0, "echo": True, "logprobs": 1, "stop_token_ids": [stop]}
    choice = _post(url, body).json()["choices"][0]
    assert choice["finish_reason"] == "stop"
    logprobs = choice["logprobs"]
    assert len(logprobs["token_logprobs"]) == len(ids) + 1
    assert logprobs["tokens"][-1] == model.token_text(stop)
    assert logprobs["token_logprobs"][-1] == pytest.approx(free.logprobs[0].logprob, abs=1e-5)
    assert choice["text"] == model.decode(ids)  # the text leaves the stop token out


def test_text_offsets_index_the_returned_text(served):
    url, model, _ = served
    prompt = "Once upon a time"
    body = {"prompt": prompt, "max_tokens": 5, "temperature": 0, "echo": True, "logprobs": 0, "ignore_eos": True}
    choice = _post(url, body).json()["choices"][0]
    text, offsets, tokens = choice["text"], choice["logprobs"]["text_offset"], choice["logprobs"]["tokens"]
    assert text.startswith(prompt) and offsets[:2] == [0, 0]  # the hidden document-start token has no text
    pieces = [text[a:b] for a, b in zip(offsets, offsets[1:] + [len(text)])]
    n = len(model.encode_text(prompt)) + 1
    assert pieces[1:n] == tokens[1:n] and "".join(pieces) == text  # (a generated byte may end mid-character)
    plain = _post(url, {**body, "echo": False}).json()["choices"][0]
    assert plain["logprobs"]["text_offset"][0] == 0 and plain["text"] == text[len(prompt) :]


def test_an_over_long_prompt_names_prompt_and_unsupported_fields_are_refused(served):
    url, _, _ = served
    response = _post(url, {"prompt": "Once upon a time. " * 12_000})
    assert response.status_code == 400 and response.json()["error"]["param"] == "prompt"
    for field, value in [("best_of", 3), ("suffix", " the end"), ("logit_bias", {"5": 10}), ("presence_penalty", 1)]:
        response = _post(url, {"prompt": "x", "max_tokens": 1, field: value})
        assert response.status_code == 400 and response.json()["error"]["param"] == field
    neutral = {"prompt": "x", "max_tokens": 1, "best_of": 1, "suffix": None, "logit_bias": {}}
    assert _post(url, neutral).status_code == 200


def test_stop_strings_and_streams_decode_incrementally(served):
    """A streamed reply with stop strings decodes a few tokens per new token, not the whole reply again (the
    engine and the event loop each re-decoded everything per token: O(n²))."""
    url, model, _ = served
    decode, decoded = model.decode, []
    model.decode = lambda ids: decoded.append(len(ids)) or decode(ids)
    body = {"prompt": "x", "max_tokens": 100, "ignore_eos": True, "temperature": 0, "stop": ["never said"]}
    try:
        with httpx.stream("POST", f"{url}/v1/completions", json={**body, "stream": True}, timeout=60) as response:
            chunks = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {")]
    finally:
        model.decode = decode
    text = "".join(c["choices"][0]["text"] for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert text == _post(url, body).json()["choices"][0]["text"]
    assert sum(decoded) < 10 * 100, sum(decoded)  # re-decoding everything per token: ~2 x 100²/2


# ---- the property test ----------------------------------------------------------------------------------

MISSING = object()
WORDS = "once upon a time the cow said moo and the crow said caw then they slept".split()


def _choose(rng, valid: list, invalid: list, p_invalid: float):
    """A value for one field, and whether it is valid (MISSING: the field is left out)."""
    if rng.random() < p_invalid:
        return invalid[rng.integers(len(invalid))], False
    return valid[rng.integers(len(valid))], True


def _random_body(rng, vocab: int) -> tuple[dict, set[str]]:
    """A request body and the names of its invalid fields (empty: well-formed, half of the time)."""
    text = " ".join(rng.choice(WORDS, size=int(rng.integers(1, 8))))
    ids = rng.integers(1, 300, size=int(rng.integers(1, 12))).tolist()
    fields = {
        "prompt": (
            [text, ids, [text, text[:5] or "x"], [ids, ids[:1]]],
            ["Pip \ud800", [vocab], [], [True], 5, [1] * 200],
        ),
        "max_tokens": ([MISSING, 0, 1, 3, 6], [-1, 2.5, "3", 10**30, True]),
        "temperature": ([MISSING, 0, 0.0, 0.7, 1], [-0.5, "hot", float("nan"), 1e-50, float("inf")]),
        "top_p": ([MISSING, 0.9, 1], [0, 1.5, float("nan")]),
        "top_k": ([MISSING, 0, -1, 5, 2**31 - 1], [-2, 10**12, 1.5]),
        "seed": ([MISSING, 0, 12345, 2**32 - 1], [-1, 2**64, "1", 2**32]),
        "stop": ([MISSING, "the", ["a", "zz"], []], [[3], "\ud800", 5]),
        "stop_token_ids": ([MISSING, [7], []], [[-1], [10**9], "5"]),
        "logprobs": ([MISSING, 0, 2, 5], [6, -1, True]),
        "echo": ([MISSING, True, False], ["yes"]),
        "n": ([MISSING, 1, 2], [0, 17, 1.0]),
        "ignore_eos": ([MISSING, True, False], [1]),
        "best_of": ([MISSING, 1], [3]),
        "logit_bias": ([MISSING, {}], [{"5": 1}]),
        "stream": ([MISSING, False, True], ["true"]),
    }
    body, invalid = {}, set()
    spoiled = set(rng.choice(list(fields), size=int(rng.integers(1, 3)))) if rng.random() < 0.5 else set()
    for name, (good, bad) in fields.items():
        value, ok = _choose(rng, good, bad, 1.0 if name in spoiled else 0.0)
        if value is not MISSING:
            body[name] = value
        if not ok:
            invalid.add(name)
    if body.get("stream") is True and body.get("echo") is True:
        invalid.add("echo")  # not supported together
    sampled = body.get("temperature", 1) not in (0, 0.0)
    if sampled and "seed" not in body:
        body["seed"] = int(rng.integers(0, 2**32))  # unseeded samples cannot be compared with a solo run
    return body, invalid


def _answer(response, streamed: bool) -> list[dict]:
    """Per choice: text, finish_reason, token log-probabilities (None without logprobs)."""
    if not streamed:
        return [
            {"text": c["text"], "finish": c["finish_reason"], "lp": c["logprobs"] and c["logprobs"]["token_logprobs"]}
            for c in response.json()["choices"]
        ]
    lines = [line for line in response.text.splitlines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    out: dict[int, dict] = {}
    for line in lines[:-1]:
        for c in json.loads(line[6:])["choices"]:
            entry = out.setdefault(c["index"], {"text": "", "finish": None, "lp": None})
            entry["text"] += c["text"]
            entry["finish"] = c["finish_reason"] or entry["finish"]
            if c["logprobs"] is not None:
                entry["lp"] = (entry["lp"] or []) + c["logprobs"]["token_logprobs"]
    return [out[i] for i in sorted(out)]


def _expected(model, body: dict) -> list[dict]:
    """The same request run alone, prompt by prompt and sample by sample, through a one-slot engine."""
    echo, logprobs, n = body.get("echo", False), body.get("logprobs"), body.get("n", 1)
    params = sampling_params(body, 16, logprobs, logprobs if echo else None)
    prompts = completion_prompts(model, body["prompt"])
    pairs = [(p, params.with_seed_offset(j)) for p in prompts for j in range(n)]
    results = offline(model, [p for p, _ in pairs], [q for _, q in pairs])
    out = []
    for (prompt, _), r in zip(pairs, results):
        entries = ((r.prompt_logprobs or []) if echo else []) + (r.logprobs or [])
        text = model.decode(prompt) + r.text if echo else r.text
        lp = [e.logprob for e in entries] if logprobs is not None else None
        out.append({"text": text, "finish": r.finish_reason, "lp": lp})
    return out


def test_random_mixes_of_valid_and_invalid_values_from_concurrent_clients(served):
    """No 5xx, no crash; every malformed request a 400 naming one of its invalid fields; every well-formed one
    exactly its solo answer (text, finish reason, log-probabilities), whatever shared its batches."""
    url, model, _ = served
    rng = np.random.default_rng(36)
    cases = [_random_body(rng, model.engine.cfg.vocab_size) for _ in range(72)]
    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        responses = list(pool.map(lambda case: _post(url, case[0]), cases))
    well_formed = 0
    for (body, invalid), response in zip(cases, responses):
        assert response.status_code < 500, (body, response.text)
        if invalid:
            assert response.status_code == 400, (body, response.text)
            assert response.json()["error"]["param"] in invalid, (body, invalid, response.text)
            continue
        well_formed += 1
        assert response.status_code == 200, (body, response.text)
        got, want = _answer(response, body.get("stream") is True), _expected(model, body)
        assert [(g["text"], g["finish"]) for g in got] == [(w["text"], w["finish"]) for w in want], body
        for g, w in zip(got, want):
            assert (g["lp"] is None) == (w["lp"] is None), body
            if g["lp"] is not None:
                assert g["lp"] == pytest.approx(w["lp"], abs=1e-4), body
    assert 0.3 * len(cases) < well_formed < 0.7 * len(cases)  # both kinds were exercised
    assert httpx.get(f"{url}/health").json() == {"status": "ok", "free_slots": 4, "waiting": 0}
    assert model.engine._thread.is_alive()
