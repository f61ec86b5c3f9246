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
import json
import logging
from collections.abc import Sequence

import numpy as np
from tokenizers import Tokenizer

from marin.parallel import iter_tasks
from marin.progress import progress_bar
from marin.storage import join, write_atomic
from marin.storage.records import OnError
from marin.tokenize.cache_format import FORMAT_VERSION, LEDGER_FILE, token_dtype
from marin.tokenize.chars import explain_encode_failure
from marin.tokenize.inputs import iter_texts
from marin.tokenize.shards import ShardSpec, ShardWriter, batches, cache_totals, plan_shards
from marin.tokenize.special import SpecialStringPolicy, check_policy, special_strings_in, text_encoder
from marin.tokenize.special import special_strings as special_strings_of
from marin.tokenize.tokenizer import eos_id, fingerprint

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ShardJob:
    shard: ShardSpec
    tokenizer_json: str
    tokenizer_fingerprint: str
    eos: int
    text_key: str
    batch_size: int


def build_shard(job: ShardJob) -> dict:
    """Tokenize one input file into one shard; returns (and writes) the shard's ledger."""
    tokenizer = text_encoder(Tokenizer.from_str(job.tokenizer_json))
    shard = ShardWriter(job.shard, token_dtype(tokenizer.get_vocab_size()))
    strings = special_strings_of(tokenizer)
    texts = shard.admit(
        iter_texts([job.shard.source], job.text_key, on_error=job.shard.on_error, stats=shard.stats),
        lambda text: bool(special_strings_in(text, strings)),
    )
    with shard:
        for batch in batches(_non_empty(texts, shard.counts), job.batch_size):
            for enc in _encode(tokenizer, batch, job.shard.source, first=shard.num_documents):
                shard.add(tokens=np.asarray(enc.ids + [job.eos], dtype=shard.dtype))
    return shard.finish(tokenizer_fingerprint=job.tokenizer_fingerprint)


def _encode(tokenizer: Tokenizer, texts: list[str], source: str, first: int) -> list:
    """``texts`` encoded; a failure names the file, the document and, for a character tokenizer, the
    character it has no id for and its position."""
    try:
        return tokenizer.encode_batch(texts, add_special_tokens=False)
    except Exception as e:  # tokenizers raises a bare Exception ("Missing [UNK] token ...")
        explained = explain_encode_failure(tokenizer, texts, source, first)
        if explained is not None:
            raise explained from e
        raise ValueError(f"{source}: could not tokenize documents {first}..{first + len(texts) - 1}: {e}") from e


def _non_empty(texts, counts: dict):
    """Non-empty texts, their UTF-8 bytes counted; empty documents are counted, not cached (no tokens)."""
    for text in texts:
        if not text:
            counts["empty"] += 1
            continue
        counts["bytes"] += len(text.encode("utf-8"))
        yield text


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
    tokenizer_fp = fingerprint(tokenizer)
    ledgers, todo = plan_shards(
        files,
        cache_url,
        {"tokenizer_fingerprint": tokenizer_fp},
        on_error=on_error,
        long_document_tokens=long_document_tokens,
        special_strings=special_strings,
    )
    jobs = [ShardJob(spec, tokenizer_json, tokenizer_fp, eos, text_key, batch_size) for spec in todo]
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
    ledger = {
        "format_version": FORMAT_VERSION,
        "tokenizer": tokenizer_name,
        "tokenizer_fingerprint": tokenizer_fp,
        "vocab_size": tokenizer.get_vocab_size(),
        "dtype": token_dtype(tokenizer.get_vocab_size()).str,
        "eos_id": eos,
        "special_strings": special_strings,
        **cache_totals(shards),
        "long_document_tokens": long_document_tokens,
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
