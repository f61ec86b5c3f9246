"""SFT caches in the browser: conversations with the trained (assistant) tokens marked; roots enforced."""

import json
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from data_browser.app import create_app
from data_browser.config import BrowserConfig
from marin.chat import CHAT_SPECIAL_TOKENS, SftTokenizeConfig, tokenize_chat
from tests.chat.conftest import CONVERSATIONS, train_bpe


@pytest.fixture(scope="module")
def sft_lab(tmp_path_factory):
    root = tmp_path_factory.mktemp("sftlab")
    train_bpe(("<|endoftext|>", "<|pad|>", *CHAT_SPECIAL_TOKENS)).save(str(root / "tokenizer.json"))
    (root / "chat.jsonl").write_text("".join(json.dumps({"messages": c}) + "\n" for c in CONVERSATIONS))
    tokenize_chat(
        SftTokenizeConfig(
            train_paths=[str(root / "chat.jsonl")],
            tokenizer=str(root / "tokenizer.json"),
            output_path=str(root / "sft"),
        )
    )
    client = TestClient(create_app(BrowserConfig(roots=[str(root / "sft")], records_per_page=2)))
    return root, client


def get(client, route, **params):
    return client.get(f"{route}?" + "&".join(f"{k}={quote(str(v), safe='')}" for k, v in params.items()))


def test_listing_links_an_sft_cache_to_its_conversations(sft_lab):
    root, client = sft_lab
    assert 'id="sft-link"' in get(client, "/browse", path=root / "sft" / "train").text
    assert 'id="sft-link"' not in get(client, "/browse", path=root / "sft").text


def test_trained_spans_are_exactly_the_assistant_turns(sft_lab):
    root, client = sft_lab
    seen = []
    for offset in (0, 2):
        data = get(client, "/api/sft", path=root / "sft" / "train", offset=offset).json()
        assert data["total"] == len(CONVERSATIONS)
        seen += data["conversations"]
    for conversation, shown in zip(CONVERSATIONS, seen):
        trained = [s["text"] for s in shown["spans"] if s["trained"]]
        assert trained == [m["content"].strip() + "<|eot_id|>" for m in conversation if m["role"] == "assistant"]
        text = "".join(s["text"] for s in shown["spans"])
        assert text.startswith("<|begin_of_text|><|start_header_id|>") and text.endswith("<|endoftext|>")
    page = get(client, "/sft", path=root / "sft" / "train").text
    assert '<mark class="trained">19&lt;|eot_id|&gt;</mark>' in page and 'id="next"' in page


def test_refusals(sft_lab, tmp_path):
    root, client = sft_lab
    assert get(client, "/sft", path=root / "chat.jsonl").status_code == 403  # outside the root
    assert get(client, "/api/sft", path=root / "sft").status_code == 404  # not a cache
    # a ledger naming a tokenizer outside the roots is not followed there
    ledger = json.loads((root / "sft" / "train" / "cache.json").read_text())
    (root / "sft" / "other").mkdir()
    (root / "sft" / "other" / "cache.json").write_text(json.dumps({**ledger, "tokenizer": str(tmp_path)}))
    assert get(client, "/api/sft", path=root / "sft" / "other").status_code == 403
