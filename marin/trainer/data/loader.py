"""Batches as a pure function of (seed, step): packing, mixing and prefetching.

Sequence ``i`` of a source is the window of tokens ``[i * seq_len, (i + 1) * seq_len + 1)``; its first
``seq_len`` tokens are inputs, the last ``seq_len`` targets. Documents inside a window get their own
segment id, and a target that is the first token of the next document is masked::

    window   [ a  b  EOS  c  d  e ]          seq_len 5, a new document starts at c
    inputs   [ a  b  EOS  c  d ]   segment_ids [0 0 0 1 1]
    targets  [ b EOS  c   d  e ]   loss_mask   [1 1 0 1 1]     (EOS -> c crosses documents)

No document is cut or padded: the stream is dense, and attention never crosses a segment boundary.
A source that stores a per-token loss mask (an SFT cache: 1 on assistant tokens) multiplies in its mask
of the targets, so only assistant targets count, on both sides of a sequence boundary::

    window   [ u  u  a  a  EOS | u ]       stored mask [0 0 1 1 0 0]
    targets  [ u  a  a EOS  u ]            loss_mask   [0 1 1 0 0]
``TrainBatches.batch(step)`` picks each row's source and sequence through the ``Mixture`` and the
source's epoch permutation; ``Prefetcher`` builds upcoming batches on a background thread.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
from collections.abc import Callable, Iterator, Mapping

import numpy as np

from marin.identity import runtime_field
from marin.trainer.data.mixture import Mixture, MixtureStage
from marin.trainer.data.permutation import EpochPermutation, mix_seed
from marin.trainer.data.source import TokenSource, TokenSourceConfig

logger = logging.getLogger(__name__)

Batch = dict[str, np.ndarray]
"""``input_ids``, ``targets``, ``segment_ids`` (int32) and ``loss_mask`` (float32), each [batch, seq_len]."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class DataConfig:
    train: dict[str, TokenSourceConfig]
    """Named training sources."""
    stages: tuple[MixtureStage, ...] = ()
    """Mixture weights by step; the first stage starts at step 0. Empty: equal weights throughout."""
    validation: dict[str, TokenSourceConfig] = dataclasses.field(default_factory=dict)
    """Named held-out sources, evaluated in order (no shuffling)."""
    seed: int = 0
    """Keys the shuffles and the mixture; same seed and step, same batch."""
    mixture_block_size: int = 2048
    """Slots per mixture block (exact proportions hold per block)."""
    prefetch: int = runtime_field(2)
    """Batches built ahead of the step on a background thread (0: build inline)."""

    def __post_init__(self):
        if not self.train:
            raise ValueError("DataConfig.train must name at least one source")
        # An experiment may wrap stages in a placeholder (the executor's versioned()); they are checked
        # when the executor instantiates the config with the concrete tuple.
        stages = self.stages if isinstance(self.stages, (tuple, list)) else ()
        for stage in stages:
            unknown = set(stage.weights) - set(self.train)
            if unknown:
                raise ValueError(
                    f"DataConfig.stages[start_step={stage.start_step}] names unknown sources {sorted(unknown)}"
                )
        if stages and stages[0].start_step != 0:
            raise ValueError(f"DataConfig.stages must begin at step 0, got {stages[0].start_step}")
        if isinstance(self.mixture_block_size, int) and self.mixture_block_size <= 0:
            raise ValueError(f"DataConfig.mixture_block_size must be > 0, got {self.mixture_block_size}")
        if self.prefetch < 0:
            raise ValueError(f"DataConfig.prefetch must be >= 0, got {self.prefetch}")

    @property
    def resolved_stages(self) -> tuple[MixtureStage, ...]:
        return self.stages or (MixtureStage(start_step=0, weights={name: 1.0 for name in self.train}),)


