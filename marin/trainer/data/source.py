"""Where training tokens come from: the ``TokenSource`` protocol and its first implementations.

A token source is one flat stream of token ids, cut into documents (each ending with EOS)::

    stream:     [ 7 12 9 0 | 4 4 31 8 0 | 5 0 ]      0 = EOS
    doc starts:   0          4            9
    source.num_tokens == 11;  source.read(3, 4) -> [0 4 4 31];  source.doc_starts(2, 10) -> [4 9]

That is all the loader needs: sequences are fixed windows of the stream, and document starts become
segment ids so packed documents never attend to each other. The token cache of issue 5 implements the
same protocol (range reads over fsspec); here there is an in-memory source, a ``.npy`` directory format
(memory-mapped locally) and a synthetic learnable source for tests and benchmarks.

Sources are chosen in configs by ``type`` (a draccus choice registry): ``{"type": "numpy", "path": ...}``.
"""

from __future__ import annotations

import dataclasses
import io
import json
from typing import Protocol, runtime_checkable

import draccus
import numpy as np

from marin.storage import exists, is_local, join, open_url, read_bytes, write_atomic
from marin.storage.paths import local_path

EOS = 0
"""The synthetic source's end-of-document id (real caches record theirs in their ledger)."""


@runtime_checkable
class TokenSource(Protocol):
    """Random access to one tokenized corpus. Implementations must be deterministic and thread-safe."""

    @property
    def num_tokens(self) -> int:
        """Length of the token stream."""
        ...

    @property
    def num_bytes(self) -> int | None:
        """UTF-8 bytes of the text the stream encodes (for bits-per-byte), or None if unknown."""
        ...

    def read(self, start: int, length: int) -> np.ndarray:
        """Tokens ``[start, start + length)`` as int32; IndexError if the range leaves the stream."""
        ...

    def doc_starts(self, start: int, stop: int) -> np.ndarray:
        """Sorted int64 positions ``p`` with ``start <= p < stop`` at which a document begins."""
        ...

    # Optional: ``read_mask(start, length) -> np.ndarray | None``, the stored loss mask of those tokens
    # (1 = a trained target, e.g. an assistant token of an SFT cache). The loader multiplies it into its
    # loss mask; a source without the method, or returning None, trains on every target.


class ArrayTokenSource:
    """A token source over two arrays (in memory or memory-mapped): tokens and document start offsets."""

    def __init__(
        self, tokens: np.ndarray, doc_starts: np.ndarray, num_bytes: int | None = None, mask: np.ndarray | None = None
    ):
        if tokens.ndim != 1 or doc_starts.ndim != 1:
            raise ValueError(f"tokens and doc_starts must be 1-D, got {tokens.shape} and {doc_starts.shape}")
        if mask is not None and mask.shape != tokens.shape:
            raise ValueError(f"mask must have the tokens' shape {tokens.shape}, got {mask.shape}")
        self._mask = mask
        if len(doc_starts) and (doc_starts[0] != 0 or np.any(np.diff(doc_starts) <= 0)):
            raise ValueError("doc_starts must begin at 0 and be strictly increasing")
        self._tokens = tokens
        self._doc_starts = np.asarray(doc_starts, dtype=np.int64)
        self._num_bytes = num_bytes

    @property
    def num_tokens(self) -> int:
        return int(self._tokens.shape[0])

    @property
    def num_bytes(self) -> int | None:
        return self._num_bytes

    def read(self, start: int, length: int) -> np.ndarray:
        if start < 0 or length < 0 or start + length > self.num_tokens:
            raise IndexError(f"read({start}, {length}) outside a stream of {self.num_tokens} tokens")
        return np.asarray(self._tokens[start : start + length], dtype=np.int32)

    def doc_starts(self, start: int, stop: int) -> np.ndarray:
        lo, hi = np.searchsorted(self._doc_starts, [start, stop], side="left")
        return self._doc_starts[lo:hi]

    def read_mask(self, start: int, length: int) -> np.ndarray | None:
        if self._mask is None:
            return None
        if start < 0 or length < 0 or start + length > self.num_tokens:
            raise IndexError(f"read_mask({start}, {length}) outside a stream of {self.num_tokens} tokens")
        return np.asarray(self._mask[start : start + length], dtype=np.float32)


