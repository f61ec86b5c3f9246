"""Helpers for the server's tests: serve a tiny export on loopback, talk to it with the real ``openai``
client, and run the same requests alone through a fresh one-slot engine (the reference they must equal)."""

from __future__ import annotations

import contextlib
import time

from marin.inference.engine import Engine, EngineConfig


@contextlib.contextmanager
def serving(checkpoint: str, api_key: str | None = None, graceful_seconds: float = 30, **engine):
    from marin.inference.serve import load_served_model
    from marin.inference.server import serve_on_loopback

    model = load_served_model(checkpoint, engine_config=EngineConfig(**{"slots": 4, "prefill_chunk": 32, **engine}))
    with serve_on_loopback(model, api_key=api_key, graceful_seconds=graceful_seconds) as (url, server):
        yield url, model, server
    assert not model.engine._thread.is_alive()  # shutdown stopped the engine's thread


def client(url, key="unused"):
    import openai

    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=60)


def offline(model, prompts, params) -> list:
    """The same requests through a fresh engine with one slot: one request at a time; their ``Result``s.
    ``params``: one for all, or one per prompt."""
    cfg, end = model.engine.cfg, model.engine.end_tokens
    engine = Engine(cfg, model.engine.params, EngineConfig(slots=1, prefill_chunk=32, max_waiting=1000), end)
    each = params if isinstance(params, list) else [params] * len(prompts)
    requests = [engine.submit(p, q, detokenize=model.decode) for p, q in zip(prompts, each)]
    engine.run_until_idle()
    return [r.result() for r in requests]


def wait_until(condition, seconds=20):
    deadline = time.time() + seconds
    while not condition():
        assert time.time() < deadline, "condition not reached"
        time.sleep(0.02)
