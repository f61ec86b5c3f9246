"""Pair caches: each preference pair as two documents of the token-cache format.

    build_pair_cache(["prefs/oasst/train/00000.jsonl.gz"], "tokenized/oasst-prefs/train", "<step>/tokenizer")
    pairs = PairCache.open("tokenized/oasst-prefs/train")
    chosen, rejected, prompt_len = pairs.pair(0)    # ids of prompt + chosen, of prompt + rejected; shared prompt

Document ``2i`` of the cache is pair ``i``'s prompt followed by its chosen reply, document ``2i + 1`` the same
prompt followed by its rejected reply; each ends with EOS like every cache document, and the ``.mask`` file
marks the reply's tokens (its end-of-turn token included): what the DPO loss sums over. The ledger says
``"preference_pairs": true``; the cache reader, the data browser and the byte layout are the SFT cache's.

Ids are the chat template's, tokenized over the whole conversation (``ChatTokenizer``: special-token strings in
messages are text), and the prompt is every token before the reply's text begins. That is the prompt TRL's
``DPOTrainer`` finds (the common prefix of the prompt rendered with the generation header and of the whole
conversation) whenever the rendered prompt is a prefix of the conversation's ids, as it is with the lab's
``llama3`` pre-tokenizer (docs/dpo.md says where it is not).

Shards are built like the SFT cache's: shard ``k`` from input file ``k``, data files first and the shard's ledger
last, finished shards skipped on rerun.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from marin.chat.cache import ChatShardJob, build_chat_cache
from marin.chat.preference import MalformedPreference, normalize_preference
from marin.chat.template import ChatTokenizer
from marin.storage.records import OnError, read_parsed
from marin.tokenize.cache_format import token_dtype
from marin.tokenize.reader import TokenCache
from marin.tokenize.shards import ShardWriter, batches
from marin.tokenize.special import SpecialStringPolicy, check_policy
from marin.tokenize.tokenizer import eos_id

logger = logging.getLogger(__name__)
PAIR_TOTALS = ("num_pairs", "num_completion_tokens", "special_string_pairs", "dropped_pairs", "long_pairs")
"""Pair counts a pair cache's ledger sums over its shards, beside ``marin.tokenize.shards.TOTALS``."""


def encode_pairs(chat: ChatTokenizer, pairs: Sequence[dict]) -> list[tuple[np.ndarray, np.ndarray, int]]:
    """``(prompt + chosen ids, prompt + rejected ids, prompt length)`` of normalized pairs, in one tokenizer batch."""
    conversations = [[*p["prompt"], side[0]] for p in pairs for side in (p["chosen"], p["rejected"])]
    for conversation in conversations:  # an empty reply has no tokens to prefer (encode_batch's own rule)
        if not conversation[-1]["content"].strip():
            raise ValueError("pair: empty reply")
    encoded = chat._encode_rendered(conversations)
    out = []
    for i in range(0, len(encoded), 2):
        (c_ids, c_offsets, c_spans), (r_ids, r_offsets, r_spans) = encoded[i], encoded[i + 1]
        c_len = sum(1 for start, _ in c_offsets if start < c_spans[-1][0])
        r_len = sum(1 for start, _ in r_offsets if start < r_spans[-1][0])
        if c_len != r_len or c_ids[:c_len] != r_ids[:r_len]:
            raise ValueError(f"pair {i // 2}: the prompt's ids differ between its chosen and rejected conversations")
        out.append((np.asarray(c_ids, np.int32), np.asarray(r_ids, np.int32), c_len))
    return out


