"""An OpenAI-compatible HTTP server over the engine: ``/v1/models``, ``/v1/completions``,
``/v1/chat/completions`` (the checkpoint's own chat template), server-sent-event streaming for both, ``/health``.

    app = create_app(ServedModel.load("local_store/export/tiny"), api_key=None)   # uvicorn.run(app, ...)

Requests become engine requests (``marin.inference.engine``); the engine steps in its own thread and hands
tokens back to the request's event loop. Errors are OpenAI's shape, ``{"error": {"message", "type", "param",
"code"}}``: 400 for malformed JSON, an unknown model, invalid parameters or a prompt plus ``max_tokens`` over
the context; 401 for a missing or wrong API key; 429 when the engine's queue is full. A client that
disconnects has its requests cancelled, which frees their slots at the engine's next step.

Prompts may be text (encoded as the exported tokenizer does with its defaults: the document-start token, then
the text with special-token strings as ordinary text) or token ids (used as given: lm-eval's
``local-completions`` sends ids), one or a list of them.
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

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from marin.inference.engine import (
    Engine,
    EngineStopped,
    InvalidRequest,
    QueueFull,
    Result,
    SamplingParams,
    TokenLogprob,
)

logger = logging.getLogger(__name__)


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


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.kind = status, message, param, kind

    def response(self) -> JSONResponse:
        body = {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": None}}
        return JSONResponse(body, status_code=self.status)


# ---- request parsing ---------------------------------------------------------------------------------


def _field(body: dict, name: str, kind, default=None, *, check=None, expected: str = ""):
    value = body.get(name, default)
    if value is None:
        return default
    kinds = (int, float) if kind is float else kind
    if isinstance(value, bool) and kind is not bool or not isinstance(value, kinds):
        raise ApiError(400, f"'{name}' must be {expected or kind.__name__}, got {json.dumps(value)[:80]}", name)
    if check is not None and not check(value):
        raise ApiError(400, f"'{name}' must be {expected}, got {json.dumps(value)[:80]}", name)
    return value


def _stops(body: dict) -> tuple[str, ...]:
    stop = body.get("stop")
    if stop is None:
        return ()
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise ApiError(400, "'stop' must be a string or a list of strings", "stop")
    return tuple(s for s in stop if s)


def _sampling(body: dict, default_max_tokens: int, logprobs: int | None, prompt_logprobs: int | None) -> dict:
    for name in ("presence_penalty", "frequency_penalty"):
        if body.get(name) not in (None, 0, 0.0):
            raise ApiError(400, f"'{name}' is not supported (only 0)", name)
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    name = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
    if max_tokens is None:
        max_tokens = default_max_tokens
    elif isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 0:
        raise ApiError(400, f"'{name}' must be an integer >= 0, got {json.dumps(max_tokens)[:80]}", name)
    stop_ids = _field(body, "stop_token_ids", list, [], expected="a list of token ids")
    if not all(isinstance(t, int) and not isinstance(t, bool) for t in stop_ids):
        raise ApiError(400, "'stop_token_ids' must be a list of token ids", "stop_token_ids")
    return dict(
        max_tokens=max_tokens,
        temperature=float(
            _field(body, "temperature", float, 1.0, check=lambda v: 0 <= v <= 2, expected="a number in [0, 2]")
        ),
        top_p=float(_field(body, "top_p", float, 1.0, check=lambda v: 0 < v <= 1, expected="a number in (0, 1]")),
        top_k=_field(body, "top_k", int, 0, check=lambda v: v >= -1, expected="an integer >= -1 (-1 or 0: off)"),
        seed=_field(body, "seed", int, None, expected="an integer"),
        stop=_stops(body),
        stop_token_ids=tuple(stop_ids),
        ignore_eos=_field(body, "ignore_eos", bool, False, expected="a boolean"),
        logprobs=logprobs,
        prompt_logprobs=prompt_logprobs,
    )


def _prompts(model: ServedModel, prompt) -> list[list[int]]:
    """OpenAI's four prompt shapes: text, a list of texts, token ids, a list of token-id lists."""

    def one(p) -> list[int]:
        if isinstance(p, str):
            return [*model.prefix, *model.encode_text(p)]
        if isinstance(p, list) and p and all(isinstance(t, int) and not isinstance(t, bool) for t in p):
            return list(p)
        raise ApiError(400, "'prompt' must be a string, a list of strings, or (lists of) token ids", "prompt")

    if isinstance(prompt, str) or (isinstance(prompt, list) and prompt and isinstance(prompt[0], int)):
        return [one(prompt)]
    if isinstance(prompt, list) and prompt:
        return [one(p) for p in prompt]
    raise ApiError(400, "'prompt' is required: a string, a list of strings, or (lists of) token ids", "prompt")


