"""Building a token cache: one shard per input file, in parallel, resumable shard by shard.

    build_cache(files, "gs://b/tokenized/stories/train", tokenizer, num_workers=4)

Each shard is tokenized in batches (``encode_batch`` uses all cores through Rust threads), each document
followed by EOS, and streamed to a temporary file; the data files are moved into place first and the
shard's ledger last. A crash leaves at worst a shard without ledger, which a rerun rebuilds; finished
shards are verified by size and skipped. ``cache.json`` is written only after every shard exists.

A special token's string inside a document is encoded as the text it is, never as the control token
(``marin.tokenize.special``): such documents are counted in the ledger (``special_string_documents``), or
left out with ``special_strings="drop"`` (``dropped_documents``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from collections.abc import Sequence

import numpy as np
from tokenizers import Tokenizer

from marin.parallel import iter_tasks
from marin.progress import progress_bar
from marin.storage import check_fence, filesystem, join, read_text, write_atomic
from marin.storage.records import OnError, ReadStats
from marin.tokenize.cache_format import (
    FORMAT_VERSION,
    LEDGER_FILE,
    OFFSET_DTYPE,
    shard_name,
    shard_paths,
    token_dtype,
)
from marin.tokenize.inputs import iter_texts
from marin.tokenize.special import SpecialStringPolicy, check_policy, counted, special_strings_in, text_encoder
from marin.tokenize.special import special_strings as special_strings_of
from marin.tokenize.tokenizer import eos_id, fingerprint

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ShardJob:
    index: int
    source: str
    cache_url: str
    tokenizer_json: str
    tokenizer_fingerprint: str
    eos: int
    text_key: str
    batch_size: int
    on_error: OnError
    long_document_tokens: int
    special_strings: SpecialStringPolicy = "text"


def build_shard(job: ShardJob) -> dict:
    """Tokenize one input file into one shard; returns (and writes) the shard's ledger."""
    paths = shard_paths(job.cache_url, shard_name(job.index))
    tokenizer = text_encoder(Tokenizer.from_str(job.tokenizer_json))
    dtype = token_dtype(tokenizer.get_vocab_size())
    stats = ReadStats()
    lengths: list[int] = []
    counts = {"empty": 0, "bytes": 0, "special": 0, "dropped": 0}
    tokens_hash = hashlib.sha256()
    strings = special_strings_of(tokenizer)
    texts = counted(
        iter_texts([job.source], job.text_key, on_error=job.on_error, stats=stats),
        lambda text: bool(special_strings_in(text, strings)),
        counts,
        job.special_strings,
    )
    with AtomicFile(paths["tokens"]) as out:
        for batch in _batches(texts, job.batch_size, counts):
            for enc in tokenizer.encode_batch(batch, add_special_tokens=False):
                ids = np.asarray(enc.ids + [job.eos], dtype=dtype)
                lengths.append(len(ids))
                data = ids.tobytes()
                tokens_hash.update(data)
                out.write(data)
    offsets = np.zeros(len(lengths) + 1, dtype=OFFSET_DTYPE)
    np.cumsum(lengths, out=offsets[1:])
    offsets_bytes = offsets.tobytes()
    write_atomic(paths["offsets"], offsets_bytes)
    ledger = {
        "name": shard_name(job.index),
        "source": job.source,
        "tokenizer_fingerprint": job.tokenizer_fingerprint,
        "special_strings": job.special_strings,
        "dtype": dtype.str,
        "num_documents": len(lengths),
        "num_tokens": int(offsets[-1]),
        "num_bytes": counts["bytes"],
        "tokens_sha256": tokens_hash.hexdigest(),
        "offsets_sha256": hashlib.sha256(offsets_bytes).hexdigest(),
        "empty_documents": counts["empty"],
        "special_string_documents": counts["special"],
        "dropped_documents": counts["dropped"],
        "skipped_records": stats.skipped,
        "max_document_tokens": max(lengths, default=0),
        "long_documents": sum(1 for n in lengths if n > job.long_document_tokens),
    }
    write_atomic(paths["ledger"], json.dumps(ledger, indent=2))
    return ledger


def _batches(texts, size: int, counts: dict):
    """Non-empty texts in lists of ``size``; empty documents are counted, not cached (they hold no tokens)."""
    batch = []
    for text in texts:
        if not text:
            counts["empty"] += 1
            continue
        counts["bytes"] += len(text.encode("utf-8"))
        batch.append(text)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


class AtomicFile:
    """A file streamed to a temp name and moved into place on success (local rename or object copy)."""

    def __init__(self, url: str):
        self.url = url
        self.tmp = f"{url}.tmp"

    def __enter__(self):
        fs, path = filesystem(self.tmp)
        fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        self._fs, self._tmp_path = fs, path
        self._file = fs.open(path, "wb")
        return self._file

    def __exit__(self, exc_type, exc, tb):
        self._file.close()
        if exc_type is not None:
            self._fs.rm(self._tmp_path)
            return False
        _, final_path = filesystem(self.url)
        check_fence(self.url)  # a task whose lease was lost must not publish into the new holder's output
        self._fs.mv(self._tmp_path, final_path)
        return False


