"""One schema for preference pairs, from the shapes public preference data ships in.

    normalize_preference({"prompt": "What is 2 + 2?", "chosen": "4", "rejected": "5"})
    -> [{"prompt": [{"role": "user", "content": "What is 2 + 2?"}],
         "chosen": [{"role": "assistant", "content": "4"}],
         "rejected": [{"role": "assistant", "content": "5"}]}]

The schema is TRL's conversational preference format: ``prompt`` is a conversation (optional system message,
then user and assistant alternating from user, ending with user), ``chosen`` and ``rejected`` one assistant
message each; ``score_chosen``/``score_rejected`` are kept when a row carries them. A row gives a list of
pairs (an OpenAssistant tree gives many). Accepted shapes (the first that applies decides):

- ``prompt`` as an object: an OpenAssistant message tree (oasst1/oasst2 ``*.trees.jsonl``): every two sibling
  assistant replies whose ``rank`` differs give a pair (the lower rank is chosen), the prompt being the path
  from the root to their parent; deleted and review-rejected messages are left out, with their subtrees;
- ``output_1``/``output_2``/``preference``: AlpacaFarm's and AlpacaEval's pairwise annotations (``instruction``
  and optional ``input`` as the prompt, as in Alpaca rows); ``preference`` 1 or 2 names the better output (a
  weighted annotation in [1, 2] counts for the nearer side); 0 or 1.5 is a tie, not a pair;
- ``chosen`` as a string with no ``prompt``: an Anthropic HH-RLHF transcript (``"\\n\\nHuman: ...\\n\\nAssistant:
  ..."``); ``chosen`` and ``rejected`` must share everything before their last assistant turn;
- ``chosen``/``rejected`` otherwise: explicit pairs, each side a string (the reply) or a message list. Lists
  may repeat the prompt (UltraFeedback-binarized: ``chosen = [user, assistant]``): the messages both sides
  share are the prompt, and each must then hold one assistant reply; a ``prompt`` field (string or messages)
  gives the prompt otherwise, and must agree with the shared messages when both exist.

A malformed row raises ``MalformedPreference`` naming the row's own field (``chosen[1].content: empty``,
``rejected: identical to chosen``, ``prompt.replies[2].text: expected a string``, ``preference: a tie``).
"""

from __future__ import annotations

import itertools
import re
from typing import Any

from marin.chat.schema import OASST_ROLES, ROLES, MalformedConversation, Origin, _turns, check_conversation

Message = dict[str, str]
Pair = dict[str, Any]
SHAPES = ("chosen/rejected", "output_1/output_2/preference", "prompt (an OpenAssistant message tree)")
_HH_TURN = re.compile(r"(?:^|\n\n)(Human|Assistant):[ \t]?")
_HH_ROLES = {"Human": "user", "Assistant": "assistant"}


class MalformedPreference(MalformedConversation):
    """A row that gives no valid preference pair; the message names the row's field."""


def normalize_preference(record: dict[str, Any]) -> list[Pair]:
    """The row's pairs in the schema above; ``MalformedPreference`` naming a field otherwise."""
    try:
        if isinstance(record.get("prompt"), dict):
            return _oasst_pairs(record["prompt"])
        if "output_1" in record or "output_2" in record:
            return [_pairwise(record)]
        if "chosen" in record or "rejected" in record:
            if isinstance(record.get("chosen"), str) and "prompt" not in record:
                return [_transcripts(record)]
            return [_explicit(record)]
    except MalformedPreference:
        raise
    except MalformedConversation as e:  # schema checks of the shared conversation code
        raise MalformedPreference(str(e)) from None
    raise MalformedPreference(f"no preference pair: expected the fields {list(SHAPES)}")


def _pair(prompt, prompt_origins, chosen: Message, rejected: Message, origins: tuple[Origin, Origin]) -> Pair:
    """A checked pair: each side with the prompt is a valid conversation, and the two replies differ."""
    for reply, origin in zip((chosen, rejected), origins):
        check_conversation([*prompt, reply], [*prompt_origins, origin])
    if chosen["content"].strip() == rejected["content"].strip():
        raise MalformedPreference(f"{origins[1][1]}: identical to chosen")
    return {"prompt": prompt, "chosen": [chosen], "rejected": [rejected]}


