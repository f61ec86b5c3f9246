"""SFT token caches: rendered conversations with their assistant masks, in the token cache format.

    build_sft_cache(["chat/alpaca-1a2b/train/00000.jsonl.gz"], "sft/alpaca-3c4d/train", chat_tokenizer)

Each conversation is one document of the cache: its template ids followed by EOS, exactly as a
pretraining document is its text's ids followed by EOS, so the reader, the shuffles and the packing are
the pretraining ones. Beside each shard's ``.tokens`` and ``.offsets`` a ``.mask`` file holds one byte per
token, 1 on assistant tokens (their end-of-turn token included) and 0 on system/user text, headers and
EOS; the ledger says ``"loss_mask": true``. The trainer packs the stream into sequences with segment ids
(attention never crosses conversations) and multiplies its loss mask by this one, so a conversation cut
by a sequence boundary keeps its mask on both sides.

A special token's string inside a message's content is encoded as text (``ChatTokenizer``): such
conversations are counted (``special_string_documents``), or left out with ``special_strings="drop"``.

Shards are written, resumed and counted by ``marin.tokenize.shards``, as the pretraining writer's are:
shard ``k`` from input file ``k``, data files moved into place first and the shard's ledger last, finished
shards verified by size and skipped on rerun.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Sequence

import numpy as np

from marin.chat.schema import MalformedConversation, normalize_record
from marin.chat.template import ChatTokenizer
from marin.parallel import run_tasks
from marin.storage import join, write_atomic
from marin.storage.records import OnError, read_parsed
from marin.tokenize.cache_format import FORMAT_VERSION, LEDGER_FILE, token_dtype
from marin.tokenize.shards import ShardSpec, ShardWriter, batches, cache_totals, plan_shards
from marin.tokenize.special import SpecialStringPolicy, check_policy
from marin.tokenize.tokenizer import eos_id

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ChatShardJob:
    """One shard of a cache rendered with a chat template (SFT conversations or preference pairs)."""

    shard: ShardSpec
    tokenizer_dir: str
    batch_size: int


def build_sft_shard(job: ChatShardJob) -> dict:
    """Render and tokenize one file of conversations into one shard with its mask; returns its ledger."""
    chat = ChatTokenizer.load(job.tokenizer_dir)
    shard = ShardWriter(job.shard, token_dtype(chat.tokenizer.get_vocab_size()), streams=("tokens", "mask"))
    eos, masked = eos_id(chat.tokenizer), 0
    conversations = shard.admit(
        read_parsed(
            job.shard.source, normalize_record, MalformedConversation, on_error=job.shard.on_error, stats=shard.stats
        ),
        lambda messages: bool(chat.special_strings_in_messages(messages)),
    )
    with shard:
        for batch in batches(conversations, job.batch_size):
            for ids, mask in chat.encode_batch(batch):
                mask = np.append(mask, False).astype(np.uint8)
                shard.add(tokens=np.append(ids, eos).astype(shard.dtype), mask=mask)
                masked += int(mask.sum())
    return shard.finish(
        **chat.identity(),
        num_masked_tokens=masked,
    )


def build_chat_cache(
    build_shard: Callable[[ChatShardJob], dict],
    files: Sequence[str],
    cache_url: str,
    tokenizer_dir: str,
    *,
    num_workers: int,
    batch_size: int,
    on_error: OnError,
    long_document_tokens: int,
    special_strings: SpecialStringPolicy,
    extra_totals: tuple[str, ...] = (),
    extra_fields: Callable[[list[dict]], dict] = lambda shards: {},
    label: str = "chat cache",
) -> dict:
    """Build (or finish) a cache rendered with the chat tokenizer saved in ``tokenizer_dir``: shard ``k`` of
    ``cache_url`` by ``build_shard`` from ``files[k]`` (finished shards kept), then the cache's ledger (written
    last, returned): the common fields, ``extra_totals`` summed over the shards and ``extra_fields(shards)``.
    The SFT cache and the pair cache (``marin.chat.preference_cache``) differ only in their shards."""
    chat = ChatTokenizer.load(tokenizer_dir)
    identity = chat.identity()
    ledgers, todo = plan_shards(
        files,
        cache_url,
        identity,
        streams=("tokens", "mask"),
        on_error=on_error,
        long_document_tokens=long_document_tokens,
        special_strings=special_strings,
    )
    results = run_tasks(
        build_shard,
        [(ChatShardJob(spec, tokenizer_dir, batch_size),) for spec in todo],
        use_ray=num_workers > 1,
        max_workers=num_workers,
        label=f"{label} {cache_url.rstrip('/').rsplit('/', 1)[-1]}",
    )
    for ledger in results:
        ledgers[int(ledger["name"])] = ledger
    shards = [ledgers[i] for i in range(len(files))]
    vocab = chat.tokenizer.get_vocab_size()
    ledger = {
        "format_version": FORMAT_VERSION,
        "tokenizer": tokenizer_dir,
        **identity,
        "special_strings": special_strings,
        "loss_mask": True,
        "vocab_size": vocab,
        "dtype": token_dtype(vocab).str,
        "eos_id": eos_id(chat.tokenizer),
        **cache_totals(shards, extra=extra_totals),
        "long_document_tokens": long_document_tokens,
        **extra_fields(shards),
        "shards": shards,
    }
    write_atomic(join(cache_url, LEDGER_FILE), json.dumps(ledger, indent=2))
    return ledger


def build_sft_cache(
    files: Sequence[str],
    cache_url: str,
    tokenizer_dir: str,
    *,
    num_workers: int = 1,
    batch_size: int = 256,
    on_error: OnError = "raise",
    long_document_tokens: int = 4096,
    special_strings: SpecialStringPolicy = "text",
) -> dict:
    """Build (or finish) the SFT cache at ``cache_url`` from conversation ``files`` with the chat tokenizer
    saved in ``tokenizer_dir``; returns the ledger (written last)."""
    check_policy("build_sft_cache", special_strings)
    ledger = build_chat_cache(
        build_sft_shard,
        files,
        cache_url,
        tokenizer_dir,
        num_workers=num_workers,
        batch_size=batch_size,
        on_error=on_error,
        long_document_tokens=long_document_tokens,
        special_strings=special_strings,
        extra_totals=("num_masked_tokens",),
        label="sft cache",
    )
    logger.info(
        "%s: %d conversations, %d tokens (%d trained) in %d shards",
        cache_url,
        ledger["num_documents"],
        ledger["num_tokens"],
        ledger["num_masked_tokens"],
        len(ledger["shards"]),
    )
    return ledger
