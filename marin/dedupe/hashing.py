"""Vectorized hashing of words, shingles and MinHash signatures for whole batches of documents.

The per-document Python loop is what makes MinHash slow in most pipelines (tokenize, hash each n-gram
with a Python call, then one small numpy call per document). Here a batch of documents is handled with
a few numpy passes over all of its bytes at once:

1. Normalize each text (``marin.dedupe.text.normalize_words``: lower case, punctuation and whitespace
   to ASCII spaces), encode, and join the batch into one byte array with a space between documents.
2. Word hashes: a polynomial hash over bytes, ``H[i] = sum_{j<i} (b_j + 1) p^j mod 2^64``, is a cumulative
   sum; the hash of the word in ``[s, e)`` is ``(H[e] - H[s]) * p^-s`` (p is odd, so invertible mod 2^64).
   A murmur-style finalizer then mixes the bits.
3. Shingle hashes: word hashes of ``n`` consecutive words combined with ``n`` random odd multipliers,
   then mixed again; a document shorter than ``n`` words has one shingle made of all its words.
4. MinHash: for permutation j, ``h_j(x) = (a_j x + b_j mod 2^64) >> 32`` on the shingle's top 32 bits
   (multiply-add-shift, a 2-universal family: Dietzfelbinger 1996). Since ``>> 32`` is monotone, the
   minimum is taken before the shift, with one ``np.minimum.reduceat`` per block of documents. Blocks
   are sized so the ``[shingles, permutations]`` matrix stays in cache.

Everything depends only on the text and the seed, never on batch boundaries, so signatures are the
same whichever worker computes them. ``marin.dedupe.text`` holds the slow reference definitions; the
tests check that both agree.
"""

from __future__ import annotations

import hashlib

import numpy as np

from marin.dedupe.text import normalize_words_utf8

_P = np.uint64(0x100000001B3)  # an odd multiplier (FNV prime); only needs to be odd to be invertible
_P_INV = np.uint64(pow(int(_P), -1, 1 << 64))
_M1 = np.uint64(0xFF51AFD7ED558CCD)
_M2 = np.uint64(0xC4CEB9FE1A85EC53)
_S33 = np.uint64(33)
_S32 = np.uint64(32)
_SPACE = 32
_powers_cache: dict[str, np.ndarray] = {}


