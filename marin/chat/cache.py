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

Shards are built like ``marin.tokenize.writer``'s: shard ``k`` from input file ``k``, data files moved
into place first and the shard's ledger last, finished shards verified by size and skipped on rerun.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from collections.abc import Sequence

import numpy as np

from marin.chat.schema import MalformedConversation, normalize_record
from marin.chat.template import ChatTokenizer
from marin.parallel import run_tasks
from marin.storage import filesystem, join, read_text, write_atomic
from marin.storage.records import OnError, ReadStats, read_records
from marin.tokenize.cache_format import FORMAT_VERSION, LEDGER_FILE, OFFSET_DTYPE, shard_name, shard_paths, token_dtype
from marin.tokenize.special import SpecialStringPolicy, check_policy, counted
from marin.tokenize.tokenizer import eos_id, fingerprint
from marin.tokenize.writer import AtomicFile

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class SftShardJob:
    index: int
    source: str
    cache_url: str
    tokenizer_dir: str
    batch_size: int
    on_error: OnError
    long_document_tokens: int
    special_strings: SpecialStringPolicy = "text"


def _conversations(source: str, on_error: OnError, stats: ReadStats):
    parsed: list = []

    def validate(record: dict) -> str | None:
        try:
            parsed.append(normalize_record(record))
        except MalformedConversation as e:
            return str(e)
        return None

    for _ in read_records(source, on_error=on_error, stats=stats, validate=validate):
        yield parsed.pop()


def _batches(items, size: int):
    batch = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def build_sft_shard(job: SftShardJob) -> dict:
    """Render and tokenize one file of conversations into one shard with its mask; returns its ledger."""
    chat = ChatTokenizer.load(job.tokenizer_dir)
    paths = shard_paths(job.cache_url, shard_name(job.index))
    dtype = token_dtype(chat.tokenizer.get_vocab_size())
    eos = eos_id(chat.tokenizer)
    stats, lengths, masked = ReadStats(), [], 0
    counts = {"special": 0, "dropped": 0}
    tokens_hash, mask_hash = hashlib.sha256(), hashlib.sha256()
    conversations = counted(
        _conversations(job.source, job.on_error, stats),
        lambda messages: bool(chat.special_strings_in_messages(messages)),
        counts,
        job.special_strings,
    )
    with AtomicFile(paths["tokens"]) as tokens_out, AtomicFile(paths["mask"]) as mask_out:
        for batch in _batches(conversations, job.batch_size):
            for ids, mask in chat.encode_batch(batch):
                ids = np.append(ids, eos).astype(dtype)
                mask = np.append(mask, False).astype(np.uint8)
                lengths.append(len(ids))
                masked += int(mask.sum())
                for out, digest, array in ((tokens_out, tokens_hash, ids), (mask_out, mask_hash, mask)):
                    data = array.tobytes()
                    digest.update(data)
                    out.write(data)
    offsets = np.zeros(len(lengths) + 1, dtype=OFFSET_DTYPE)
    np.cumsum(lengths, out=offsets[1:])
    write_atomic(paths["offsets"], offsets.tobytes())
    ledger = {
        "name": shard_name(job.index),
        "source": job.source,
        "tokenizer_fingerprint": fingerprint(chat.tokenizer),
        "chat_template_sha256": hashlib.sha256(chat.template.encode("utf-8")).hexdigest(),
        "special_strings": job.special_strings,
        "dtype": dtype.str,
        "num_documents": len(lengths),
        "num_tokens": int(offsets[-1]),
        "num_masked_tokens": masked,
        "num_bytes": 0,
        "tokens_sha256": tokens_hash.hexdigest(),
        "mask_sha256": mask_hash.hexdigest(),
        "offsets_sha256": hashlib.sha256(offsets.tobytes()).hexdigest(),
        "empty_documents": 0,
        "special_string_documents": counts["special"],
        "dropped_documents": counts["dropped"],
        "skipped_records": stats.skipped,
        "max_document_tokens": max(lengths, default=0),
        "long_documents": sum(1 for n in lengths if n > job.long_document_tokens),
    }
    write_atomic(paths["ledger"], json.dumps(ledger, indent=2))
    return ledger


def _shard_is_complete(
    cache_url: str, index: int, source: str, tokenizer_fp: str, template_sha: str, special_strings: str = "text"
) -> dict | None:
    paths = shard_paths(cache_url, shard_name(index))
    try:
        ledger = json.loads(read_text(paths["ledger"]))
    except (FileNotFoundError, ValueError):
        return None
    keys = ("source", "tokenizer_fingerprint", "chat_template_sha256", "special_strings")
    if tuple(ledger.get(k) for k in keys) != (source, tokenizer_fp, template_sha, special_strings):
        return None  # also a shard written before special strings were kept as text
    expected = {
        "tokens": ledger["num_tokens"] * np.dtype(ledger["dtype"]).itemsize,
        "mask": ledger["num_tokens"],
        "offsets": (ledger["num_documents"] + 1) * OFFSET_DTYPE.itemsize,
    }
    for kind, size in expected.items():
        fs, path = filesystem(paths[kind])
        if not fs.exists(path) or fs.size(path) != size:
            return None
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
    chat = ChatTokenizer.load(tokenizer_dir)
    tokenizer_fp = fingerprint(chat.tokenizer)
    template_sha = hashlib.sha256(chat.template.encode("utf-8")).hexdigest()
    ledgers, jobs = {}, []
    for index, source in enumerate(files):
        done = _shard_is_complete(cache_url, index, source, tokenizer_fp, template_sha, special_strings)
        if done is not None:
            ledgers[index] = done
        else:
            jobs.append(
                SftShardJob(
                    index, source, cache_url, tokenizer_dir, batch_size, on_error, long_document_tokens, special_strings
                )
            )
    if ledgers:
        logger.info("%s: %d of %d shards already complete", cache_url, len(ledgers), len(files))
    results = run_tasks(
        build_sft_shard,
        [(job,) for job in jobs],
        use_ray=num_workers > 1,
        max_workers=num_workers,
        label=f"sft cache {cache_url.rstrip('/').rsplit('/', 1)[-1]}",
    )
    for ledger in results:
        ledgers[int(ledger["name"])] = ledger
    shards = [ledgers[i] for i in range(len(files))]
    ledger = {
        "format_version": FORMAT_VERSION,
        "tokenizer": tokenizer_dir,
        "tokenizer_fingerprint": tokenizer_fp,
        "chat_template_sha256": template_sha,
        "special_strings": special_strings,
        "loss_mask": True,
        "vocab_size": chat.tokenizer.get_vocab_size(),
        "dtype": token_dtype(chat.tokenizer.get_vocab_size()).str,
        "eos_id": eos_id(chat.tokenizer),
        **{
            key: sum(s[key] for s in shards)
            for key in (
                "num_documents",
                "num_tokens",
                "num_masked_tokens",
                "num_bytes",
                "empty_documents",
                "special_string_documents",
                "dropped_documents",
                "skipped_records",
                "long_documents",
            )
        },
        "long_document_tokens": long_document_tokens,
        "max_document_tokens": max((s["max_document_tokens"] for s in shards), default=0),
        "shards": shards,
    }
    write_atomic(join(cache_url, LEDGER_FILE), json.dumps(ledger, indent=2))
    logger.info(
        "%s: %d conversations, %d tokens (%d trained) in %d shards",
        cache_url,
        ledger["num_documents"],
        ledger["num_tokens"],
        ledger["num_masked_tokens"],
        len(shards),
    )
    return ledger
