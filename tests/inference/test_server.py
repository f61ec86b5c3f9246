"""The OpenAI-compatible server, through the real ``openai`` client on loopback: completions, chat,
streaming, stops, logprobs, every error shape, a full queue, disconnects, 16 concurrent clients, shutdown."""

from __future__ import annotations

import concurrent.futures
import json
import threading
import time

import httpx
import pytest

from marin.inference import SamplingParams
from tests.export.tiny_model import make_tiny_export
from tests.inference.serving import client as _client
from tests.inference.serving import offline, serving, wait_until
from tests.requirements import require_module

openai = require_module("openai", "the openai client (the dev extra)")
uvicorn = require_module("uvicorn", "uvicorn (the serve extra)")


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve")
    make_tiny_export(str(root / "base"))
    make_tiny_export(str(root / "chat"), chat=True)
    return {"base": str(root / "base"), "chat": str(root / "chat")}


@pytest.fixture(scope="module")
def base(exports):
    with serving(exports["base"]) as served:
        yield served


def _offline(model, prompts, params) -> list[str]:
    return [r.text for r in offline(model, prompts, params)]


def test_completions_stream_stop_and_logprobs(base):
    url, model, _ = base
    client = _client(url)
    assert [m.id for m in client.models.list().data] == [model.name]
    prompt = "Once upon a time"
    out = client.completions.create(model=model.name, prompt=prompt, max_tokens=12, temperature=0, logprobs=2)
    [choice] = out.choices
    ids = [*model.prefix, *model.encode_text(prompt)]
    want = _offline(model, [ids], SamplingParams(max_tokens=12, temperature=0))[0]
    assert choice.text == want and out.usage.prompt_tokens == len(ids)
    assert len(choice.logprobs.token_logprobs) == out.usage.completion_tokens
    assert all(len(top) <= 2 for top in choice.logprobs.top_logprobs)

    streamed = client.completions.create(model=model.name, prompt=prompt, max_tokens=12, temperature=0, stream=True)
    chunks = list(streamed)
    assert "".join(c.choices[0].text for c in chunks) == want and len(chunks) > 2
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")

    stop = want[4:6]
    cut = client.completions.create(model=model.name, prompt=prompt, max_tokens=12, temperature=0, stop=[stop])
    assert cut.choices[0].text == want[: want.index(stop)] and cut.choices[0].finish_reason == "stop"
    streamed_cut = client.completions.create(
        model=model.name, prompt=prompt, max_tokens=12, temperature=0, stop=[stop], stream=True
    )
    assert "".join(c.choices[0].text for c in streamed_cut) == cut.choices[0].text  # never sends past the stop

    # token-id prompts, several per request, echo with prompt logprobs: what lm-eval's local-completions sends
    echo = client.completions.create(
        model=model.name, prompt=[ids, ids[:3]], max_tokens=1, temperature=0, echo=True, logprobs=1
    )
    assert [c.index for c in echo.choices] == [0, 1]
    lp = echo.choices[0].logprobs
    assert lp.token_logprobs[0] is None and len(lp.token_logprobs) == len(ids) + 1
    assert echo.choices[1].logprobs.token_logprobs[1:3] == pytest.approx(lp.token_logprobs[1:3], abs=1e-5)


def test_chat_completions_use_the_checkpoints_template(exports):
    from marin.chat.template import ChatTokenizer

    with serving(exports["chat"]) as (url, model, _):
        client = _client(url)
        messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What does the cow say?"}]
        out = client.chat.completions.create(model=model.name, messages=messages, max_tokens=10, temperature=0)
        prompt = ChatTokenizer.load(exports["chat"]).encode_prompt(messages).tolist()
        want = _offline(model, [prompt], SamplingParams(max_tokens=10, temperature=0))[0]
        assert out.choices[0].message.content == want and out.choices[0].message.role == "assistant"
        assert out.usage.prompt_tokens == len(prompt)
        chunks = list(
            client.chat.completions.create(
                model=model.name, messages=messages, max_tokens=10, temperature=0, stream=True
            )
        )
        assert chunks[0].choices[0].delta.role == "assistant"
        assert "".join(c.choices[0].delta.content or "" for c in chunks) == want
        with_logprobs = client.chat.completions.create(
            model=model.name, messages=messages, max_tokens=3, temperature=0, logprobs=True, top_logprobs=2
        )
        entries = with_logprobs.choices[0].logprobs.content
        assert entries and all(len(e.top_logprobs) == 2 and e.logprob <= 0 for e in entries)


