"""Random access to a token cache: any token range, any document, from local disk or an object store.

    cache = TokenCache.open("local_store/tokenized/stories-1a2b/train", tokenizer=tok)
    cache.read(1_000_000, 1024)          # 1,024 tokens starting at global token 1,000,000 (across shards)
    cache.document(42)                   # document 42's tokens (without its EOS)
    cache.document_starts(0, 4096)       # global starts of documents that begin inside [0, 4096)

The cache is one logical token stream: shards concatenated in order. Local shards are memory-mapped
(opened lazily, per process, so a reader can be shared with forked or spawned workers); remote shards
are read with ranged GETs of exactly the bytes asked for. Only the small offset arrays of remote shards
are fetched whole, once, when documents are looked up.
"""

from __future__ import annotations

import bisect
import json
import os
from typing import Any

import numpy as np

from marin.storage import filesystem, is_local, join, local_path, read_text
from marin.tokenize.cache_format import FORMAT_VERSION, LEDGER_FILE, OFFSET_DTYPE, shard_paths


class CacheError(ValueError):
    """A cache that is missing, incomplete, of an unknown format or built with another tokenizer."""


class TokenCache:
    def __init__(self, url: str, ledger: dict[str, Any]):
        self.url = url
        self.ledger = ledger
        self.dtype = np.dtype(ledger["dtype"])
        self.eos_id: int = ledger["eos_id"]
        self.fingerprint: str = ledger["tokenizer_fingerprint"]
        shards = ledger["shards"]
        self._names = [s["name"] for s in shards]
        self._token_starts = np.concatenate([[0], np.cumsum([s["num_tokens"] for s in shards])]).astype(np.int64)
        self._doc_starts = np.concatenate([[0], np.cumsum([s["num_documents"] for s in shards])]).astype(np.int64)
        self._local = is_local(url)
        self._pid = None
        self._maps: dict[tuple[int, str], np.ndarray] = {}

    @classmethod
    def open(cls, url: str, tokenizer: Any = None) -> TokenCache:
        """Open a complete cache. ``tokenizer`` (a ``Tokenizer`` or a fingerprint string) must match the
        one that built it."""
        ledger_url = join(url, LEDGER_FILE)
        try:
            ledger = json.loads(read_text(ledger_url))
        except FileNotFoundError:
            raise CacheError(f"{ledger_url}: no ledger; the cache is missing or was never finished") from None
        except ValueError as e:
            raise CacheError(f"{ledger_url}: unreadable ledger ({e})") from None
        if ledger.get("format_version") != FORMAT_VERSION:
            raise CacheError(f"{ledger_url}: format_version {ledger.get('format_version')}, expected {FORMAT_VERSION}")
        if tokenizer is not None:
            from marin.tokenize.tokenizer import fingerprint

            expected = tokenizer if isinstance(tokenizer, str) else fingerprint(tokenizer)
            if expected != ledger["tokenizer_fingerprint"]:
                raise CacheError(
                    f"{url}: built with tokenizer {ledger.get('tokenizer')!r} (fingerprint "
                    f"{ledger['tokenizer_fingerprint'][:12]}…), but read with a different one ({expected[:12]}…)"
                )
        return cls(url, ledger)

    @property
    def num_tokens(self) -> int:
        return int(self._token_starts[-1])

    @property
    def num_documents(self) -> int:
        return int(self._doc_starts[-1])

    @property
    def num_bytes(self) -> int:
        """UTF-8 bytes of the documents' text (EOS tokens stand for no bytes): the bits-per-byte denominator."""
        return int(self.ledger["num_bytes"])

    def __len__(self) -> int:
        return self.num_tokens

    # -- tokens ------------------------------------------------------------------------------------
    def read(self, start: int, length: int) -> np.ndarray:
        """Tokens ``[start, start + length)`` of the whole stream, as a new array of the cache's dtype."""
        return self._read_range("tokens", self.dtype, start, length)

    @property
    def has_mask(self) -> bool:
        """True for SFT caches (``marin.chat``): a per-token loss mask is stored beside the tokens."""
        return bool(self.ledger.get("loss_mask"))

    def read_mask(self, start: int, length: int) -> np.ndarray:
        """The loss mask (uint8, 1 = trained target) of tokens ``[start, start + length)``; SFT caches only."""
        if not self.has_mask:
            raise CacheError(f"{self.url}: not an SFT cache (no loss mask in its ledger)")
        return self._read_range("mask", np.dtype(np.uint8), start, length)

    def _read_range(self, kind: str, dtype: np.dtype, start: int, length: int) -> np.ndarray:
        """Per-token data ``[start, start + length)`` of the stream, across shards."""
        if start < 0 or length < 0 or start + length > self.num_tokens:
            raise IndexError(f"token range [{start}, {start + length}) outside cache of {self.num_tokens} tokens")
        out = np.empty(length, dtype=dtype)
        filled = 0
        shard = int(np.searchsorted(self._token_starts, start, side="right")) - 1
        while filled < length:
            local = start + filled - int(self._token_starts[shard])
            take = min(length - filled, int(self._token_starts[shard + 1]) - int(self._token_starts[shard]) - local)
            out[filled : filled + take] = self._read_shard(shard, kind, dtype, local, take)
            filled += take
            shard += 1
        return out

    # -- documents ---------------------------------------------------------------------------------
    def document_span(self, index: int) -> tuple[int, int]:
        """Global ``[start, end)`` of document ``index``, its EOS included."""
        if not 0 <= index < self.num_documents:
            raise IndexError(f"document {index} outside cache of {self.num_documents} documents")
        shard = int(np.searchsorted(self._doc_starts, index, side="right")) - 1
        j = index - int(self._doc_starts[shard])
        lo, hi = self._read_shard(shard, "offsets", OFFSET_DTYPE, j, 2)
        base = int(self._token_starts[shard])
        return base + int(lo), base + int(hi)

    def document(self, index: int) -> np.ndarray:
        """The tokens of document ``index`` without its trailing EOS."""
        start, end = self.document_span(index)
        return self.read(start, end - start - 1)

    def document_starts(self, start: int, end: int) -> np.ndarray:
        """Global token positions in ``[start, end)`` where a document begins (for packing segment ids)."""
        out = []
        first = max(0, int(np.searchsorted(self._token_starts, start, side="right")) - 1)
        for shard in range(first, len(self._names)):
            base = int(self._token_starts[shard])
            if base >= end:
                break
            offsets = self._offsets(shard)
            lo = bisect.bisect_left(offsets, start - base)
            hi = bisect.bisect_left(offsets, end - base)
            # The last offset is the shard's end, not a document start.
            hi = min(hi, len(offsets) - 1)
            out.append(np.asarray(offsets[lo:hi], dtype=np.int64) + base)
        return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)

    # -- storage -----------------------------------------------------------------------------------
    def _offsets(self, shard: int) -> np.ndarray:
        n = self.ledger["shards"][shard]["num_documents"] + 1
        if self._local:
            return self._memmap(shard, "offsets", OFFSET_DTYPE)
        key = (shard, "offsets-all")
        if key not in self._maps:
            self._maps[key] = self._read_shard(shard, "offsets", OFFSET_DTYPE, 0, n)
        return self._maps[key]

    def _read_shard(self, shard: int, kind: str, dtype: np.dtype, start: int, count: int) -> np.ndarray:
        if self._local:
            return self._memmap(shard, kind, dtype)[start : start + count]
        fs, path = filesystem(shard_paths(self.url, self._names[shard])[kind])
        data = fs.cat_file(path, start=start * dtype.itemsize, end=(start + count) * dtype.itemsize)
        return np.frombuffer(data, dtype=dtype)

    def _memmap(self, shard: int, kind: str, dtype: np.dtype) -> np.ndarray:
        if self._pid != os.getpid():  # a forked child must not share the parent's file handles
            self._maps, self._pid = {}, os.getpid()
        key = (shard, kind)
        if key not in self._maps:
            path = local_path(shard_paths(self.url, self._names[shard])[kind])
            if os.path.getsize(path) == 0:
                self._maps[key] = np.zeros(0, dtype=dtype)
            else:
                self._maps[key] = np.memmap(path, dtype=dtype, mode="r")
        return self._maps[key]

    def __getstate__(self):
        return {"url": self.url, "ledger": self.ledger}

    def __setstate__(self, state):
        self.__init__(state["url"], state["ledger"])