def _side(record: dict, field: str) -> tuple[list[Message], list[Origin]]:
    value = record.get(field)
    if isinstance(value, str):
        return [{"role": "assistant", "content": value}], [(field, field)]
    if isinstance(value, list):
        return _turns(record, field, "role", "content", {r: r for r in ROLES})
    raise MalformedPreference(f"{field}: expected a string or a list of messages, got {type(value).__name__}")


def _explicit(record: dict) -> Pair:
    (chosen, c_origins), (rejected, r_origins) = _side(record, "chosen"), _side(record, "rejected")
    if chosen == rejected:
        raise MalformedPreference("rejected: identical to chosen")
    shared = 0
    while shared < min(len(chosen), len(rejected)) and chosen[shared] == rejected[shared]:
        shared += 1
    prompt, prompt_origins = chosen[:shared], c_origins[:shared]
    if "prompt" in record:
        given, given_origins = _prompt_field(record["prompt"], record)
        if shared and not _same_prompt(given, prompt):
            raise MalformedPreference("prompt: differs from the conversation that chosen and rejected share")
        if not shared:
            prompt, prompt_origins = given, given_origins
    for side, origins, field in ((chosen, c_origins, "chosen"), (rejected, r_origins, "rejected")):
        if len(side) == shared:
            raise MalformedPreference(f"{field}: identical to {'rejected' if field == 'chosen' else 'chosen'}")
        if len(side) != shared + 1:
            raise MalformedPreference(
                f"{origins[shared + 1][0].rsplit('.', 1)[0]}: expected one assistant reply after the shared "
                f"conversation, got {len(side) - shared} messages"
            )
    if not prompt:
        raise MalformedPreference("prompt: missing (no prompt field and nothing shared by chosen and rejected)")
    pair = _pair(prompt, prompt_origins, chosen[shared], rejected[shared], (c_origins[shared], r_origins[shared]))
    for key in ("score_chosen", "score_rejected"):
        if isinstance(record.get(key), (int, float)) and not isinstance(record.get(key), bool):
            pair[key] = float(record[key])
    return pair


def _prompt_field(value, record: dict) -> tuple[list[Message], list[Origin]]:
    if isinstance(value, str):
        return [{"role": "user", "content": value}], [("prompt", "prompt")]
    if isinstance(value, list):
        return _turns(record, "prompt", "role", "content", {r: r for r in ROLES})
    raise MalformedPreference(f"prompt: expected a string or a list of messages, got {type(value).__name__}")


def _same_prompt(given: list[Message], shared: list[Message]) -> bool:
    """A string prompt matches a shared conversation whose last user turn it is (UltraFeedback's rows)."""
    if len(given) == 1 and given[0]["role"] == "user" and len(shared) > 1:
        shared = shared[-1:]
    return [(m["role"], m["content"].strip()) for m in given] == [(m["role"], m["content"].strip()) for m in shared]


def _pairwise(record: dict) -> Pair:
    """AlpacaFarm/AlpacaEval: ``instruction`` (+ ``input``), ``output_1``, ``output_2``, ``preference``."""
    for key in ("instruction", "output_1", "output_2"):
        if not isinstance(record.get(key), str):
            raise MalformedPreference(f"{key}: expected a string, got {type(record.get(key)).__name__}")
    extra = record.get("input")
    if extra is not None and not isinstance(extra, str):
        raise MalformedPreference(f"input: expected a string, got {type(extra).__name__}")
    preference = record.get("preference")
    if isinstance(preference, bool) or not isinstance(preference, (int, float)):
        raise MalformedPreference(f"preference: expected 1 or 2 (the better output), got {preference!r}")
    if preference == 0 or preference == 1.5:
        raise MalformedPreference(f"preference: a tie ({preference}), not a pair")
    if not 1 <= preference <= 2:
        raise MalformedPreference(f"preference: expected a value in [1, 2], got {preference}")
    better, worse = ("output_1", "output_2") if preference < 1.5 else ("output_2", "output_1")
    prompt = record["instruction"] + ("\n\n" + extra if extra and extra.strip() else "")
    chosen = {"role": "assistant", "content": record[better]}
    rejected = {"role": "assistant", "content": record[worse]}
    return _pair(
        [{"role": "user", "content": prompt}],
        [("instruction", "instruction")],
        chosen,
        rejected,
        ((better,) * 2, (worse,) * 2),
    )