def test_bad_requests_get_openai_errors_naming_the_field(base):
    url, model, _ = base
    client = _client(url)
    cases = [
        (dict(model="no-such-model", prompt="x"), "model"),
        (dict(model=model.name, prompt="x", max_tokens=500), "max_tokens"),
        (dict(model=model.name, prompt="x", temperature=-1), "temperature"),
        (dict(model=model.name, prompt="x", top_p=0), "top_p"),
        (dict(model=model.name, prompt="x", logprobs=9), "logprobs"),
        (dict(model=model.name, prompt="x", stop=[3]), "stop"),
        (dict(model=model.name, prompt=[[model.engine.cfg.vocab_size]]), "prompt"),
    ]
    for kwargs, field in cases:
        with pytest.raises(openai.BadRequestError) as error:
            client.completions.create(**kwargs)
        assert error.value.body["param"] == field and error.value.body["type"] == "invalid_request_error"
        assert error.value.status_code == 400
    with pytest.raises(openai.BadRequestError) as error:  # a base model has no chat template
        client.chat.completions.create(model=model.name, messages=[{"role": "user", "content": "hi"}])
    assert error.value.body["param"] == "messages"
    raw = httpx.post(f"{url}/v1/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert raw.status_code == 400 and "not valid JSON" in raw.json()["error"]["message"]
    wrong_type = httpx.post(f"{url}/v1/completions", json={"prompt": "x", "max_tokens": "ten"})
    assert wrong_type.status_code == 400 and wrong_type.json()["error"]["param"] == "max_tokens"
    # the server is still up and serving
    assert client.completions.create(model=model.name, prompt="x", max_tokens=2).choices
    assert httpx.get(f"{url}/health").json()["status"] == "ok"


def test_served_context_and_precision(exports):
    """``--max_model_len`` and ``--dtype``: /v1/models reports the context served, a request past it is a 400
    naming ``max_tokens``, and ``auto`` is bf16 on an accelerator, the weights' own precision on a CPU."""
    from marin.inference.serve import argument_parser, engine_config

    args = argument_parser().parse_args(["--checkpoint", exports["base"], "--max_model_len", "48"])
    assert engine_config(args, "gpu").dtype == "bfloat16" and engine_config(args, "tpu").dtype == "bfloat16"
    assert engine_config(args, "cpu").dtype is None and engine_config(args, "gpu").max_model_len == 48
    pinned = argument_parser().parse_args(["--checkpoint", "x", "--dtype", "float32"])
    assert engine_config(pinned, "gpu").dtype == "float32"
    with serving(exports["base"], max_model_len=48, dtype="bfloat16") as (url, model, _):
        [entry] = httpx.get(f"{url}/v1/models").json()["data"]
        assert entry["max_model_len"] == 48
        with pytest.raises(openai.BadRequestError) as error:
            _client(url).completions.create(model=model.name, prompt="x", max_tokens=60)
        assert error.value.body["param"] == "max_tokens"
        assert _client(url).completions.create(model=model.name, prompt="x", max_tokens=4).choices[0].text is not None


def test_api_key(exports):
    with serving(exports["base"], api_key="s3cret") as (url, model, _):
        with pytest.raises(openai.AuthenticationError):
            _client(url, "wrong").completions.create(model=model.name, prompt="x", max_tokens=1)
        assert _client(url, "s3cret").completions.create(model=model.name, prompt="x", max_tokens=1).choices
        assert httpx.get(f"{url}/health").status_code == 200  # health needs no key


def test_full_queue_answers_429_and_disconnects_free_slots(exports):
    with serving(exports["base"], slots=2, max_waiting=1) as (url, model, _):
        long = SamplingParams(max_tokens=100, temperature=0, ignore_eos=True)
        hogs = [model.engine.submit([1, 2, 3], long) for _ in range(3)]  # two slots and the one waiting place
        with pytest.raises(openai.RateLimitError) as error:
            _client(url).completions.create(model=model.name, prompt="x", max_tokens=1)
        assert error.value.status_code == 429
        for hog in hogs:
            hog.cancel()
        wait_until(lambda: httpx.get(f"{url}/health").json()["free_slots"] == 2)

        # Each engine step now takes 10 ms (100 tokens: over a second), and every request is recorded.
        step, submit, seen = model.engine.step, model.engine.submit, []
        model.engine.step = lambda: (time.sleep(0.01), step())
        model.engine.submit = lambda *a, **k: seen.append(submit(*a, **k)) or seen[-1]
        # a streaming client that goes away mid-stream frees its slot at once, long before max_tokens
        body = {"model": model.name, "prompt": "x", "max_tokens": 100, "ignore_eos": True, "stream": True}
        with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=30) as response:
            lines = response.iter_lines()
            assert next(line for line in lines if line.startswith("data:"))
            assert httpx.get(f"{url}/health").json()["free_slots"] == 1
        wait_until(lambda: httpx.get(f"{url}/health").json()["free_slots"] == 2)
        # so does a client that stops waiting for a non-streamed answer
        body["stream"] = False
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{url}/v1/completions", json=body, timeout=0.3)
        wait_until(lambda: httpx.get(f"{url}/health").json()["free_slots"] == 2)
        assert [r.result().finish_reason for r in seen] == ["cancelled", "cancelled"]
        assert all(len(r.result().tokens) < 100 for r in seen)