def _messages(model: ServedModel, body: dict) -> list[int]:
    if model.chat is None:
        raise ApiError(400, f"model {model.name!r} has no chat template: use /v1/completions", "messages")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "'messages' must be a non-empty list of {role, content} objects", "messages")
    clean = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ApiError(400, f"messages[{i}] must be an object with a string 'role'", f"messages[{i}].role")
        content = m.get("content")
        if isinstance(content, list):  # OpenAI's content parts: keep the text ones
            if not all(isinstance(p, dict) and p.get("type") == "text" for p in content):
                raise ApiError(400, f"messages[{i}].content: only text parts are supported", f"messages[{i}].content")
            content = "".join(str(p.get("text", "")) for p in content)
        if not isinstance(content, str):
            raise ApiError(400, f"messages[{i}].content must be a string", f"messages[{i}].content")
        clean.append({"role": m["role"], "content": content})
    try:
        return model.chat.encode_prompt(clean).tolist()
    except ValueError as error:
        raise ApiError(400, f"messages: {error}", "messages") from error


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


def _submit_all(model: ServedModel, prompts: list[list[int]], params: SamplingParams, n: int, loop):
    """Submit every (prompt, sample) pair; all or nothing (a full queue cancels the ones already in)."""
    submitted = []
    try:
        for prompt in prompts:
            for j in range(n):
                p = params if params.seed is None or j == 0 else dataclasses.replace(params, seed=params.seed + j)
                stream = _Stream(loop)
                request = model.engine.submit(prompt, p, detokenize=model.decode, on_event=stream)
                submitted.append((request, stream))
    except InvalidRequest as error:
        for request, _ in submitted:
            request.cancel()
        raise ApiError(400, str(error), error.param) from error
    except QueueFull as error:
        for request, _ in submitted:
            request.cancel()
        raise ApiError(429, f"the server is busy: {error}; retry later", None, "rate_limit_error") from error
    except EngineStopped as error:
        raise ApiError(503, str(error), None, "server_error") from error
    return submitted


async def _wait_all(submitted, http: Request) -> list[Result]:
    """Results of every request; if the client goes away first, cancel them all."""
    finished = asyncio.gather(*(stream.finished for _, stream in submitted))
    # the body has been read: the next ASGI message is the client's disconnect, if it comes
    disconnected = asyncio.ensure_future(_disconnect(http))
    try:
        await asyncio.wait([finished, disconnected], return_when=asyncio.FIRST_COMPLETED)
        if not finished.done():
            raise asyncio.CancelledError
        return [r.result() for r, _ in submitted]
    finally:
        disconnected.cancel()
        finished.cancel()  # a no-op once every result is in
        for r, _ in submitted:
            if not r.done:
                r.cancel()


async def _disconnect(http: Request) -> None:
    while (await http.receive())["type"] != "http.disconnect":
        pass


def _visible_text(text: str, stops: tuple[str, ...]) -> str:
    """The part of a streamed text that can be sent already: not a possible start of a stop string, not a
    byte sequence the tokenizer has not finished (shown as U+FFFD)."""
    hold = max((k for s in stops for k in range(1, len(s)) if text.endswith(s[:k])), default=0)
    text = text[: len(text) - hold]
    return text.rstrip("\ufffd")


# ---- responses ---------------------------------------------------------------------------------------------


def _logprobs_doc(model: ServedModel, entries: list[TokenLogprob], offset: int) -> dict:
    tokens, token_logprobs, top_logprobs, offsets = [], [], [], []
    for entry in entries:
        text = model.token_text(entry.token)
        tokens.append(text)
        token_logprobs.append(entry.logprob)
        top = {}
        for token, logprob in entry.top:
            top.setdefault(model.token_text(token), logprob)
        top_logprobs.append(top if entry.logprob is not None else None)
        offsets.append(offset)
        offset += len(text)
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


