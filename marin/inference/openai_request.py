"""OpenAI request bodies into engine requests, every field checked at the edge.

    body = parse_body(raw_bytes)                        # 400 for malformed JSON (any depth, any encoding)
    prompts = completion_prompts(model, body["prompt"])  # the four prompt shapes, as token ids
    params = sampling_params(body, default_max_tokens=16, logprobs=..., prompt_logprobs=...)

What a request may ask for is decided by ``SamplingParams`` (the one sampling-parameter type): this module
maps the wire's names and shapes onto it and turns its ``InvalidRequest`` into a 400 naming the field. The
engine's own limits (the context, the vocabulary) are checked by ``Engine.check`` before anything is queued.
A field the server does not implement (``best_of`` > 1, ``suffix``, ``logit_bias``, penalties, tools) is
refused with a 400 naming it rather than silently ignored; its neutral value (``best_of: 1``,
``logit_bias: {}``, ...) is accepted.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi.responses import JSONResponse

from marin.inference.sampling_params import InvalidRequest, SamplingParams


class ApiError(Exception):
    """An answer in OpenAI's error shape: ``{"error": {"message", "type", "param", "code"}}``."""

    def __init__(self, status: int, message: str, param: str | None = None, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.kind = status, message, param, kind

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": None}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status)


# Fields not implemented, and the JSON of the values that ask for nothing (accepted).
UNSUPPORTED = {
    "completions": {
        "best_of": ("null", "1"),
        "suffix": ("null", '""'),
        "logit_bias": ("null", "{}"),
        "presence_penalty": ("null", "0", "0.0"),
        "frequency_penalty": ("null", "0", "0.0"),
    },
    "chat": {
        "logit_bias": ("null", "{}"),
        "presence_penalty": ("null", "0", "0.0"),
        "frequency_penalty": ("null", "0", "0.0"),
        "tools": ("null", "[]"),
        "tool_choice": ("null", '"none"'),
        "functions": ("null", "[]"),
        "function_call": ("null", '"none"'),
        "response_format": ("null", '{"type": "text"}'),
    },
}


def parse_body(raw: bytes) -> dict:
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ApiError(400, f"the request body is not valid JSON: {error}") from error
    except RecursionError as error:
        raise ApiError(400, "the request body is nested too deeply") from error
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    return body


def refuse_unsupported(body: dict, endpoint: str) -> None:
    for name, neutral in UNSUPPORTED[endpoint].items():
        if json.dumps(body.get(name)) not in neutral:
            raise ApiError(400, f"'{name}' is not supported by this server (only {' or '.join(neutral)})", name)


def field(body: dict, name: str, kind, default=None, *, check=None, expected: str = ""):
    """``body[name]`` if it is a ``kind`` (and passes ``check``), ``default`` if absent or null; else 400."""
    value = body.get(name, default)
    if value is None:
        return default
    kinds = (int, float) if kind is float else kind
    if isinstance(value, bool) and kind is not bool or not isinstance(value, kinds):
        raise ApiError(400, f"'{name}' must be {expected or kind.__name__}, got {_show(value)}", name)
    if check is not None and not check(value):
        raise ApiError(400, f"'{name}' must be {expected}, got {_show(value)}", name)
    return value


def _show(value) -> str:
    return json.dumps(value)[:80]


def sampling_params(
    body: dict, default_max_tokens: int, logprobs: int | None, prompt_logprobs: int | None
) -> SamplingParams:
    """The request's ``SamplingParams``: OpenAI's names (``max_tokens`` or ``max_completion_tokens``, ``stop``
    as a string or a list) and vLLM's extensions (``top_k``, ``ignore_eos``, ``stop_token_ids``)."""
    max_name = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    wire = {
        "max_tokens": body.get(max_name),
        "temperature": body.get("temperature"),
        "top_p": body.get("top_p"),
        "top_k": body.get("top_k"),
        "seed": body.get("seed"),
        "stop": body.get("stop"),
        "stop_token_ids": body.get("stop_token_ids"),
        "ignore_eos": body.get("ignore_eos"),
    }
    fields = {name: value for name, value in wire.items() if value is not None}
    fields.setdefault("max_tokens", default_max_tokens)
    try:
        return SamplingParams(**fields, logprobs=logprobs, prompt_logprobs=prompt_logprobs)
    except InvalidRequest as error:
        param = max_name if error.param == "max_tokens" else error.param
        raise ApiError(400, str(error), param) from error


def _text(value: str, param: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ApiError(400, f"'{param}' must be valid Unicode text: {error}", param) from error
    return value


def completion_prompts(model, prompt: Any) -> list[list[int]]:
    """OpenAI's four prompt shapes as token ids: text (encoded as the exported tokenizer does: ``model.prefix``
    then the text), a list of texts, token ids (used as given), a list of token-id lists."""

    def one(p) -> list[int]:
        if isinstance(p, str):
            return [*model.prefix, *model.encode_text(_text(p, "prompt"))]
        if isinstance(p, list) and p and all(isinstance(t, int) and not isinstance(t, bool) for t in p):
            return list(p)
        raise ApiError(400, "'prompt' must be a string, a list of strings, or (lists of) token ids", "prompt")

    if isinstance(prompt, str) or (isinstance(prompt, list) and prompt and isinstance(prompt[0], int)):
        return [one(prompt)]
    if isinstance(prompt, list) and prompt:
        return [one(p) for p in prompt]
    raise ApiError(400, "'prompt' is required: a string, a list of strings, or (lists of) token ids", "prompt")


def chat_prompt(model, body: dict) -> list[int]:
    """The conversation in ``messages`` rendered by the checkpoint's chat template, as token ids."""
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
        role = _text(m["role"], f"messages[{i}].role")
        clean.append({"role": role, "content": _text(content, f"messages[{i}].content")})
    try:
        return model.chat.encode_prompt(clean).tolist()
    except ValueError as error:
        raise ApiError(400, f"messages: {error}", "messages") from error