def documents_to_source(documents: list[np.ndarray] | list[list[int]], eos: int = EOS) -> ArrayTokenSource:
    """Concatenate documents, each followed by ``eos``."""
    lengths = np.array([len(d) + 1 for d in documents], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    tokens = np.concatenate([np.append(np.asarray(d, dtype=np.int64), eos) for d in documents])
    return ArrayTokenSource(tokens.astype(np.int32), starts)


# ----------------------------------------------------------------------------------------------------------
# The .npy directory format:  <path>/tokens.npy, <path>/doc_starts.npy, <path>/source.json


def write_numpy_source(path: str, source: TokenSource) -> None:
    """Write any token source as a ``numpy`` source directory (smallest unsigned dtype that fits)."""
    tokens = source.read(0, source.num_tokens)
    dtype = np.uint16 if tokens.size == 0 or tokens.max() < 2**16 else np.uint32
    for name, array in (
        ("tokens.npy", tokens.astype(dtype)),
        ("doc_starts.npy", source.doc_starts(0, source.num_tokens)),
    ):
        buffer = io.BytesIO()
        np.save(buffer, array)
        write_atomic(join(path, name), buffer.getvalue())
    meta = {"format": 1, "num_tokens": source.num_tokens, "num_bytes": source.num_bytes}
    write_atomic(join(path, "source.json"), json.dumps(meta))


def load_numpy_source(path: str) -> ArrayTokenSource:
    """Memory-map a ``numpy`` source directory locally; elsewhere read it whole (small sets only)."""
    meta = json.loads(read_bytes(join(path, "source.json")))

    def load(name: str) -> np.ndarray:
        url = join(path, name)
        if is_local(url):
            return np.load(local_path(url), mmap_mode="r")
        with open_url(url, "rb") as f:
            return np.load(io.BytesIO(f.read()))

    return ArrayTokenSource(load("tokens.npy"), np.asarray(load("doc_starts.npy")), meta.get("num_bytes"))


# ----------------------------------------------------------------------------------------------------------
# Configs


@dataclasses.dataclass(frozen=True, kw_only=True)
class TokenSourceConfig(draccus.ChoiceRegistry):
    """A token source chosen by ``type``; ``build()`` opens it."""

    def build(self) -> TokenSource:
        raise NotImplementedError


@TokenSourceConfig.register_subclass("numpy")
@dataclasses.dataclass(frozen=True, kw_only=True)
class NumpySourceConfig(TokenSourceConfig):
    path: str
    """A directory written by ``write_numpy_source``."""

    def __post_init__(self):
        if not self.path:
            raise ValueError("NumpySourceConfig.path must be set")

    def build(self) -> TokenSource:
        if not exists(join(self.path, "source.json")):
            raise FileNotFoundError(f"NumpySourceConfig.path={self.path!r} holds no source.json")
        return load_numpy_source(self.path)


@TokenSourceConfig.register_subclass("synthetic")
@dataclasses.dataclass(frozen=True, kw_only=True)
class SyntheticSourceConfig(TokenSourceConfig):
    """Learnable documents: each is an arithmetic progression ``start + i * stride`` modulo the vocab
    (ids 1..vocab_size-1; 0 is EOS), with ``noise`` of the tokens replaced at random. A model that has
    seen two tokens of a document can predict the rest, so the loss falls far below ``ln(vocab_size)``."""

    vocab_size: int
    num_tokens: int
    seed: int = 0
    max_stride: int = 4
    min_doc_len: int = 16
    max_doc_len: int = 256
    noise: float = 0.05

    def __post_init__(self):
        for name in ("vocab_size", "num_tokens", "max_stride", "min_doc_len"):
            if getattr(self, name) < (3 if name == "vocab_size" else 1):
                raise ValueError(f"SyntheticSourceConfig.{name} too small: {getattr(self, name)}")
        if self.max_doc_len < self.min_doc_len:
            raise ValueError(
                f"SyntheticSourceConfig.max_doc_len ({self.max_doc_len}) < min_doc_len ({self.min_doc_len})"
            )
        if not 0 <= self.noise < 1:
            raise ValueError(f"SyntheticSourceConfig.noise must be in [0, 1), got {self.noise}")

    def build(self) -> TokenSource:
        rng = np.random.default_rng(self.seed)
        n_docs = self.num_tokens // self.min_doc_len + 1
        lengths = rng.integers(self.min_doc_len, self.max_doc_len + 1, size=n_docs)  # content + EOS
        ends = np.cumsum(lengths)
        lengths = lengths[: int(np.searchsorted(ends, self.num_tokens)) + 1]
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        doc = np.repeat(np.arange(len(lengths)), lengths)  # document index of every position
        offset = np.arange(doc.size) - starts[doc]  # position within its document
        first = rng.integers(0, self.vocab_size - 1, size=len(lengths))
        stride = rng.integers(1, self.max_stride + 1, size=len(lengths))
        tokens = (first[doc] + offset * stride[doc]) % (self.vocab_size - 1) + 1
        noisy = rng.random(doc.size) < self.noise
        tokens[noisy] = rng.integers(1, self.vocab_size, size=int(noisy.sum()))
        tokens[starts[1:] - 1] = EOS
        tokens[-1] = EOS
        tokens, starts = tokens[: self.num_tokens], starts[starts < self.num_tokens]
        return ArrayTokenSource(tokens.astype(np.int32), starts.astype(np.int64))