def _transcript(text: str, field: str) -> list[Message]:
    """An HH-RLHF transcript as messages."""
    marks = list(_HH_TURN.finditer(text))
    if not marks or text[: marks[0].start()].strip():
        raise MalformedPreference(f"{field}: expected a transcript of '\\n\\nHuman: ' and '\\n\\nAssistant: ' turns")
    ends = [m.start() for m in marks[1:]] + [len(text)]
    return [{"role": _HH_ROLES[m.group(1)], "content": text[m.end() : end].strip()} for m, end in zip(marks, ends)]


def _transcripts(record: dict) -> Pair:
    if not isinstance(record.get("rejected"), str):
        raise MalformedPreference(
            f"rejected: expected a transcript string, got {type(record.get('rejected')).__name__}"
        )
    chosen, rejected = _transcript(record["chosen"], "chosen"), _transcript(record["rejected"], "rejected")
    if chosen[:-1] != rejected[:-1]:
        raise MalformedPreference("rejected: its conversation before the last reply differs from chosen's")
    for side, field in ((chosen, "chosen"), (rejected, "rejected")):
        if side[-1]["role"] != "assistant":
            raise MalformedPreference(f"{field}: the transcript must end with an Assistant turn")
        if not side[-1]["content"]:
            raise MalformedPreference(f"{field}: the last Assistant turn is empty")
    origins = [("chosen", "chosen")] * (len(chosen) - 1)
    return _pair(chosen[:-1], origins, chosen[-1], rejected[-1], (("chosen",) * 2, ("rejected",) * 2))


def _oasst_pairs(root: dict) -> list[Pair]:
    """Every pair of differently ranked sibling assistant replies of an OpenAssistant tree, depth first."""
    pairs: list[Pair] = []
    stack = [(root, "prompt", [], [])]
    while stack:
        node, where, path, origins = stack.pop()
        role, text = node.get("role"), node.get("text")
        if role not in OASST_ROLES:
            raise MalformedPreference(f"{where}.role: expected one of {sorted(OASST_ROLES)}, got {role!r}")
        if not isinstance(text, str):
            raise MalformedPreference(f"{where}.text: expected a string, got {type(text).__name__}")
        path = [*path, {"role": OASST_ROLES[role], "content": text}]
        origins = [*origins, (f"{where}.role", f"{where}.text")]
        replies = node.get("replies") or []
        if not isinstance(replies, list):
            raise MalformedPreference(f"{where}.replies: expected a list, got {type(replies).__name__}")
        usable = []
        for i, reply in enumerate(replies):
            if not isinstance(reply, dict):
                raise MalformedPreference(
                    f"{where}.replies[{i}]: expected a message object, got {type(reply).__name__}"
                )
            if not (reply.get("deleted") or reply.get("review_result") is False):
                usable.append((i, reply))
        if role == "prompter":
            pairs += _ranked_siblings(usable, where, path, origins)
        stack += [(r, f"{where}.replies[{i}]", path, origins) for i, r in reversed(usable)]
    return pairs


def _ranked_siblings(replies: list[tuple[int, dict]], where: str, path, origins) -> list[Pair]:
    ranked = [
        (i, r)
        for i, r in replies
        if r.get("role") == "assistant" and isinstance(r.get("rank"), (int, float)) and isinstance(r.get("text"), str)
    ]
    pairs = []
    for (i, a), (j, b) in itertools.combinations(ranked, 2):
        if a["rank"] == b["rank"]:
            continue
        (ci, chosen), (ri, rejected) = ((i, a), (j, b)) if a["rank"] < b["rank"] else ((j, b), (i, a))
        sides = [{"role": "assistant", "content": m["text"]} for m in (chosen, rejected)]
        fields = [(f"{where}.replies[{k}].role", f"{where}.replies[{k}].text") for k in (ci, ri)]
        pairs.append(_pair(path, origins, sides[0], sides[1], (fields[0], fields[1])))
    return pairs