def _finish_reason(result: Result) -> str:
    return "stop" if result.finish_reason == "stop" else "length"


def create_app(model: ServedModel, api_key: str | None = None) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(_):
        yield
        model.engine.stop(cancel=True)  # after uvicorn's graceful wait: what is still running is cancelled

    app = FastAPI(title="marin inference server", lifespan=lifespan)
    app.state.model = model

    @app.exception_handler(ApiError)
    async def api_error(_, error: ApiError):
        return error.response()

    def authenticate(http: Request) -> None:
        # A check in each /v1 handler, not an HTTP middleware: Starlette's BaseHTTPMiddleware wraps
        # `receive`, and then a handler can no longer see its client disconnect.
        if api_key and not secrets.compare_digest(http.headers.get("authorization", ""), f"Bearer {api_key}"):
            raise ApiError(401, "invalid or missing API key (Authorization: Bearer ...)", None, "authentication_error")

    async def read_body(http: Request) -> dict:
        authenticate(http)
        try:
            body = json.loads(await http.body())
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise ApiError(400, f"the request body is not valid JSON: {error}", None) from error
        if not isinstance(body, dict):
            raise ApiError(400, "the request body must be a JSON object", None)
        name = body.get("model")
        if name is not None and name not in (model.name, *model.aliases):
            raise ApiError(400, f"unknown model {name!r}; this server serves {model.name!r}", "model")
        return body

    @app.get("/")
    async def index():
        return {"server": "marin.inference.server", "model": model.name, "api": "/v1", "health": "/health"}

    @app.get("/health")
    async def health():
        engine = model.engine
        return {"status": "ok", "free_slots": engine.free_slots(), "waiting": len(engine.waiting)}

    @app.get("/v1/models")
    async def models(http: Request):
        authenticate(http)
        entry = {"id": model.name, "object": "model", "created": 0, "owned_by": "marin", "max_model_len": model.seq_len}
        return {"object": "list", "data": [entry]}

    @app.post("/v1/completions")
    async def completions(http: Request):
        body = await read_body(http)
        prompts = _prompts(model, body.get("prompt"))
        echo = _field(body, "echo", bool, False, expected="a boolean")
        logprobs = _field(body, "logprobs", int, None, check=lambda v: 0 <= v <= 5, expected="an integer in 0..5")
        n = _field(body, "n", int, 1, check=lambda v: 1 <= v <= 16, expected="an integer in 1..16")
        stream = _field(body, "stream", bool, False, expected="a boolean")
        if stream and echo:
            raise ApiError(400, "'echo' is not supported with 'stream'", "echo")
        params = _sampling(body, 16, logprobs, logprobs if echo else None)
        submitted = _submit_all(model, prompts, SamplingParams(**params), n, asyncio.get_running_loop())
        rid, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())
        head = {"id": rid, "object": "text_completion", "created": created, "model": model.name}
        if stream:
            return _sse(_stream_completions(model, submitted, head, params["stop"], logprobs is not None))
        results = await _wait_all(submitted, http)
        choices = []
        for index, ((request, _), result) in enumerate(zip(submitted, results)):
            text, logprobs_doc = result.text, None
            if echo:
                prompt_text = model.decode(request.prompt)
                text = prompt_text + text
            if logprobs is not None:
                entries = (result.prompt_logprobs or []) if echo else []
                generated = (result.logprobs or [])[: len(result.tokens)]
                logprobs_doc = _logprobs_doc(model, entries + generated, 0)
            choices.append(
                {"index": index, "text": text, "logprobs": logprobs_doc, "finish_reason": _finish_reason(result)}
            )
        return {**head, "choices": choices, "usage": _usage(results)}

    @app.post("/v1/chat/completions")
    async def chat_completions(http: Request):
        body = await read_body(http)
        prompt = _messages(model, body)
        logprobs = _field(body, "logprobs", bool, False, expected="a boolean")
        top = _field(body, "top_logprobs", int, 0, check=lambda v: 0 <= v <= 5, expected="an integer in 0..5")
        n = _field(body, "n", int, 1, check=lambda v: 1 <= v <= 16, expected="an integer in 1..16")
        stream = _field(body, "stream", bool, False, expected="a boolean")
        params = _sampling(body, max(model.seq_len - len(prompt), 0), top if logprobs else None, None)
        submitted = _submit_all(model, [prompt], SamplingParams(**params), n, asyncio.get_running_loop())
        rid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        if stream:
            head = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model.name}
            return _sse(_stream_chat(model, submitted, head, params["stop"], logprobs))
        results = await _wait_all(submitted, http)
        choices = [
            {
                "index": i,
                "message": {"role": "assistant", "content": result.text},
                "logprobs": _chat_logprobs(model, result.logprobs[: len(result.tokens)]) if logprobs else None,
                "finish_reason": _finish_reason(result),
            }
            for i, result in enumerate(results)
        ]
        head = {"id": rid, "object": "chat.completion", "created": created, "model": model.name}
        return {**head, "choices": choices, "usage": _usage(results)}

    return app


