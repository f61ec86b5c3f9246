"""One shard of a token cache as both cache builders write it, and the counts their ledgers add up.

The pretraining writer (``marin.tokenize.writer``) and the SFT cache (``marin.chat.cache``) differ in what
a document is (a text; a rendered conversation with its assistant mask), not in how a shard is written,
resumed and counted, nor in how the special-string policy (``marin.tokenize.special``) is applied:

    shard = ShardWriter(spec, dtype, streams=("tokens", "mask"))
    rows = shard.admit(rows, holds_special)      # counts rows holding a special string; drops them on "drop"
    with shard:
        shard.add(tokens=ids, mask=mask)         # one document: its ids (EOS included) and aligned arrays
    ledger = shard.finish(tokenizer_fingerprint=fp)   # offsets, then the shard's ledger, written last

``plan_shards`` is the rerun's check (a shard finished from the same source, tokenizer and policy, with
files of the promised sizes, is kept); ``cache_totals(shards)`` sums what the cache ledger reports.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import numpy as np

from marin.storage import check_fence, filesystem, read_text, write_atomic
from marin.storage.records import OnError, ReadStats
from marin.tokenize.cache_format import OFFSET_DTYPE, shard_name, shard_paths
from marin.tokenize.special import SpecialStringPolicy, counted

T = TypeVar("T")
logger = logging.getLogger(__name__)

TOTALS = (
    "num_documents",
    "num_tokens",
    "num_bytes",
    "empty_documents",
    "special_string_documents",
    "dropped_documents",
    "skipped_records",
    "long_documents",
)
"""Counts a cache ledger sums over its shards (``max_document_tokens`` is their maximum)."""


@dataclasses.dataclass(frozen=True)
class ShardSpec:
    """What both builders' shard jobs share: shard ``index`` of ``cache_url`` is built from ``source``."""

    index: int
    source: str
    cache_url: str
    on_error: OnError = "raise"
    long_document_tokens: int = 4096
    special_strings: SpecialStringPolicy = "text"

    @property
    def paths(self) -> dict[str, str]:
        return shard_paths(self.cache_url, shard_name(self.index))


class ShardWriter:
    """Streams one shard's documents to temp files (moved into place on a clean exit, removed otherwise);
    ``finish`` then writes the offsets and the shard's ledger, in that order."""

    def __init__(self, spec: ShardSpec, dtype: np.dtype, streams: tuple[str, ...] = ("tokens",)):
        self.spec = spec
        self.dtype = np.dtype(dtype)
        self.stats = ReadStats()
        self.counts = {"empty": 0, "bytes": 0, "special": 0, "dropped": 0}
        self._lengths: list[int] = []
        self._hashes = {name: hashlib.sha256() for name in streams}
        self._files = {name: AtomicFile(spec.paths[name]) for name in streams}
        self._outs: dict[str, Any] = {}

    def admit(self, rows: Iterable[T], holds_special: Callable[[T], bool]) -> Iterator[T]:
        """``rows`` under the shard's special-string policy, counted in its ledger."""
        return counted(rows, holds_special, self.counts, self.spec.special_strings)

    def __enter__(self) -> ShardWriter:
        self._outs = {name: f.__enter__() for name, f in self._files.items()}
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        for f in self._files.values():
            f.__exit__(exc_type, exc, tb)
        return False

    @property
    def num_documents(self) -> int:
        """Documents added so far."""
        return len(self._lengths)

    def add(self, **arrays: np.ndarray) -> None:
        """One document: ``tokens`` (EOS included) and, per extra stream, an array aligned with it."""
        self._lengths.append(len(arrays["tokens"]))
        for name, array in arrays.items():
            data = array.tobytes()
            self._hashes[name].update(data)
            self._outs[name].write(data)

    def finish(self, **fields: Any) -> dict:
        """Write the offsets, then the shard's ledger (``fields`` added to the common ones); return it."""
        lengths = self._lengths
        offsets = np.zeros(len(lengths) + 1, dtype=OFFSET_DTYPE)
        np.cumsum(lengths, out=offsets[1:])
        write_atomic(self.spec.paths["offsets"], offsets.tobytes())
        ledger = {
            "name": shard_name(self.spec.index),
            "source": self.spec.source,
            **fields,
            "special_strings": self.spec.special_strings,
            "dtype": self.dtype.str,
            "num_documents": len(lengths),
            "num_tokens": int(offsets[-1]),
            "num_bytes": self.counts["bytes"],
            **{f"{name}_sha256": digest.hexdigest() for name, digest in self._hashes.items()},
            "offsets_sha256": hashlib.sha256(offsets.tobytes()).hexdigest(),
            "empty_documents": self.counts["empty"],
            "special_string_documents": self.counts["special"],
            "dropped_documents": self.counts["dropped"],
            "skipped_records": self.stats.skipped,
            "max_document_tokens": max(lengths, default=0),
            "long_documents": sum(1 for n in lengths if n > self.spec.long_document_tokens),
        }
        write_atomic(self.spec.paths["ledger"], json.dumps(ledger, indent=2))
        return ledger


def plan_shards(
    files: Sequence[str], cache_url: str, identity: dict[str, str], streams: tuple[str, ...] = ("tokens",), **options
) -> tuple[dict[int, dict], list[ShardSpec]]:
    """The ledgers of the shards a previous run finished (by index), and the specs of those left to build;
    ``options`` are ``ShardSpec``'s (``on_error``, ``long_document_tokens``, ``special_strings``)."""
    done, todo = {}, []
    for index, source in enumerate(files):
        spec = ShardSpec(index, source, cache_url, **options)
        ledger = finished_shard(spec, identity, streams)
        if ledger is None:
            todo.append(spec)
        else:
            done[index] = ledger
    if done:
        logger.info("%s: %d of %d shards already complete", cache_url, len(done), len(files))
    return done, todo


def finished_shard(spec: ShardSpec, identity: dict[str, str], streams: tuple[str, ...] = ("tokens",)) -> dict | None:
    """The shard's ledger if it was finished from ``spec.source`` under ``spec.special_strings`` with the same
    ``identity`` fields (tokenizer fingerprint, template) and its files have the sizes the ledger promises;
    None means (re)build it (also for a shard written before the policy existed)."""
    paths = spec.paths
    try:
        ledger = json.loads(read_text(paths["ledger"]))
    except (FileNotFoundError, ValueError):
        return None
    expected = {"source": spec.source, "special_strings": spec.special_strings, **identity}
    if any(ledger.get(key) != value for key, value in expected.items()):
        return None
    per_token = {"tokens": np.dtype(ledger["dtype"]).itemsize, "mask": 1}
    sizes = {name: ledger["num_tokens"] * per_token[name] for name in streams}
    sizes["offsets"] = (ledger["num_documents"] + 1) * OFFSET_DTYPE.itemsize
    for kind, size in sizes.items():
        fs, path = filesystem(paths[kind])
        if not fs.exists(path) or fs.size(path) != size:
            return None
    return ledger


def batches(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """``items`` in lists of ``size`` (the last may be shorter): what ``encode_batch`` takes at once."""
    batch: list[T] = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def cache_totals(shards: list[dict], extra: tuple[str, ...] = ()) -> dict[str, int]:
    """The cache ledger's counts: ``TOTALS`` and ``extra`` summed over ``shards``, and the longest document."""
    totals = {key: sum(s[key] for s in shards) for key in (*TOTALS, *extra)}
    totals["max_document_tokens"] = max((s["max_document_tokens"] for s in shards), default=0)
    return totals


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
