"""An OpenAI-compatible HTTP server over the engine: ``/v1/models``, ``/v1/completions``,
``/v1/chat/completions`` (the checkpoint's own chat template), server-sent-event streaming for both, ``/health``.

    server = make_server(ServedModel.load(...), host="127.0.0.1", port=8000, graceful_seconds=30)
    server.run()                     # or: with serve_on_loopback(model) as (url, server): ...

Requests become engine requests (``marin.inference.engine``); the engine steps in its own thread and hands
each request's events (new text, its logprob entry, the result) back to the request's event loop. Every field
is checked before anything is queued (``openai_request``); errors are OpenAI's shape, ``{"error": {"message",
"type", "param", "code"}}``: 400 for malformed JSON, an unknown model, invalid or unsupported parameters, a
prompt or prompt plus ``max_tokens`` over the context; 401 for a missing or wrong API key; 429 when the
engine's queue is full; 500 (``server_error``) only when the engine failed that request. A client that
disconnects has its requests cancelled, which frees their slots at the engine's next step.

Shutdown (SIGTERM, Ctrl-C): the server stops taking connections, lets running requests finish for
``graceful_seconds``, then cancels the engine's requests, so that every client still waiting gets its own
answer (``finish_reason: "cancelled"``, and ``[DONE]`` on a stream) before the connections close; uvicorn's
own deadline, which would cut the connections, comes ``LAST_RESORT_SECONDS`` later.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import json
import logging
import secrets
import socket
import threading
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

from marin.inference.detokenize import TextStream, text_offsets
from marin.inference.engine import Engine, EngineStopped, InvalidRequest, QueueFull, Result, TokenLogprob
from marin.inference.openai_request import (
    ApiError,
    chat_prompt,
    completion_prompts,
    field,
    parse_body,
    refuse_unsupported,
    sampling_params,
)
from marin.inference.sampling_params import SamplingParams

logger = logging.getLogger(__name__)

LONG_TEXT = 1 << 14  # characters of prompt text encoded off the event loop
LAST_RESORT_SECONDS = 10
"""After the graceful period, how long cancelled requests have to send their answers before uvicorn cuts
the connections."""


@dataclasses.dataclass
class ServedModel:
    """What the server needs beyond the engine: names, how to encode and decode text, the chat template."""

    name: str
    aliases: tuple[str, ...]
    engine: Engine
    encode_text: Callable[[str], list[int]]  # text -> ids, without any special token
    decode: Callable[[list[int]], str]  # generated ids -> text, special tokens left out (as vLLM does)
    token_text: Callable[[int], str]  # one id -> its text, special tokens included (logprobs' "tokens")
    prefix: tuple[int, ...]  # what the exported tokenizer puts before a text prompt
    chat: Any | None  # a marin.chat.template.ChatTokenizer, or None for a base model

    @property
    def seq_len(self) -> int:
        return self.engine.cfg.seq_len


# ---- engine bridge -------------------------------------------------------------------------------------


class _Mailbox:
    """Engine events bound for one event loop. The engine's thread posts them; the loop takes them all in
    one callback, so a decoding step that produced a token for sixteen requests wakes the loop once, not
    sixteen times."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.pending: collections.deque = collections.deque()
        self.lock = threading.Lock()
        self.scheduled = False

    def post(self, stream: _Stream, event: tuple) -> None:
        with self.lock:
            self.pending.append((stream, event))
            if self.scheduled:
                return
            self.scheduled = True
        self.loop.call_soon_threadsafe(self.deliver)

    def deliver(self) -> None:
        with self.lock:
            batch, self.pending, self.scheduled = self.pending, collections.deque(), False
        for stream, event in batch:
            stream.receive(event)