def shard_is_complete(
    cache_url: str, index: int, source: str, tokenizer_fp: str, special_strings: SpecialStringPolicy = "text"
) -> dict | None:
    """The shard's ledger if it was finished from the same source, tokenizer and special-string policy and
    its files have the sizes the ledger promises; None means (re)build it."""
    paths = shard_paths(cache_url, shard_name(index))
    try:
        ledger = json.loads(read_text(paths["ledger"]))
    except (FileNotFoundError, ValueError):
        return None
    if ledger.get("source") != source or ledger.get("tokenizer_fingerprint") != tokenizer_fp:
        return None
    if ledger.get("special_strings") != special_strings:  # also a shard written before the policy existed
        return None
    expected = {
        "tokens": ledger["num_tokens"] * np.dtype(ledger["dtype"]).itemsize,
        "offsets": (ledger["num_documents"] + 1) * OFFSET_DTYPE.itemsize,
    }
    for kind, size in expected.items():
        fs, path = filesystem(paths[kind])
        if not fs.exists(path) or fs.size(path) != size:
            return None
    return ledger


def build_cache(
    files: Sequence[str],
    cache_url: str,
    tokenizer: Tokenizer,
    *,
    tokenizer_name: str,
    eos_token: str | None = None,
    text_key: str = "text",
    num_workers: int = 1,
    batch_size: int = 1024,
    on_error: OnError = "raise",
    long_document_tokens: int = 4096,
    special_strings: SpecialStringPolicy = "text",
) -> dict:
    """Build (or finish) the cache at ``cache_url`` from ``files``; returns the ledger."""
    ledger_url = join(cache_url, LEDGER_FILE)
    tokenizer_json = tokenizer.to_str()
    eos = eos_id(tokenizer, eos_token)
    check_policy("build_cache", special_strings)
    jobs, ledgers = [], {}
    tokenizer_fp = fingerprint(tokenizer)
    for index, source in enumerate(files):
        done = shard_is_complete(cache_url, index, source, tokenizer_fp, special_strings)
        if done is not None:
            ledgers[index] = done
        else:
            jobs.append(
                ShardJob(
                    index,
                    source,
                    cache_url,
                    tokenizer_json,
                    tokenizer_fp,
                    eos,
                    text_key,
                    batch_size,
                    on_error,
                    long_document_tokens,
                    special_strings,
                )
            )
    if ledgers:
        logger.info("%s: %d of %d shards already complete", cache_url, len(ledgers), len(files))
    name = "/".join(cache_url.rstrip("/").split("/")[-2:])  # e.g. stories-4312b900/train
    bar = progress_bar(len(files), f"tokenize {name}", unit="shard", initial=len(ledgers))
    tokens = 0
    for ledger in _run_jobs(jobs, num_workers):
        ledgers[int(ledger["name"])] = ledger
        tokens += ledger["num_tokens"]
        bar.set_postfix(tokens=f"{tokens:,}", refresh=False)
        bar.update()
    bar.close()
    shards = [ledgers[i] for i in range(len(files))]
    tokens_dtype = token_dtype(tokenizer.get_vocab_size())
    ledger = {
        "format_version": FORMAT_VERSION,
        "tokenizer": tokenizer_name,
        "tokenizer_fingerprint": tokenizer_fp,
        "vocab_size": tokenizer.get_vocab_size(),
        "dtype": tokens_dtype.str,
        "eos_id": eos,
        "num_documents": sum(s["num_documents"] for s in shards),
        "num_tokens": sum(s["num_tokens"] for s in shards),
        "num_bytes": sum(s["num_bytes"] for s in shards),
        "empty_documents": sum(s["empty_documents"] for s in shards),
        "special_strings": special_strings,
        "special_string_documents": sum(s["special_string_documents"] for s in shards),
        "dropped_documents": sum(s["dropped_documents"] for s in shards),
        "skipped_records": sum(s["skipped_records"] for s in shards),
        "long_document_tokens": long_document_tokens,
        "long_documents": sum(s["long_documents"] for s in shards),
        "max_document_tokens": max((s["max_document_tokens"] for s in shards), default=0),
        "shards": shards,
    }
    write_atomic(ledger_url, json.dumps(ledger, indent=2))
    logger.info(
        "%s: %d documents, %d tokens in %d shards",
        cache_url,
        ledger["num_documents"],
        ledger["num_tokens"],
        len(shards),
    )
    return ledger


def _run_jobs(jobs: list[ShardJob], num_workers: int):
    """Ledgers of the shards as they finish: in this process (one worker) or as Ray tasks, at most
    ``num_workers`` in flight."""
    if num_workers <= 1 or len(jobs) <= 1:  # a bad record's own error (file:line, field) reaches the caller
        yield from map(build_shard, jobs)
        return
    for _, ledger in iter_tasks(build_shard, [(job,) for job in jobs], max_workers=num_workers, label="tokenize shard"):
        yield ledger
