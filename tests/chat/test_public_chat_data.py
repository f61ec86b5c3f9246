"""The chat normalizer and template on public chat data in each supported shape (rows nobody here wrote):
every row is normalized or named as malformed, and every normalized conversation renders with a mask
that covers exactly its assistant replies and a prompt that is the prefix training saw
(``tests/data/public_chat/README.md`` gives sources and licenses)."""

import json
from pathlib import Path

import numpy as np
import pytest

from marin.chat import ChatDataConfig, normalize_chat
from marin.storage.records import read_records

DATA = Path(__file__).resolve().parents[1] / "data" / "public_chat"
FILES = {
    "sharegpt": "fastchat_dummy_conversation_300.json",
    "alpaca": "alpaca_data_cleaned_300.json",
    "oasst": "oasst_en_100_trees.jsonl",
}
ROWS = {"sharegpt": 300, "alpaca": 300, "oasst": 100}


def source_rows(shape: str) -> list[dict]:
    """The file's rows as its source ships them: a JSON array, or JSON lines."""
    text = (DATA / FILES[shape]).read_text()
    return json.loads(text) if FILES[shape].endswith(".json") else [json.loads(line) for line in text.splitlines()]


@pytest.fixture(scope="module")
def normalized(tmp_path_factory) -> dict[str, tuple[list[dict], dict]]:
    """Per shape: the normalized conversations (train and validation) and the step's summary."""
    out = {}
    for shape, name in FILES.items():
        root = tmp_path_factory.mktemp(shape)
        normalize_chat(ChatDataConfig(input_paths=[str(DATA / name)], output_path=str(root), on_error="skip"))
        files = [f for split in ("train", "validation") for f in sorted((root / split).glob("*"))]
        rows = [r for f in files for r in read_records(str(f))]
        out[shape] = rows, json.loads((root / "summary.json").read_text())
    return out


@pytest.mark.parametrize("shape", FILES)
def test_every_public_row_is_normalized_or_named(normalized, shape):
    rows, summary = normalized[shape]
    source = source_rows(shape)
    assert len(rows) + sum(summary["skip_reasons"].values()) == len(source) == ROWS[shape]
    assert len(rows) >= 0.98 * ROWS[shape], summary["skip_reasons"]  # real data: a handful malformed, each named
    for reason in summary["skip_reasons"]:
        field = reason.split("[", 1)[0].split(".", 1)[0].split(":", 1)[0]
        assert field in ("conversations", "instruction", "output", "system", "prompt"), reason
    messages = [m for r in rows for m in r["messages"]]
    assert all(m["role"] in ("system", "user", "assistant") and m["content"].strip() for m in messages)


def test_an_openassistant_tree_becomes_its_best_ranked_path(normalized):
    """Each tree's conversation follows the rank-0 reply from every message (OpenAssistant's top1 rule), so
    a multi-turn tree gives a multi-turn conversation, and never a reply that was ranked lower."""
    rows, _ = normalized["oasst"]
    by_prompt = {r["messages"][0]["content"]: r["messages"] for r in rows}
    multi_turn = 0
    for tree in source_rows("oasst"):
        messages = by_prompt.get(tree["prompt"]["text"])
        if messages is None:
            continue
        node = tree["prompt"]
        for message in messages[1:]:
            ranked = [r for r in node["replies"] if not r.get("deleted") and r.get("review_result") is not False]
            node = min(ranked, key=lambda r: (r.get("rank") is None, r.get("rank") or 0))
            assert message["content"] == node["text"]
        multi_turn += len(messages) > 2
    assert multi_turn >= 20  # real trees go several turns deep


@pytest.mark.parametrize("shape", FILES)
@pytest.mark.parametrize("which", ["reserved_chat", "added_chat"])
def test_public_conversations_render_with_exact_masks_and_prefix_prompts(request, normalized, shape, which):
    chat = request.getfixturevalue(which)
    rows, _ = normalized[shape]
    conversations = [r["messages"] for r in rows]
    for conversation, (ids, mask) in zip(conversations, chat.encode_batch(conversations)):
        trained = chat.tokenizer.decode(ids[mask].tolist(), skip_special_tokens=False)
        replies = [m["content"].strip() + "<|eot_id|>" for m in conversation if m["role"] == "assistant"]
        assert trained == "".join(replies)
        assert int(np.sum(ids == chat.eot_id)) == len(conversation)
        last = max(i for i, m in enumerate(conversation) if m["role"] == "assistant")
        prompt = chat.encode_prompt(conversation[:last])
        assert ids[: len(prompt)].tolist() == prompt.tolist() and mask[len(prompt)]
