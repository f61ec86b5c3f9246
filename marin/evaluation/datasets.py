"""What an eval reads besides the model: the documents of a validation set and token counts of a cache."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from marin.storage import exists, join
from marin.tokenize.inputs import expand_record_paths, iter_texts
from marin.tokenize.reader import TokenCache


def validation_texts(spec: str, tokenizer) -> Iterator[str]:
    """Documents of a validation set: decoded from a token cache (a directory holding cache.json), or read
    from record files/directories/globs."""
    if exists(join(spec, "cache.json")):
        cache = TokenCache.open(spec, tokenizer=tokenizer)
        for i in range(cache.num_documents):
            yield tokenizer.decode(cache.document(i).tolist(), skip_special_tokens=False)
        return
    yield from iter_texts(expand_record_paths(spec))


def token_counts(cache_path: str, vocab_size: int, chunk: int = 1 << 22) -> np.ndarray:
    """How often each token id occurs in a token cache (read in chunks, never whole)."""
    cache = TokenCache.open(cache_path)
    counts = np.zeros(vocab_size, dtype=np.int64)
    for start in range(0, cache.num_tokens, chunk):
        counts += np.bincount(cache.read(start, min(chunk, cache.num_tokens - start)), minlength=vocab_size)
    return counts