def mix64(x: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finalizer, elementwise (a bijection that spreads every input bit)."""
    x = x ^ (x >> _S33)
    x *= _M1
    x ^= x >> _S33
    x *= _M2
    x ^= x >> _S33
    return x


def _powers(n: int) -> tuple[np.ndarray, np.ndarray]:
    """p^i and p^-i mod 2^64 for i < n (grown on demand, shared across calls)."""
    have = _powers_cache.get("p")
    if have is None or len(have) < n:
        size = max(n, 1 << 16, 2 * (0 if have is None else len(have)))
        p = np.full(size, _P, dtype=np.uint64)
        p[0] = 1
        pinv = np.full(size, _P_INV, dtype=np.uint64)
        pinv[0] = 1
        _powers_cache["p"] = np.cumprod(p, dtype=np.uint64)
        _powers_cache["pinv"] = np.cumprod(pinv, dtype=np.uint64)
    return _powers_cache["p"][:n], _powers_cache["pinv"][:n]


def word_hashes(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(uint64 hash of every word of every text, int64 offsets [len(texts)+1] of each text's words)."""
    encoded = [normalize_words_utf8(t) for t in texts]
    buf = np.frombuffer(b" ".join(encoded) + b" ", dtype=np.uint8)
    lengths = np.fromiter((len(e) + 1 for e in encoded), dtype=np.int64, count=len(encoded))
    doc_starts = np.concatenate(([0], np.cumsum(lengths)))
    is_word = buf != _SPACE
    edges = np.diff(np.concatenate(([False], is_word, [False])).astype(np.int8))
    starts = np.flatnonzero(edges == 1)
    ends = np.flatnonzero(edges == -1)
    p, pinv = _powers(len(buf) + 1)
    prefix = np.empty(len(buf) + 1, dtype=np.uint64)
    prefix[0] = 0
    np.cumsum((buf.astype(np.uint64) + np.uint64(1)) * p[: len(buf)], out=prefix[1:])
    hashes = mix64((prefix[ends] - prefix[starts]) * pinv[starts])
    offsets = np.searchsorted(starts, doc_starts)
    return hashes, offsets


def shingle_hashes(words: np.ndarray, offsets: np.ndarray, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(uint64 hash of every word n-gram, int64 offsets per document) from ``word_hashes`` output.

    Shingles never cross documents; a document with 1..n-1 words gets one shingle of all its words and
    a document without words gets none."""
    num_words = len(words)
    lengths = np.diff(offsets)
    doc_of_word = np.repeat(np.arange(len(lengths)), lengths)
    end_of_word = offsets[1:][doc_of_word]
    mults = np.random.default_rng([seed, n, 0x5A1]).integers(1, 1 << 63, size=n, dtype=np.uint64) | np.uint64(1)
    padded = np.concatenate((words, np.zeros(n, dtype=np.uint64)))
    index = np.arange(num_words)
    combined = np.zeros(num_words, dtype=np.uint64)
    for t in range(n):
        inside = (index + t) < end_of_word
        combined += np.where(inside, padded[t : t + num_words] * mults[t], np.uint64(0))
    full = index + n <= end_of_word
    short_start = np.zeros(num_words, dtype=bool)
    short_docs = (lengths > 0) & (lengths < n)
    short_start[offsets[:-1][short_docs]] = True
    keep = full | short_start
    counts = np.where(lengths >= n, lengths - n + 1, (lengths > 0).astype(np.int64))
    return mix64(combined[keep]), np.concatenate(([0], np.cumsum(counts)))


def minhash_params(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The (a, b) of ``num_perm`` multiply-add-shift hash functions; a is odd."""
    rng = np.random.default_rng([seed, num_perm, 0x313])
    a = rng.integers(0, 1 << 64, size=num_perm, dtype=np.uint64, endpoint=False) | np.uint64(1)
    b = rng.integers(0, 1 << 64, size=num_perm, dtype=np.uint64, endpoint=False)
    return a, b


def minhash_signatures(
    shingles: np.ndarray, offsets: np.ndarray, a: np.ndarray, b: np.ndarray, block_shingles: int = 2048
) -> np.ndarray:
    """uint32 [docs, num_perm] MinHash signatures. Documents without shingles get all-ones rows (never
    matched: callers exclude them from LSH)."""
    num_docs, num_perm = len(offsets) - 1, len(a)
    out = np.full((num_docs, num_perm), np.iinfo(np.uint32).max, dtype=np.uint32)
    x = (shingles >> _S32)[:, None]
    buf = np.empty((block_shingles, num_perm), dtype=np.uint64)
    doc = 0
    while doc < num_docs:
        # Take whole documents until the block is full (at least one document per block).
        stop = int(np.searchsorted(offsets, offsets[doc] + block_shingles, side="right")) - 1
        stop = min(max(stop, doc + 1), num_docs)
        lo, hi = int(offsets[doc]), int(offsets[stop])
        if hi > lo:
            block = buf[: hi - lo] if hi - lo <= block_shingles else np.empty((hi - lo, num_perm), np.uint64)
            np.multiply(x[lo:hi], a, out=block)
            block += b
            nonempty = np.flatnonzero(offsets[doc + 1 : stop + 1] > offsets[doc:stop]) + doc
            mins = np.minimum.reduceat(block, offsets[nonempty] - lo, axis=0)
            out[nonempty] = (mins >> _S32).astype(np.uint32)
        doc = stop
    return out


def band_hashes(signatures: np.ndarray, bands: int, rows: int, seed: int = 0) -> np.ndarray:
    """uint64 [bands, docs]: one hash per band of ``rows`` signature values (band index mixed in, so
    equal values in different bands never collide)."""
    num_docs = signatures.shape[0]
    mults = np.random.default_rng([seed, rows, 0xBA5D]).integers(1, 1 << 63, size=rows, dtype=np.uint64)
    out = np.empty((bands, num_docs), dtype=np.uint64)
    sig = signatures[:, : bands * rows].astype(np.uint64).reshape(num_docs, bands, rows)
    for band in range(bands):
        acc = np.full(num_docs, ((band + 1) * 0x9E3779B97F4A7C15) % (1 << 64), dtype=np.uint64)
        for r in range(rows):
            acc += sig[:, band, r] * (mults[r] | np.uint64(1))
            acc = mix64(acc)
        out[band] = acc
    return out


def content_hash(text: str) -> tuple[int, int]:
    """A 128-bit hash of ``text`` as two unsigned 64-bit ints (collisions: ~2^-64 at 2^32 documents)."""
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()
    return int.from_bytes(digest[:8], "little"), int.from_bytes(digest[8:], "little")


def hash64(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")