def _sse(events: AsyncIterator[dict]) -> StreamingResponse:
    async def body():
        async for event in events:
            yield f"data: {json.dumps(event)}\n\n"
        yield "data: [DONE]\n\n"

    return StreamingResponse(body(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


async def _events(submitted) -> AsyncIterator[tuple[int, str, Any]]:
    """(choice index, kind, payload) from all of a request's engine requests as they arrive; cancels them
    all if the consumer stops early (the client disconnected)."""
    try:
        if len(submitted) == 1:  # the common case: read the one stream directly
            events = submitted[0][1].events
            while True:
                kind, payload = await events.get()
                yield 0, kind, payload
                if kind == "done":
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
                index, kind, payload = await merged.get()
                remaining -= kind == "done"
                yield index, kind, payload
        finally:
            for task in tasks:
                task.cancel()
    finally:
        for request, _ in submitted:
            if not request.done:
                request.cancel()


async def _deltas(model: ServedModel, submitted, stops) -> AsyncIterator[tuple[int, str, list, Result | None]]:
    """(choice index, new text, new token logprobs, final result or None) as tokens arrive."""
    sent = [""] * len(submitted)
    sent_tokens = [0] * len(submitted)
    async for index, kind, payload in _events(submitted):
        request = submitted[index][0]
        if kind == "token":
            text = _visible_text(model.decode(request.tokens[: payload + 1]), stops)
            final = None
        else:
            if isinstance(payload, BaseException):
                raise payload
            text, final = payload.text, payload
        delta = text[len(sent[index]) :] if text.startswith(sent[index]) else ""
        if kind == "token" and not delta:
            continue
        new = (
            request.token_logprobs[sent_tokens[index] : len(request.tokens)]
            if request.params.logprobs is not None
            else []
        )
        sent[index] += delta
        sent_tokens[index] = len(request.tokens)
        yield index, delta, new, final


async def _stream_completions(model, submitted, head, stops, with_logprobs) -> AsyncIterator[dict]:
    async for index, delta, new, final in _deltas(model, submitted, stops):
        choice = {
            "index": index,
            "text": delta,
            "logprobs": _logprobs_doc(model, new, 0) if with_logprobs else None,
            "finish_reason": None if final is None else _finish_reason(final),
        }
        yield {**head, "choices": [choice]}


async def _stream_chat(model, submitted, head, stops, with_logprobs) -> AsyncIterator[dict]:
    for index in range(len(submitted)):
        yield {
            **head,
            "choices": [{"index": index, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}],
        }
    async for index, delta, new, final in _deltas(model, submitted, stops):
        choice = {
            "index": index,
            "delta": {"content": delta} if delta else {},
            "logprobs": _chat_logprobs(model, new) if with_logprobs else None,
            "finish_reason": None if final is None else _finish_reason(final),
        }
        yield {**head, "choices": [choice]}


@contextlib.contextmanager
def serve_on_loopback(model: ServedModel, api_key: str | None = None) -> Iterator[tuple[str, Any]]:
    """Run the server for ``model`` in this process on a free loopback port; yields (base URL, the
    ``uvicorn.Server``). On exit the server shuts down as on SIGTERM (running requests finish first)."""
    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = uvicorn.Config(create_app(model, api_key=api_key), host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
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
        thread.join(60)
