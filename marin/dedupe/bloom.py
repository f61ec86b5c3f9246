"""A Bloom filter over 64-bit item hashes, sized from the expected item count and false-positive rate.

For ``n`` items and a target false-positive rate ``p`` the optimal filter has
``m = -n ln p / (ln 2)^2`` bits and ``k = (m / n) ln 2`` hash functions (Bloom 1970; Broder and
Mitzenmacher 2004). For n = 1M paragraphs at p = 0.001 that is 14.4 Mbit (1.8 MB) and k = 10.

The k bit positions come from double hashing, ``g_i(x) = h1(x) + i * h2(x) mod m`` (Kirsch and
Mitzenmacher 2006), with ``h1`` the item hash and ``h2`` an odd remix of it, so each item costs one
64-bit hash computed upstream.

``add_new`` checks and inserts a whole batch with numpy: an item counts as already seen when it was
inserted by an earlier batch (all k bits set) or occurs earlier in the same batch (exact hash match).
Unlike a one-at-a-time loop, a batch never produces false positives from bits set by items of the same
batch, so the measured false-positive rate can only be lower; the result depends only on the order of
items and the batch size, both fixed by the caller, not on how work is spread over processes.
"""

from __future__ import annotations

import math

import numpy as np

from marin.dedupe.hashing import mix64

_ONE = np.uint64(1)
_SIX = np.uint64(6)
_MASK63 = np.uint64(63)


def bloom_size(expected_items: int, false_positive_rate: float) -> tuple[int, int]:
    """(bits, hash functions) of the optimal filter."""
    if expected_items < 1:
        raise ValueError(f"expected_items must be >= 1, got {expected_items}")
    if not 0 < false_positive_rate < 1:
        raise ValueError(f"false_positive_rate must be in (0, 1), got {false_positive_rate}")
    bits = math.ceil(-expected_items * math.log(false_positive_rate) / math.log(2) ** 2)
    hashes = max(1, round(bits / expected_items * math.log(2)))
    return max(bits, 64), hashes


class BloomFilter:
    def __init__(self, expected_items: int, false_positive_rate: float):
        self.num_bits, self.num_hashes = bloom_size(expected_items, false_positive_rate)
        self.expected_items = expected_items
        self.false_positive_rate = false_positive_rate
        self.words = np.zeros((self.num_bits + 63) // 64, dtype=np.uint64)
        self.count = 0

    @property
    def nbytes(self) -> int:
        return self.words.nbytes

    def _positions(self, hashes: np.ndarray) -> np.ndarray:
        """[k, len(hashes)] bit positions."""
        h1 = hashes.astype(np.uint64)
        h2 = mix64(h1 ^ np.uint64(0x9E3779B97F4A7C15)) | _ONE
        i = np.arange(self.num_hashes, dtype=np.uint64)[:, None]
        return (h1[None, :] + i * h2[None, :]) % np.uint64(self.num_bits)

    def contains(self, hashes: np.ndarray) -> np.ndarray:
        """Boolean mask: may the item have been added (true positives plus false positives)?"""
        if len(hashes) == 0:
            return np.zeros(0, dtype=bool)
        pos = self._positions(hashes)
        bits = (self.words[pos >> _SIX] >> (pos & _MASK63)) & _ONE
        return bits.all(axis=0)

    def add(self, hashes: np.ndarray) -> None:
        if len(hashes) == 0:
            return
        pos = self._positions(hashes).ravel()
        # Several positions may share a word: np.bitwise_or.at applies every one of them.
        np.bitwise_or.at(self.words, pos >> _SIX, _ONE << (pos & _MASK63))
        self.count += len(hashes)

    def add_new(self, hashes: np.ndarray) -> np.ndarray:
        """Insert a batch; returns the mask of items already seen (earlier batches or earlier in this one)."""
        hashes = np.asarray(hashes, dtype=np.uint64)
        seen = np.zeros(len(hashes), dtype=bool)
        if len(hashes) == 0:
            return seen
        _, first = np.unique(hashes, return_index=True)
        repeat = np.ones(len(hashes), dtype=bool)
        repeat[first] = False
        seen |= repeat
        seen[first] = self.contains(hashes[first])
        self.add(hashes[first][~seen[first]])
        return seen
