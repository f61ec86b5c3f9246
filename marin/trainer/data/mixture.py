"""Deterministic mixtures: which source, and which of its sequences, fills each slot of each batch.

Slot ``j`` is the ``j``-th training sequence of the run (``step * batch_size + row``). Slots are grouped
into blocks of ``block_size``; in a block the number of slots per source is fixed by the stage's weights
(largest-remainder rounding), and a Feistel permutation keyed by (seed, stage, block) scatters them::

    weights {"web": 0.7, "code": 0.3}, block_size 10:  7 web + 3 code slots per block, order shuffled
    slot j -> ("code", k): the k-th code sequence of the run; k counts code slots in all earlier blocks

``k`` is then mapped through the source's own epoch permutation to a sequence index. Everything is
closed-form in ``j``, so a batch is a pure function of (seed, step) and resuming needs only the step.
Stages change the weights at given steps; blocks restart at each stage start, so a stage switch takes
effect exactly at its step, and within a stage every full block has exactly the apportioned counts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from marin.trainer.data.permutation import FeistelPermutation, mix_seed


@dataclasses.dataclass(frozen=True, kw_only=True)
class MixtureStage:
    """From ``start_step`` on (until the next stage), draw sources in proportion to ``weights``."""

    start_step: int
    weights: dict[str, float]

    def __post_init__(self):
        if self.start_step < 0:
            raise ValueError(f"MixtureStage.start_step must be >= 0, got {self.start_step}")
        if not self.weights or any(w < 0 for w in self.weights.values()) or sum(self.weights.values()) <= 0:
            raise ValueError(f"MixtureStage.weights must be non-negative with a positive sum, got {self.weights}")


def apportion(weights: Sequence[float], total: int) -> np.ndarray:
    """Integer counts summing to ``total`` proportional to ``weights`` (largest remainder; ties to the
    lower index), e.g. ``apportion([0.7, 0.3], 10) == [7, 3]`` and ``apportion([1, 1, 1], 4) == [2, 1, 1]``."""
    w = np.asarray(weights, dtype=np.float64)
    exact = w / w.sum() * total
    counts = np.floor(exact).astype(np.int64)
    remainder = exact - counts
    order = np.lexsort((np.arange(len(w)), -remainder))  # largest remainder first, then lower index
    counts[order[: total - counts.sum()]] += 1
    return counts


class Mixture:
    """Maps global slot indices to (source id, index within that source's slot sequence)."""

    def __init__(
        self, names: Sequence[str], stages: Sequence[MixtureStage], batch_size: int, block_size: int, seed: int
    ):
        if not stages or stages[0].start_step != 0:
            raise ValueError("mixture stages must start with a stage at step 0")
        starts = [s.start_step for s in stages]
        if starts != sorted(set(starts)):
            raise ValueError(f"mixture stage start steps must be strictly increasing, got {starts}")
        for stage in stages:
            unknown = set(stage.weights) - set(names)
            if unknown:
                raise ValueError(f"mixture stage at step {stage.start_step} weights unknown sources {sorted(unknown)}")
        if block_size <= 0:
            raise ValueError(f"mixture block_size must be > 0, got {block_size}")
        self.names = list(names)
        self.block_size, self.seed = block_size, seed
        self.weights = np.array([[s.weights.get(n, 0.0) for n in self.names] for s in stages], dtype=np.float64)
        self.stage_starts = np.array(starts, dtype=np.int64) * batch_size  # in slots
        self._full_counts = np.stack([apportion(w, block_size) for w in self.weights])
        # Slots of each source used by all earlier stages together: [num_stages, num_sources].
        used = [np.zeros(len(self.names), dtype=np.int64)]
        for s in range(len(stages) - 1):
            used.append(used[-1] + self._stage_counts(s, int(self.stage_starts[s + 1] - self.stage_starts[s])))
        self._used_before_stage = np.stack(used)
        self._block_orders: dict[tuple[int, int, int], FeistelPermutation] = {}  # the few blocks in use

    def _stage_counts(self, stage: int, num_slots: int) -> np.ndarray:
        """Slots per source in the first ``num_slots`` slots of a stage (whole blocks only at the end)."""
        full, rest = divmod(num_slots, self.block_size)
        return full * self._full_counts[stage] + (apportion(self.weights[stage], rest) if rest else 0)

    def _block_length(self, stage: int, block: int) -> int:
        if stage + 1 == len(self.stage_starts):
            return self.block_size
        stage_len = int(self.stage_starts[stage + 1] - self.stage_starts[stage])
        return min(self.block_size, stage_len - block * self.block_size)

    def assign(self, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each global slot: the source id and how many earlier slots went to that source."""
        slots = np.asarray(slots, dtype=np.int64)
        stage = np.searchsorted(self.stage_starts, slots, side="right") - 1
        offset = slots - self.stage_starts[stage]
        block, pos = np.divmod(offset, self.block_size)
        source = np.empty_like(slots)
        ordinal = np.empty_like(slots)
        for s, b in sorted(set(zip(stage.tolist(), block.tolist()))):
            sel = (stage == s) & (block == b)
            length = self._block_length(s, b)
            counts = self._full_counts[s] if length == self.block_size else apportion(self.weights[s], length)
            cum = np.concatenate([[0], np.cumsum(counts)])
            shuffled = self._block_order(s, b, length)(pos[sel])
            src = np.searchsorted(cum, shuffled, side="right") - 1
            before = self._used_before_stage[s] + self._stage_counts(s, b * self.block_size)
            source[sel] = src
            ordinal[sel] = before[src] + shuffled - cum[src]
        return source, ordinal

    def _block_order(self, stage: int, block: int, length: int) -> FeistelPermutation:
        """The shuffle of one block's slots; kept while its block is in use (a block spans many steps)."""
        key = (stage, block, length)
        order = self._block_orders.get(key)
        if order is None:
            if len(self._block_orders) >= 8:
                self._block_orders.pop(next(iter(self._block_orders)))
            order = self._block_orders[key] = FeistelPermutation(length, mix_seed(self.seed, stage, block))
        return order


def stage_weights(stages: Sequence[MixtureStage], step: int) -> Mapping[str, float]:
    """The weights in force at ``step``."""
    current = stages[0]
    for stage in stages:
        if stage.start_step <= step:
            current = stage
    return current.weights