def num_sequences(source: TokenSource, seq_len: int) -> int:
    return max(0, (source.num_tokens - 1) // seq_len)


Window = tuple[np.ndarray, np.ndarray, np.ndarray | None]
"""Tokens, segment ids and the source's stored loss mask (None: every token counts), each [seq_len + 1]."""


def pack_window(source: TokenSource, index: int, seq_len: int) -> Window:
    """Tokens, segment ids and stored mask of sequence ``index`` (segments count document starts)."""
    start = index * seq_len
    tokens = source.read(start, seq_len + 1)
    starts = source.doc_starts(start + 1, start + seq_len + 1) - start  # relative, excluding position 0
    segments = np.searchsorted(starts, np.arange(seq_len + 1), side="right").astype(np.int32)
    read_mask = getattr(source, "read_mask", None)  # optional part of the protocol: SFT sources
    return tokens, segments, read_mask(start, seq_len + 1) if read_mask else None


def assemble(windows: list[Window]) -> Batch:
    tokens = np.stack([w[0] for w in windows])  # [batch, seq_len + 1]
    segments = np.stack([w[1] for w in windows])
    loss_mask = (segments[:, 1:] == segments[:, :-1]).astype(np.float32)
    if any(w[2] is not None for w in windows):
        stored = np.stack([np.ones(len(w[0]), np.float32) if w[2] is None else w[2] for w in windows])
        loss_mask *= stored[:, 1:]  # a target counts if it is trained (assistant) and within its document
    return {
        "input_ids": tokens[:, :-1],
        "targets": tokens[:, 1:],
        "segment_ids": segments[:, :-1],
        "loss_mask": loss_mask,
    }


class TrainBatches:
    """The training stream: ``batch(step)`` is determined by (sources, stages, seed, step) alone."""

    def __init__(self, sources: Mapping[str, TokenSource], config: DataConfig, *, seq_len: int, batch_size: int):
        self.names = list(sources)
        self.sources = [sources[n] for n in self.names]
        self.seq_len, self.batch_size = seq_len, batch_size
        counts = [num_sequences(s, seq_len) for s in self.sources]
        for name, count in zip(self.names, counts):
            if count == 0:
                raise ValueError(f"training source {name!r} has fewer than seq_len + 1 = {seq_len + 1} tokens")
        self.mixture = Mixture(self.names, config.resolved_stages, batch_size, config.mixture_block_size, config.seed)
        self._orders = [EpochPermutation(n, mix_seed(config.seed, i, n)) for i, n in enumerate(counts)]

    def locate(self, step: int, rows: slice | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Source id and sequence index of each row of ``batch(step)``."""
        slots = step * self.batch_size + np.arange(self.batch_size)[rows or slice(None)]
        source, ordinal = self.mixture.assign(slots)
        index = np.empty_like(ordinal)
        for s in np.unique(source):
            sel = source == s
            index[sel] = self._orders[s](ordinal[sel])
        return source, index

    def batch(self, step: int, rows: slice | None = None) -> Batch:
        """The batch of optimizer step ``step`` (0-based); ``rows`` selects this host's slice of it."""
        source, index = self.locate(step, rows)
        return assemble([pack_window(self.sources[s], int(i), self.seq_len) for s, i in zip(source, index)])


def eval_batches(source: TokenSource, *, seq_len: int, batch_size: int, max_sequences: int) -> Iterator[Batch]:
    """The first ``max_sequences`` sequences in stream order; a short last batch is padded with
    fully masked rows so every batch has the same shape (no recompilation)."""
    count = min(num_sequences(source, seq_len), max_sequences)
    for lo in range(0, count, batch_size):
        windows = [pack_window(source, i, seq_len) for i in range(lo, min(lo + batch_size, count))]
        batch = assemble(windows)
        pad = batch_size - len(windows)
        if pad:
            batch = {k: np.concatenate([v, np.zeros((pad, seq_len), v.dtype)]) for k, v in batch.items()}
        yield batch


class Prefetcher:
    """Builds ``make(step)`` for steps ``start, start + 1, ...`` on a daemon thread, ``depth`` ahead."""

    def __init__(self, make: Callable[[int], Batch], start: int, stop: int, depth: int):
        self._make, self._next = make, start
        self._depth = depth
        if depth == 0:
            return
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(start, stop), daemon=True, name="prefetch")
        self._thread.start()

    def _run(self, start: int, stop: int) -> None:
        for step in range(start, stop):
            try:
                item = (step, self._make(step), None)
            except Exception as e:  # handed to the consumer, which re-raises it
                item = (step, None, e)
            while not self._stop.is_set():
                try:
                    self._queue.put(item, timeout=0.1)
                    break
                except queue.Full:
                    continue
            if self._stop.is_set() or item[2] is not None:
                return

    def get(self, step: int) -> Batch:
        if self._depth == 0:
            return self._make(step)
        got_step, batch, error = self._queue.get()
        if error is not None:
            raise error
        if got_step != step:
            raise RuntimeError(f"prefetcher out of order: wanted step {step}, got {got_step}")
        return batch

    def close(self) -> None:
        if self._depth:
            self._stop.set()
            self._thread.join(timeout=5)
