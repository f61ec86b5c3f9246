"""One conversation schema for the common chat data shapes.

    normalize_record({"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]})
    -> [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]

Accepted shapes (the first key present decides):

- ``messages``: OpenAI style, a list of ``{"role", "content"}`` with roles system/user/assistant;
- ``conversations``: ShareGPT style, a list of ``{"from", "value"}`` (human/user, gpt/assistant/model,
  system);
- ``instruction`` (+ optional ``input``) and ``output`` (or ``response``): Alpaca style, one user turn
  (instruction and input separated by a blank line) and one assistant turn;

each optionally with a top-level ``system`` prompt. A valid conversation has at most one system message,
first; then user and assistant alternate starting with user; it ends with an assistant turn, and every
content is a non-empty string. ``normalize_record`` returns the reason a record is malformed as a string
naming the field (``messages[2].role: expected one of ...``); the reader prefixes file and line.
"""

from __future__ import annotations

from typing import Any

ROLES = ("system", "user", "assistant")
SHAREGPT_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "model": "assistant",
    "chatgpt": "assistant",
    "bing": "assistant",
    "system": "system",
}
SHAPES = ("messages", "conversations", "instruction")


class MalformedConversation(ValueError):
    """A record that is not a valid conversation; the message names the field."""


def normalize_record(record: dict[str, Any]) -> list[dict[str, str]]:
    """The record's conversation as ``[{"role", "content"}, ...]``; ``MalformedConversation`` otherwise."""
    if "messages" in record:
        messages = _turns(record, "messages", "role", "content", {r: r for r in ROLES})
    elif "conversations" in record:
        messages = _turns(record, "conversations", "from", "value", SHAREGPT_ROLES)
    elif "instruction" in record:
        messages = _alpaca(record)
    else:
        raise MalformedConversation(f"no conversation: expected one of the fields {list(SHAPES)}")
    system = record.get("system")
    if system is not None and system != "":
        if not isinstance(system, str):
            raise MalformedConversation(f"system: expected a string, got {type(system).__name__}")
        if messages and messages[0]["role"] == "system":
            raise MalformedConversation("system: given both as a field and as the first message")
        messages.insert(0, {"role": "system", "content": system})
    check_conversation(messages)
    return messages


def _turns(record: dict, field: str, role_key: str, content_key: str, roles: dict[str, str]) -> list[dict[str, str]]:
    turns = record[field]
    if not isinstance(turns, list):
        raise MalformedConversation(f"{field}: expected a list of turns, got {type(turns).__name__}")
    out = []
    for i, turn in enumerate(turns):
        where = f"{field}[{i}]"
        if not isinstance(turn, dict):
            raise MalformedConversation(f"{where}: expected an object, got {type(turn).__name__}")
        role = turn.get(role_key)
        if role not in roles:
            raise MalformedConversation(f"{where}.{role_key}: expected one of {sorted(roles)}, got {role!r}")
        content = turn.get(content_key)
        if not isinstance(content, str):
            raise MalformedConversation(f"{where}.{content_key}: expected a string, got {type(content).__name__}")
        out.append({"role": roles[role], "content": content})
    return out


def _alpaca(record: dict) -> list[dict[str, str]]:
    fields = {}
    for key in ("instruction", "input", "output", "response"):
        value = record.get(key)
        if value is not None and not isinstance(value, str):
            raise MalformedConversation(f"{key}: expected a string, got {type(value).__name__}")
        fields[key] = value or ""
    answer = fields["output"] or fields["response"]
    if not answer.strip():
        raise MalformedConversation("output: expected a non-empty answer ('output' or 'response')")
    prompt = fields["instruction"] + ("\n\n" + fields["input"] if fields["input"].strip() else "")
    return [{"role": "user", "content": prompt}, {"role": "assistant", "content": answer}]


def check_conversation(messages: list[dict[str, str]]) -> None:
    """Raise ``MalformedConversation`` unless: optional system first, then user/assistant alternating
    from user, ending with assistant, no empty content."""
    if not messages:
        raise MalformedConversation("messages: empty conversation")
    body = messages[1:] if messages[0]["role"] == "system" else messages
    if not body:
        raise MalformedConversation("messages: only a system prompt, no turns")
    for i, message in enumerate(messages):
        if not message["content"].strip():
            raise MalformedConversation(f"messages[{i}].content: empty")
    offset = len(messages) - len(body)
    for i, message in enumerate(body):
        expected = "user" if i % 2 == 0 else "assistant"
        if message["role"] != expected:
            raise MalformedConversation(
                f"messages[{i + offset}].role: expected {expected!r} (system first, then "
                f"user and assistant alternating), got {message['role']!r}"
            )
    if body[-1]["role"] != "assistant":
        raise MalformedConversation(f"messages[{len(messages) - 1}]: the conversation must end with an assistant turn")
