"""A keyed pseudo-random permutation of ``range(n)`` that needs no memory: a Feistel network.

Shuffling 10^9 sequences with ``np.random.permutation`` needs 8 GB and the whole array to answer one
lookup. A Feistel network answers ``perm(i)`` in O(1) from a key::

    perm = FeistelPermutation(10, seed=3)
    [int(perm(i)) for i in range(10)]  # each of 0..9 exactly once, the same order for the same seed

How: split ``i``'s ``2h`` bits into halves ``(L, R)`` and apply rounds ``(L, R) -> (R, L ^ F_k(R))``.
Each round is invertible whatever ``F`` is, so the network permutes ``[0, 4^h)``. For ``n`` that is not
a power of four, "cycle walking" re-applies the network until the value lands in ``[0, n)``: this stays
a bijection on ``[0, n)`` (Black & Rogaway 2002) and takes < 4 rounds on average since ``4^h < 4n``.
Round keys and ``F`` use splitmix64, so results do not depend on numpy's RNG implementation.
"""

from __future__ import annotations

import numpy as np

_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def splitmix64(x: np.ndarray | int) -> np.ndarray:
    """The splitmix64 finaliser (Steele et al. 2014): a cheap, well-mixed 64-bit hash."""
    z = np.asarray(x, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def mix_seed(*parts: int) -> int:
    """Combine integers (seed, epoch, stage, ...) into one 64-bit key, order-sensitively."""
    h = np.uint64(0x243F6A8885A308D3)
    for part in parts:
        h = splitmix64(h ^ np.uint64(part & 0xFFFFFFFFFFFFFFFF))
    return int(h)


_TABLE_MAX = 1 << 18
"""A permutation of up to this many items that is consulted more than once keeps its whole table (2 MiB at
most): a training loader's per-step lookups cost ~20 numpy calls each otherwise (~0.3 ms a step, on the core
that runs the step)."""


class FeistelPermutation:
    """A bijection on ``[0, n)`` determined by ``(n, seed)``; vectorised over numpy index arrays."""

    def __init__(self, n: int, seed: int, rounds: int = 4):
        if n <= 0:
            raise ValueError(f"FeistelPermutation needs n > 0, got {n}")
        self.n = int(n)
        self.half_bits = max(1, (max(n - 1, 1).bit_length() + 1) // 2)  # 4**half_bits >= n
        self._half_mask = np.uint64((1 << self.half_bits) - 1)
        self._keys = [np.uint64(mix_seed(seed, r)) for r in range(rounds)]
        self._calls, self._table = 0, None

    def _encrypt(self, x: np.ndarray) -> np.ndarray:
        bits = np.uint64(self.half_bits)
        left, right = x >> bits, x & self._half_mask
        for key in self._keys:
            left, right = right, left ^ (splitmix64(right ^ key) & self._half_mask)
        return (left << bits) | right

    def __call__(self, index: np.ndarray | int) -> np.ndarray:
        x = np.asarray(index, dtype=np.int64)
        if np.any((x < 0) | (x >= self.n)):
            raise IndexError(f"FeistelPermutation index outside [0, {self.n})")
        if self._table is None and self.n <= _TABLE_MAX:
            self._calls += 1
            if self._calls > 1:  # consulted again (a loader's permutation is, every step): tabulate it once
                self._table = self._permute(np.arange(self.n, dtype=np.int64))
        if self._table is not None:
            return self._table[x]
        return self._permute(x)

    def _permute(self, x: np.ndarray) -> np.ndarray:
        out = x.astype(np.uint64)
        todo = np.ones(out.shape, dtype=bool)
        while todo.any():  # cycle walking: re-encrypt values that fell outside [0, n)
            out[todo] = self._encrypt(out[todo])
            todo = out >= np.uint64(self.n)
        return out.astype(np.int64)


class EpochPermutation:
    """An endless index stream over ``n`` items: every epoch visits each item once, in a new order.

    ``perm(i)`` for ``i`` in epoch ``e = i // n`` is ``Feistel(n, mix(seed, e))(i % n)``.
    """

    def __init__(self, n: int, seed: int):
        self.n, self.seed = int(n), int(seed)
        self._cache: dict[int, FeistelPermutation] = {}

    def __call__(self, index: np.ndarray) -> np.ndarray:
        index = np.asarray(index, dtype=np.int64)
        out = np.empty_like(index)
        epochs = index // self.n
        for epoch in np.unique(epochs):
            perm = self._cache.get(int(epoch))
            if perm is None:
                perm = self._cache[int(epoch)] = FeistelPermutation(self.n, mix_seed(self.seed, int(epoch)))
                if len(self._cache) > 4:
                    self._cache.pop(next(iter(self._cache)))
            sel = epochs == epoch
            out[sel] = perm(index[sel] % self.n)
        return out
