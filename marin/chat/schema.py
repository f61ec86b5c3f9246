"""One conversation schema for the common chat data shapes.

    normalize_record({"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]})
    -> [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]

Accepted shapes (the first key present decides):

- ``messages``: OpenAI style, a list of ``{"role", "content"}`` with roles system/user/assistant;
- ``conversations``: ShareGPT style, a list of ``{"from", "value"}`` (human/user, gpt/assistant/model,
  system);
- ``instruction`` (+ optional ``input``) and ``output`` (or ``response``): Alpaca style, one user turn
  (instruction and input separated by a blank line) and one assistant turn;
- ``prompt``: an OpenAssistant message tree (oasst1/oasst2 ``*.trees.jsonl`` exports): ``{"text", "role":
  "prompter", "replies": [...]}``, each reply ``{"text", "role": "prompter"|"assistant", "rank", "replies"}``.
  The conversation is the tree's best path, as OpenAssistant's own ``top1`` sets are made: from each
  message the reply of lowest ``rank`` (unranked replies after ranked ones, in order; deleted or
  review-rejected ones skipped), down to a leaf, cut after its last assistant turn;

each optionally with a top-level ``system`` prompt. A valid conversation has at most one system message,
first; then user and assistant alternate starting with user; it ends with an assistant turn, and every
content is a non-empty string. ``normalize_record`` raises with the reason a record is malformed, naming
the record's own field (``conversations[3].value: empty`` for a ShareGPT row, ``output`` for an Alpaca row,
``messages[2].role`` for OpenAI style, ``system`` for a top-level system prompt); the reader prefixes file
and line.
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
SHAPES = ("messages", "conversations", "instruction", "prompt")
OASST_ROLES = {"prompter": "user", "assistant": "assistant"}


class MalformedConversation(ValueError):
    """A record that is not a valid conversation; the message names the field."""


Origin = tuple[str, str]
"""Where a normalized message came from in the record: (its role's field, its content's field)."""


def normalize_record(record: dict[str, Any]) -> list[dict[str, str]]:
    """The record's conversation as ``[{"role", "content"}, ...]``; ``MalformedConversation`` otherwise."""
    if "messages" in record:
        messages, origins = _turns(record, "messages", "role", "content", {r: r for r in ROLES})
    elif "conversations" in record:
        messages, origins = _turns(record, "conversations", "from", "value", SHAREGPT_ROLES)
    elif "instruction" in record:
        messages, origins = _alpaca(record)
    elif "prompt" in record:
        messages, origins = _oasst_best_path(record)
    else:
        raise MalformedConversation(f"no conversation: expected one of the fields {list(SHAPES)}")
    system = record.get("system")
    if system is not None and system != "":
        if not isinstance(system, str):
            raise MalformedConversation(f"system: expected a string, got {type(system).__name__}")
        if messages and messages[0]["role"] == "system":
            raise MalformedConversation("system: given both as a field and as the first message")
        messages.insert(0, {"role": "system", "content": system})
        origins.insert(0, ("system", "system"))
    check_conversation(messages, origins)
    return messages


def _turns(
    record: dict, field: str, role_key: str, content_key: str, roles: dict[str, str]
) -> tuple[list[dict[str, str]], list[Origin]]:
    turns = record[field]
    if not isinstance(turns, list):
        raise MalformedConversation(f"{field}: expected a list of turns, got {type(turns).__name__}")
    out, origins = [], []
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
        origins.append((f"{where}.{role_key}", f"{where}.{content_key}"))
    return out, origins


def _alpaca(record: dict) -> tuple[list[dict[str, str]], list[Origin]]:
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
    answer_field = "output" if fields["output"] else "response"
    messages = [{"role": "user", "content": prompt}, {"role": "assistant", "content": answer}]
    return messages, [("instruction", "instruction"), (answer_field, answer_field)]


def _oasst_best_path(record: dict) -> tuple[list[dict[str, str]], list[Origin]]:
    """The best-ranked path of an OpenAssistant message tree (see the module docstring)."""
    node, where = record["prompt"], "prompt"
    if isinstance(node, str):
        raise MalformedConversation(
            "prompt: a string (a prompt/completion row?); expected an OpenAssistant message tree "
            "{text, role, replies}, or one of the fields ['messages', 'conversations', 'instruction']"
        )
    out, origins = [], []
    while True:
        if not isinstance(node, dict):
            raise MalformedConversation(f"{where}: expected a message object, got {type(node).__name__}")
        role, text = node.get("role"), node.get("text")
        if role not in OASST_ROLES:
            raise MalformedConversation(f"{where}.role: expected one of {sorted(OASST_ROLES)}, got {role!r}")
        if not isinstance(text, str):
            raise MalformedConversation(f"{where}.text: expected a string, got {type(text).__name__}")
        out.append({"role": OASST_ROLES[role], "content": text})
        origins.append((f"{where}.role", f"{where}.text"))
        replies = node.get("replies") or []
        if not isinstance(replies, list):
            raise MalformedConversation(f"{where}.replies: expected a list, got {type(replies).__name__}")
        usable = [
            (i, r)
            for i, r in enumerate(replies)
            if not (isinstance(r, dict) and (r.get("deleted") or r.get("review_result") is False))
        ]
        if not usable:
            break
        i, node = min(usable, key=lambda item: _oasst_rank(item[1], item[0]))
        where = f"{where}.replies[{i}]"
    while out and out[-1]["role"] == "user" and len(out) > 1:  # a leaf question nobody answered
        out.pop(), origins.pop()
    return out, origins


def _oasst_rank(reply, index: int) -> tuple[int, float, int]:
    rank = reply.get("rank") if isinstance(reply, dict) else None
    return (0, rank, index) if isinstance(rank, (int, float)) else (1, 0.0, index)


def check_conversation(messages: list[dict[str, str]], origins: list[Origin] | None = None) -> None:
    """Raise ``MalformedConversation`` unless: optional system first, then user/assistant alternating
    from user, ending with assistant, no empty content. Errors name ``origins[i]``'s fields (the record's
    own), by default ``messages[i].role`` / ``messages[i].content``."""
    if not messages:
        raise MalformedConversation("messages: empty conversation")
    if origins is None:
        origins = [(f"messages[{i}].role", f"messages[{i}].content") for i in range(len(messages))]
    body = messages[1:] if messages[0]["role"] == "system" else messages
    if not body:
        raise MalformedConversation(f"{origins[0][0]}: only a system prompt, no turns")
    for (_, content_field), message in zip(origins, messages):
        if not message["content"].strip():
            raise MalformedConversation(f"{content_field}: empty")
    offset = len(messages) - len(body)
    for i, message in enumerate(body):
        expected = "user" if i % 2 == 0 else "assistant"
        if message["role"] != expected:
            raise MalformedConversation(
                f"{origins[i + offset][0]}: expected {expected!r} (system first, then "
                f"user and assistant alternating), got {message['role']!r}"
            )
    if body[-1]["role"] != "assistant":
        raise MalformedConversation(f"{origins[-1][0]}: the conversation must end with an assistant turn")
