"""The token cache's on-disk format, shared by the writer and the reader (documented in docs/token_cache.md).

    <cache>/cache.json            ledger, written last: its presence means the cache is complete
    <cache>/shards/00000.tokens   flat token ids, little-endian, dtype from the ledger (uint16 for vocab <= 65,536)
    <cache>/shards/00000.offsets  uint64 little-endian, num_documents + 1 entries: document j of the shard is
                                  tokens[offsets[j]:offsets[j+1]] and ends with EOS
    <cache>/shards/00000.mask     SFT caches only (ledger "loss_mask": true): one uint8 per token, 1 where the token
                                  is a training target (an assistant token of a chat template; see marin.chat)
    <cache>/shards/00000.json     the shard's own ledger, written after its two data files: a shard without it is
                                  unfinished and is rebuilt on rerun

Shard k is built from the k-th input file (sorted), so the bytes never depend on how many workers built
the cache or in which order they finished.
"""

from __future__ import annotations

import numpy as np

from marin.storage import join

FORMAT_VERSION = 1
LEDGER_FILE = "cache.json"
OFFSET_DTYPE = np.dtype("<u8")


def token_dtype(vocab_size: int) -> np.dtype:
    """The smallest unsigned little-endian dtype holding every token id."""
    for dtype in ("<u1", "<u2", "<u4"):
        if vocab_size <= np.iinfo(np.dtype(dtype)).max + 1:
            return np.dtype(dtype)
    raise ValueError(f"vocab_size {vocab_size} does not fit in uint32")


def shard_name(index: int) -> str:
    return f"{index:05d}"


def shard_paths(cache_url: str, name: str) -> dict[str, str]:
    base = join(cache_url, "shards", name)
    return {"tokens": f"{base}.tokens", "offsets": f"{base}.offsets", "ledger": f"{base}.json", "mask": f"{base}.mask"}
