"""SFT token caches as conversations: ``/sft?path=<cache>`` shows each document decoded, with the tokens
the SFT loss trains on (the cache's stored mask: assistant turns and their end-of-turn token) marked.

    /sft?path=local_store/tokenized/bundled-instructions-sft-1a2b/train&offset=0

Reading only (the route is ``pages/sft_page.py``). The page reads only what the SFT tokenize step wrote:
the cache (``marin.tokenize.reader``, the token-cache format) and the tokenizer directory its ledger names,
which must lie inside the browser's roots like every other path. Runs of equally masked tokens are decoded
together, so a span reads as text; special tokens (turn headers, end of turn) are kept visible.
"""

from __future__ import annotations

import dataclasses
import functools
import json

from marin.storage import exists, join, read_text
from marin.tokenize.reader import TokenCache

MAX_DOCUMENT_TOKENS = 4096
"""Longer conversations are cut on the page (and say so)."""


@dataclasses.dataclass(frozen=True)
class Span:
    text: str
    trained: bool


@dataclasses.dataclass(frozen=True)
class Conversation:
    index: int
    spans: list[Span]
    tokens: int
    trained_tokens: int
    cut: bool


def is_sft_cache(path: str) -> bool:
    """A token cache whose ledger says it stores a loss mask."""
    ledger = join(path, "cache.json")
    if not exists(ledger):
        return False
    try:
        return bool(json.loads(read_text(ledger)).get("loss_mask"))
    except ValueError:
        return False


@functools.lru_cache(maxsize=8)
def _tokenizer(url: str):
    from tokenizers import Tokenizer

    return Tokenizer.from_str(read_text(join(url, "tokenizer.json")))


def spans_of(decode, ids: list[int], mask: list[int]) -> list[Span]:
    """Maximal runs of equally masked tokens, each decoded as one piece of text."""
    spans, start = [], 0
    for i in range(1, len(ids) + 1):
        if i == len(ids) or bool(mask[i]) != bool(mask[start]):
            spans.append(Span(decode(ids[start:i]), bool(mask[start])))
            start = i
    return spans


def conversations(path: str, tokenizer_url: str, offset: int, limit: int) -> tuple[list[Conversation], int]:
    """Documents ``offset .. offset + limit`` of the SFT cache at ``path``, and how many it holds."""
    cache = TokenCache.open(path)
    tokenizer = _tokenizer(tokenizer_url)

    def decode(ids):
        return tokenizer.decode(ids, skip_special_tokens=False)

    out = []
    for index in range(offset, min(offset + limit, cache.num_documents)):
        start, end = cache.document_span(index)
        n = min(end - start, MAX_DOCUMENT_TOKENS)
        ids, mask = cache.read(start, n).tolist(), cache.read_mask(start, n).tolist()
        out.append(Conversation(index, spans_of(decode, ids, mask), end - start, int(sum(mask)), n < end - start))
    return out, cache.num_documents


def tokenizer_of(path: str) -> str:
    """The tokenizer directory an SFT cache's ledger names (the tokenize step's ``tokenizer/``)."""
    return json.loads(read_text(join(path, "cache.json")))["tokenizer"]