class PairCache:
    """Random access to the pairs of a pair cache (a ``TokenCache`` whose documents come in pairs)."""

    def __init__(self, cache: TokenCache):
        if not cache.ledger.get("preference_pairs"):
            raise ValueError(f"{cache.url}: not a pair cache (no 'preference_pairs' in its ledger)")
        self.cache, self.url, self.ledger = cache, cache.url, cache.ledger
        self.num_pairs = cache.num_documents // 2
        self._spans: np.ndarray | None = None
        self._prompts: np.ndarray | None = None

    @classmethod
    def open(cls, url: str) -> PairCache:
        return cls(TokenCache.open(url))

    def __len__(self) -> int:
        return self.num_pairs

    def pair(self, index: int) -> tuple[np.ndarray, np.ndarray, int]:
        """Ids of prompt + chosen and of prompt + rejected (no EOS), and the prompt's length."""
        chosen, rejected = self.cache.document(2 * index), self.cache.document(2 * index + 1)
        start, _ = self.cache.document_span(2 * index)
        mask = self.cache.read_mask(start, len(chosen))
        return chosen.astype(np.int32), rejected.astype(np.int32), int(np.argmax(mask)) if mask.any() else len(mask)

    def spans(self) -> np.ndarray:
        """[num_pairs, 2, 2] global ``[start, end)`` token spans of each side, EOS included (read once)."""
        if self._spans is None:
            spans = [self.cache.document_span(i) for i in range(2 * self.num_pairs)]
            self._spans = np.asarray(spans, np.int64).reshape(-1, 2, 2)
        return self._spans

    def lengths(self) -> np.ndarray:
        """[num_pairs, 2] token counts of each side (without EOS)."""
        spans = self.spans()
        return spans[:, :, 1] - spans[:, :, 0] - 1

    def prompt_lengths(self) -> np.ndarray:
        """[num_pairs] prompt token counts (where each chosen side's mask begins; read once)."""
        if self._prompts is None:
            self._prompts = np.empty(self.num_pairs, np.int64)
            for i, (start, end) in enumerate(self.spans()[:, 0]):
                mask = self.cache.read_mask(int(start), int(end - start))
                self._prompts[i] = int(np.argmax(mask)) if mask.any() else end - start - 1
        return self._prompts


def build_pair_shard(job: ChatShardJob) -> dict:
    """Render and tokenize one file of pairs into one shard (two documents per pair); returns its ledger."""
    chat = ChatTokenizer.load(job.tokenizer_dir)
    shard = ShardWriter(job.shard, token_dtype(chat.tokenizer.get_vocab_size()), streams=("tokens", "mask"))
    eos, counts = eos_id(chat.tokenizer), {"pairs": 0, "completion": 0, "long": 0, "longest": 0}
    rows = read_parsed(
        job.shard.source, normalize_preference, MalformedPreference, on_error=job.shard.on_error, stats=shard.stats
    )
    pairs = shard.admit(
        (pair for row in rows for pair in row),
        lambda p: bool(chat.special_strings_in_messages([*p["prompt"], *p["chosen"], *p["rejected"]])),
    )
    with shard:
        for batch in batches(pairs, job.batch_size):
            for chosen, rejected, prompt_len in encode_pairs(chat, batch):
                longest = max(len(chosen), len(rejected))
                counts["pairs"] += 1
                counts["long"] += longest > job.shard.long_document_tokens
                counts["longest"] = max(counts["longest"], longest)
                for ids in (chosen, rejected):
                    positions = np.arange(len(ids) + 1)
                    mask = (positions >= prompt_len) & (positions < len(ids))
                    counts["completion"] += int(mask.sum())
                    shard.add(tokens=np.append(ids, eos).astype(shard.dtype), mask=mask.astype(np.uint8))
    return shard.finish(
        **chat.identity(),
        num_pairs=counts["pairs"],
        num_completion_tokens=counts["completion"],
        special_string_pairs=shard.counts["special"],
        dropped_pairs=shard.counts["dropped"],
        long_pairs=counts["long"],
        max_pair_tokens=counts["longest"],
    )


def build_pair_cache(
    files: Sequence[str],
    cache_url: str,
    tokenizer_dir: str,
    *,
    num_workers: int = 1,
    batch_size: int = 256,
    on_error: OnError = "raise",
    long_pair_tokens: int = 4096,
    special_strings: SpecialStringPolicy = "text",
) -> dict:
    """Build (or finish) the pair cache at ``cache_url`` from pair ``files`` with the chat tokenizer saved in
    ``tokenizer_dir``; returns the ledger (written last)."""
    check_policy("build_pair_cache", special_strings)
    ledger = build_chat_cache(
        build_pair_shard,
        files,
        cache_url,
        tokenizer_dir,
        num_workers=num_workers,
        batch_size=batch_size,
        on_error=on_error,
        long_document_tokens=long_pair_tokens,
        special_strings=special_strings,
        extra_totals=PAIR_TOTALS,
        extra_fields=lambda shards: {
            "preference_pairs": True,
            "long_pair_tokens": long_pair_tokens,
            "max_pair_tokens": max((s["max_pair_tokens"] for s in shards), default=0),
        },
        label="pairs",
    )
    logger.info(
        "%s: %d pairs, %d tokens in %d shards",
        cache_url,
        ledger["num_pairs"],
        ledger["num_tokens"],
        len(ledger["shards"]),
    )
    return ledger