_MAILBOXES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class _Stream:
    """Engine events of one request, delivered on the server's event loop: ``events`` for a streaming
    response, ``finished`` (the result, or the error) for a plain one."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.mailbox = _MAILBOXES.get(loop) or _MAILBOXES.setdefault(loop, _Mailbox(loop))
        self.events: asyncio.Queue = asyncio.Queue()
        self.finished: asyncio.Future = loop.create_future()

    def __call__(self, *event) -> None:  # the engine's thread
        self.mailbox.post(self, event)

    def receive(self, event: tuple) -> None:  # the event loop
        self.events.put_nowait(event)
        if event[0] == "done" and not self.finished.done():
            self.finished.set_result(event[1])


def _submit_all(model: ServedModel, prompts: list[list[int]], params: SamplingParams, n: int):
    """Submit every (prompt, sample) pair, all checked before any is queued; all or nothing (a full queue
    cancels the ones already in)."""
    engine, loop = model.engine, asyncio.get_running_loop()
    try:
        prompts = [engine.check(prompt, params, model.decode) for prompt in prompts]
    except InvalidRequest as error:
        raise ApiError(400, str(error), error.param) from error
    submitted = []
    try:
        for prompt in prompts:
            for j in range(n):
                stream = _Stream(loop)
                p = params.with_seed_offset(j)
                submitted.append((engine.submit(prompt, p, detokenize=model.decode, on_event=stream), stream))
    except (QueueFull, EngineStopped) as error:
        for request, _ in submitted:
            request.cancel()
        if isinstance(error, EngineStopped):
            raise ApiError(503, str(error), None, "server_error") from error
        raise ApiError(429, f"the server is busy: {error}; retry later", None, "rate_limit_error") from error
    return submitted


def _failed(error: BaseException) -> ApiError:
    return ApiError(500, f"the engine failed this request: {type(error).__name__}: {error}", None, "server_error")


async def _wait_all(submitted, http: Request) -> list[Result]:
    """Results of every request; if the client goes away first, cancel them all."""
    finished = asyncio.gather(*(stream.finished for _, stream in submitted))
    # the body has been read: the next ASGI message is the client's disconnect, if it comes
    disconnected = asyncio.ensure_future(_disconnect(http))
    try:
        await asyncio.wait([finished, disconnected], return_when=asyncio.FIRST_COMPLETED)
        if not finished.done():
            raise asyncio.CancelledError
        results = finished.result()
        for result in results:
            if isinstance(result, BaseException):
                raise _failed(result)
        return results
    finally:
        disconnected.cancel()
        finished.cancel()  # a no-op once every result is in
        for r, _ in submitted:
            if not r.done:
                r.cancel()


async def _disconnect(http: Request) -> None:
    while (await http.receive())["type"] != "http.disconnect":
        pass


# ---- responses ---------------------------------------------------------------------------------------------


def _logprobs_doc(model: ServedModel, entries: list[TokenLogprob], offsets: list[int]) -> dict:
    tokens, token_logprobs, top_logprobs = [], [], []
    for entry in entries:
        tokens.append(model.token_text(entry.token))
        token_logprobs.append(entry.logprob)
        top = {}
        for token, logprob in entry.top:
            top.setdefault(model.token_text(token), logprob)
        top_logprobs.append(top if entry.logprob is not None else None)
    return {"tokens": tokens, "token_logprobs": token_logprobs, "top_logprobs": top_logprobs, "text_offset": offsets}


def _chat_logprobs(model: ServedModel, entries: list[TokenLogprob]) -> dict:
    def item(token, logprob):
        text = model.token_text(token)
        return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}

    return {
        "content": [{**item(e.token, e.logprob), "top_logprobs": [item(t, lp) for t, lp in e.top]} for e in entries]
    }


def _usage(results: list[Result]) -> dict:
    prompt = sum(r.prompt_tokens for r in results)
    completion = sum(len(r.tokens) for r in results)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


async def _prompts(model: ServedModel, prompt) -> list[list[int]]:
    """The prompts as token ids; long texts are encoded in a worker thread (2 MB take seconds to encode, and
    the event loop serves every other client meanwhile)."""
    texts = [prompt] if isinstance(prompt, str) else prompt if isinstance(prompt, list) else []
    if sum(len(t) for t in texts if isinstance(t, str)) > LONG_TEXT:
        return await asyncio.to_thread(completion_prompts, model, prompt)
    return completion_prompts(model, prompt)


def _completion_choice(model: ServedModel, index: int, prompt: list[int], result: Result, echo: bool, logprobs) -> dict:
    """One choice of a completion. With ``echo`` the text and the log-probabilities start with the prompt's
    (its hidden document-start token has no text: offsets count only what ``text`` shows); the generated
    entries include the stop token's, as lm-eval's API models expect exactly one entry per generated token."""
    text, doc = result.text, None
    if echo:
        text = model.decode(prompt) + text
    if logprobs is not None:
        entries = (result.prompt_logprobs or []) if echo else []
        entries = entries + (result.logprobs or [])
        ids = [e.token for e in entries]
        doc = _logprobs_doc(model, entries, text_offsets(model.decode, ids))
    return {"index": index, "text": text, "logprobs": doc, "finish_reason": result.finish_reason}


async def completions(http: Request):
    model: ServedModel = http.app.state.model
    body = await _read_body(http)
    refuse_unsupported(body, "completions")
    echo = field(body, "echo", bool, False, expected="a boolean")
    n = field(body, "n", int, 1, check=lambda v: 1 <= v <= 16, expected="an integer in 1..16")
    stream = field(body, "stream", bool, False, expected="a boolean")
    if stream and echo:
        raise ApiError(400, "'echo' is not supported with 'stream'", "echo")
    logprobs = body.get("logprobs")  # checked by SamplingParams (0..5)
    params = sampling_params(body, 16, logprobs, logprobs if echo else None)
    submitted = _submit_all(model, await _prompts(model, body.get("prompt")), params, n)
    head = {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time())}
    head["model"] = model.name
    if stream:
        return _sse(_stream_completions(model, submitted, head, logprobs is not None))
    results = await _wait_all(submitted, http)
    choices = [
        _completion_choice(model, i, request.prompt, result, echo, logprobs)
        for i, ((request, _), result) in enumerate(zip(submitted, results))
    ]
    return {**head, "choices": choices, "usage": _usage(results)}


async def chat_completions(http: Request):
    model: ServedModel = http.app.state.model
    body = await _read_body(http)
    refuse_unsupported(body, "chat")
    prompt = chat_prompt(model, body)
    logprobs = field(body, "logprobs", bool, False, expected="a boolean")
    top = field(body, "top_logprobs", int, 0, check=lambda v: 0 <= v <= 5, expected="an integer in 0..5")
    n = field(body, "n", int, 1, check=lambda v: 1 <= v <= 16, expected="an integer in 1..16")
    stream = field(body, "stream", bool, False, expected="a boolean")
    params = sampling_params(body, max(model.seq_len - len(prompt), 0), top if logprobs else None, None)
    submitted = _submit_all(model, [prompt], params, n)
    rid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
    if stream:
        head = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model.name}
        return _sse(_stream_chat(model, submitted, head, logprobs))
    results = await _wait_all(submitted, http)
    choices = [
        {
            "index": i,
            "message": {"role": "assistant", "content": result.text},
            "logprobs": _chat_logprobs(model, result.logprobs) if logprobs else None,
            "finish_reason": result.finish_reason,
        }
        for i, result in enumerate(results)
    ]
    head = {"id": rid, "object": "chat.completion", "created": created, "model": model.name}
    return {**head, "choices": choices, "usage": _usage(results)}


def _authenticate(http: Request) -> None:
    # A check in each /v1 handler, not an HTTP middleware: Starlette's BaseHTTPMiddleware wraps
    # `receive`, and then a handler can no longer see its client disconnect.
    api_key = http.app.state.api_key
    if api_key and not secrets.compare_digest(http.headers.get("authorization", ""), f"Bearer {api_key}"):
        raise ApiError(401, "invalid or missing API key (Authorization: Bearer ...)", None, "authentication_error")


async def _read_body(http: Request) -> dict:
    _authenticate(http)
    body = parse_body(await http.body())
    model: ServedModel = http.app.state.model
    name = body.get("model")
    if name is not None and name not in (model.name, *model.aliases):
        raise ApiError(400, f"unknown model {name!r:.200}; this server serves {model.name!r}", "model")
    return body


async def index(http: Request):
    model: ServedModel = http.app.state.model
    return {"server": "marin.inference.server", "model": model.name, "api": "/v1", "health": "/health"}


async def health(http: Request):
    engine = http.app.state.model.engine
    return {"status": "ok", "free_slots": engine.free_slots(), "waiting": len(engine.waiting)}


async def models(http: Request):
    _authenticate(http)
    model: ServedModel = http.app.state.model
    entry = {"id": model.name, "object": "model", "created": 0, "owned_by": "marin", "max_model_len": model.seq_len}
    return {"object": "list", "data": [entry]}


async def _api_error(_, error: ApiError):
    return error.response()


async def _internal_error(_, error: Exception):
    """A bug of the server's own still answers in OpenAI's shape (Starlette logs it)."""
    return ApiError(500, f"internal error: {type(error).__name__}", None, "server_error").response()


def create_app(model: ServedModel, api_key: str | None = None) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(_):
        yield
        # after the graceful period: what is still running is cancelled (without blocking the event loop)
        await asyncio.to_thread(model.engine.stop, True)

    app = FastAPI(title="marin inference server", lifespan=lifespan)
    app.state.model, app.state.api_key = model, api_key
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(Exception, _internal_error)
    app.add_api_route("/", index, methods=["GET"])
    app.add_api_route("/health", health, methods=["GET"])
    app.add_api_route("/v1/models", models, methods=["GET"])
    app.add_api_route("/v1/completions", completions, methods=["POST"])
    app.add_api_route("/v1/chat/completions", chat_completions, methods=["POST"])
    return app


# ---- streaming ----------------------------------------------------------------------------------------------


def _sse(events: AsyncIterator[dict]) -> StreamingResponse:
    async def body():
        try:
            async for event in events:
                yield f"data: {json.dumps(event)}\n\n"
        except ApiError as error:  # the engine failed a request mid-stream: say so in OpenAI's shape
            yield f"data: {json.dumps(error.body())}\n\n"
        yield "data: [DONE]\n\n"

    return StreamingResponse(body(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


async def _events(submitted) -> AsyncIterator[tuple]:
    """(choice index, kind, *payload) from all of a request's engine requests as they arrive; cancels them
    all if the consumer stops early (the client disconnected)."""
    try:
        if len(submitted) == 1:  # the common case: read the one stream directly
            events = submitted[0][1].events
            while True:
                event = await events.get()
                yield 0, *event
                if event[0] == "done":
                    return
        merged: asyncio.Queue = asyncio.Queue()

        async def pump(index, stream):
            while True:
                event = await stream.events.get()
                await merged.put((index, *event))
                if event[0] == "done":
                    return

        tasks = [asyncio.create_task(pump(i, s)) for i, (_, s) in enumerate(submitted)]
        remaining = len(submitted)
        try:
            while remaining:
                index, *event = await merged.get()
                remaining -= event[0] == "done"
                yield index, *event
        finally:
            for task in tasks:
                task.cancel()
    finally:
        for request, _ in submitted:
            if not request.done:
                request.cancel()


async def _deltas(submitted) -> AsyncIterator[tuple[int, str, list, Result | None]]:
    """(choice index, new text, new logprob entries, final result or None) as the engine reports them: the
    engine decodes incrementally and holds back what may still become a stop string, so nothing here decodes."""
    sent = [0] * len(submitted)
    entries: list[list] = [[] for _ in submitted]
    async for index, kind, *payload in _events(submitted):
        if kind == "token":
            _, delta, entry = payload
            if entry is not None:
                entries[index].append(entry)
            if not delta:
                continue
            final = None
        else:
            (final,) = payload
            if isinstance(final, BaseException):
                raise _failed(final)
            delta = final.text[sent[index] :]
        sent[index] += len(delta)
        new, entries[index] = entries[index], []
        yield index, delta, new, final


async def _stream_completions(model, submitted, head, with_logprobs) -> AsyncIterator[dict]:
    offsets = [TextStream(model.decode) for _ in submitted]  # where each streamed token's text starts
    async for index, delta, new, final in _deltas(submitted):
        doc = None
        if with_logprobs:
            starts = []
            for entry in new:
                starts.append(len(offsets[index].text))
                offsets[index].push(entry.token)
            doc = _logprobs_doc(model, new, starts)
        choice = {"index": index, "text": delta, "logprobs": doc, "finish_reason": final and final.finish_reason}
        yield {**head, "choices": [choice]}


async def _stream_chat(model, submitted, head, with_logprobs) -> AsyncIterator[dict]:
    for index in range(len(submitted)):
        yield {
            **head,
            "choices": [{"index": index, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}],
        }
    async for index, delta, new, final in _deltas(submitted):
        choice = {
            "index": index,
            "delta": {"content": delta} if delta else {},
            "logprobs": _chat_logprobs(model, new) if with_logprobs else None,
            "finish_reason": final and final.finish_reason,
        }
        yield {**head, "choices": [choice]}


# ---- running ----------------------------------------------------------------------------------------------


class InferenceServer(uvicorn.Server):
    """uvicorn's server, whose shutdown cancels the engine's requests when the graceful period ends, before
    uvicorn would cancel the HTTP tasks: each client then gets its own "cancelled" answer. ``shutting_down``
    is set when shutdown begins."""

    def __init__(self, config: uvicorn.Config, engine: Engine, graceful_seconds: float):
        super().__init__(config)
        self.engine, self.graceful_seconds = engine, graceful_seconds
        self.shutting_down = threading.Event()

    async def shutdown(self, sockets=None) -> None:
        self.shutting_down.set()
        loop = asyncio.get_running_loop()
        timer = loop.call_later(self.graceful_seconds, self.engine.stop, True, 0)  # cancel, do not wait
        try:
            await super().shutdown(sockets)
        finally:
            timer.cancel()


def make_server(
    model: ServedModel,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    api_key: str | None = None,
    graceful_seconds: float = 30,
    log_level: str = "info",
) -> InferenceServer:
    config = uvicorn.Config(
        create_app(model, api_key=api_key),
        host=host,
        port=port,
        log_level=log_level,
        timeout_graceful_shutdown=int(graceful_seconds + LAST_RESORT_SECONDS),
    )
    return InferenceServer(config, model.engine, graceful_seconds)


@contextlib.contextmanager
def serve_on_loopback(
    model: ServedModel, api_key: str | None = None, graceful_seconds: float = 30
) -> Iterator[tuple[str, InferenceServer]]:
    """Run the server for ``model`` in this process on a free loopback port; yields (base URL, the server).
    On exit the server shuts down as on SIGTERM (running requests get ``graceful_seconds`` to finish)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = make_server(model, port=port, api_key=api_key, graceful_seconds=graceful_seconds, log_level="warning")
    thread = threading.Thread(target=server.run, name="marin-server", daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError("the inference server did not start (see the log above)")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}", server
    finally:
        server.should_exit = True
        thread.join(graceful_seconds + LAST_RESORT_SECONDS + 30)
