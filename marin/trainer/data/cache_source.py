"""Token caches as the trainer's data: ``type: cache`` in a ``DataConfig`` opens a ``TokenCache``.

The trainer reads the token-cache format (``marin.tokenize.reader``); the data steps that write it never
import the trainer.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from marin.tokenize.reader import TokenCache
from marin.trainer.data.source import TokenSource, TokenSourceConfig


class CacheTokenSource:
    """``TokenSource`` over a token cache: int32 reads and document starts for packing."""

    def __init__(self, cache: TokenCache):
        self.cache = cache
        self.eos_id = cache.eos_id

    @property
    def num_tokens(self) -> int:
        return self.cache.num_tokens

    @property
    def num_bytes(self) -> int | None:
        return self.cache.ledger.get("num_bytes")

    def read(self, start: int, length: int) -> np.ndarray:
        return self.cache.read(start, length).astype(np.int32)

    def doc_starts(self, start: int, stop: int) -> np.ndarray:
        return self.cache.document_starts(start, stop)


@TokenSourceConfig.register_subclass("cache")
@dataclasses.dataclass(frozen=True, kw_only=True)
class TokenCacheSourceConfig(TokenSourceConfig):
    path: str
    """A token cache directory (holding cache.json), e.g. ``<tokenize step>/train``."""
    tokenizer_fingerprint: str | None = None
    """If set, the cache must have been built with this tokenizer."""

    def build(self) -> TokenSource:
        return CacheTokenSource(TokenCache.open(self.path, tokenizer=self.tokenizer_fingerprint))