def test_200_requests_from_16_clients_each_get_their_own_continuation(base):
    url, model, _ = base
    client = _client(url)
    prompts = [f"Request {i}: the {['cow', 'dog', 'crow', 'cat'][i % 4]} said" for i in range(200)]
    lengths = [1 + (i * 7) % 13 for i in range(200)]

    def ask(i):
        out = client.completions.create(model=model.name, prompt=prompts[i], max_tokens=lengths[i], temperature=0)
        return i, out.choices[0].text

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        answers = dict(pool.map(ask, range(200)))
    ids = [[*model.prefix, *model.encode_text(p)] for p in prompts]
    want = _offline(model, ids, [SamplingParams(max_tokens=n, temperature=0) for n in lengths])
    assert [answers[i] for i in range(200)] == want  # none lost, none crossed: each its own, token for token
    health = httpx.get(f"{url}/health").json()
    assert health["free_slots"] == 4 and health["waiting"] == 0


def _hold_engine(engine, until: threading.Event, free=lambda: False) -> None:
    """Before each step the engine waits for ``until`` unless ``free()``: no request can finish before the
    test lets it, however fast the host."""
    step = engine.step

    def held():
        while not free() and not until.is_set():
            time.sleep(0.005)
        step()

    engine.step = held


def test_shutdown_lets_running_requests_finish(exports):
    results, release = {}, threading.Event()
    with serving(exports["base"]) as (url, model, server):
        _hold_engine(model.engine, release)

        def ask():
            body = {"model": model.name, "prompt": "x", "max_tokens": 60, "ignore_eos": True}
            results["response"] = httpx.post(f"{url}/v1/completions", json=body, timeout=60)

        thread = threading.Thread(target=ask)
        thread.start()
        wait_until(lambda: model.engine.busy)  # queued, and held there
        server.should_exit = True  # what SIGTERM / Ctrl-C does
        assert server.shutting_down.wait(10)
        release.set()  # the request runs only once the shutdown has begun
        thread.join(60)
    response = results["response"]
    assert response.status_code == 200 and response.json()["usage"]["completion_tokens"] == 60
    assert json.loads(response.text)["choices"][0]["finish_reason"] == "length"


def test_shutdown_past_the_grace_period_answers_every_client(exports):
    """A stream and a plain request still running when the graceful period ends each get an answer of their
    own in OpenAI's shape: the text so far with finish_reason "cancelled" (the stream then [DONE]), and the
    server and its engine stop."""
    results, cancelled = {}, threading.Event()
    with serving(exports["base"], graceful_seconds=0.3) as (url, model, server):
        engine = model.engine
        stop = engine.stop

        def stop_then_release(cancel=True, timeout=30):
            stop(cancel, 0)  # the requests are marked cancelled before the held engine steps again
            cancelled.set()
            stop(cancel, timeout)

        engine.stop = stop_then_release

        def both_queued_and_not_both_started():
            requests = [r for r in [*engine.slots, *engine.waiting] if r is not None]
            return len(requests) == 2 and not all(r.tokens for r in requests)

        # each gets its first tokens, then nothing happens until the grace period ends
        _hold_engine(engine, cancelled, both_queued_and_not_both_started)
        body = {"model": model.name, "prompt": "x", "max_tokens": 100, "ignore_eos": True}

        def plain():
            results["plain"] = httpx.post(f"{url}/v1/completions", json=body, timeout=60)

        def stream():
            with httpx.stream("POST", f"{url}/v1/completions", json={**body, "stream": True}, timeout=60) as r:
                results["stream"] = [line for line in r.iter_lines() if line.startswith("data: ")]

        threads = [threading.Thread(target=plain), threading.Thread(target=stream)]
        for thread in threads:
            thread.start()
        wait_until(lambda: [bool(r.tokens) for r in engine.slots if r is not None] == [True, True])
        server.should_exit = True
        for thread in threads:
            thread.join(60)
    plain = results["plain"]
    assert plain.status_code == 200, plain.text
    [choice] = plain.json()["choices"]
    assert choice["finish_reason"] == "cancelled" and 0 < plain.json()["usage"]["completion_tokens"] < 100
    lines = results["stream"]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[6:]) for line in lines[:-1]]
    assert chunks[-1]["choices"][0]["finish_reason"] == "cancelled"
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
