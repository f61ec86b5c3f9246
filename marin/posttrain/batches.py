"""Preference batches: each step's pairs packed into rows, a pure function of the step.

    batches = PairBatches(pairs, seq_len=256, pairs_per_step=16, seed=0, num_steps=100)
    batch = batches.batch(step)   # rows [rows, seq_len]: input_ids, targets, segment_ids, loss_mask, slot
                                  # pairs [16, k]: pair_valid [16, 1] (and ref_logps [16, 2] if precomputed)

Step ``s`` takes pairs ``s * P ... (s + 1) * P - 1`` of an endless stream that visits every usable pair once
per epoch in a fresh Feistel order (the trainer's ``EpochPermutation``): batches depend on (seed, step) only,
so a resumed run sees the batches of an uninterrupted one. A pair is two sequences, prompt + chosen and
prompt + rejected; sequence ``t`` of ``L`` tokens occupies ``L - 1`` positions of a row (inputs ``t[:-1]``,
targets ``t[1:]``), its own segment (attention stays inside it), and ``slot = 2 * pair + side`` on every
position, so the loss can sum log-probabilities per reply with one ``segment_sum``::

    row     [ p p p c c | p p p r | pad ]     a pair packed in one row (c: chosen reply, r: rejected reply)
    slot    [ 0 0 0 0 0 | 1 1 1 1 |  2P ]     2P: padding, summed nowhere
    mask    [ 0 0 1 1 1 | 0 0 1 1 |  0  ]     1 where the target is a reply token

Packing (first fit, longest first, per microbatch) fills rows with whole sequences; ``packing=False`` gives each
sequence a row of its own (the padded layout). Both compute the same log-probabilities (RoPE scores depend on
relative positions only), and the rows per microbatch are fixed for the whole run: the most that any step's
pairs need, found when the batches are built, so one program serves every step. Sequences longer than
``seq_len + 1`` tokens keep their first ``seq_len + 1`` (TRL's ``keep_start`` at ``max_length = seq_len + 1``);
pairs whose prompt alone fills that are left out, counted, as TRL drops them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import numpy as np

from marin.chat.preference_cache import PairCache
from marin.trainer.data.permutation import EpochPermutation, mix_seed

logger = logging.getLogger(__name__)

ROW_KEYS = ("input_ids", "targets", "segment_ids", "loss_mask", "slot")


def pack_rows(lengths: list[int], seq_len: int, packing: bool) -> list[list[int]]:
    """Sequence indices per row: first fit over sequences sorted longest first (each alone if not packing)."""
    if not packing:
        return [[i] for i in range(len(lengths))]
    rows: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        for r, free in enumerate(room):
            if lengths[i] <= free:
                rows[r].append(i)
                room[r] -= lengths[i]
                break
        else:
            rows.append([i])
            room.append(seq_len - lengths[i])
    return rows


def usable_pairs(pairs: PairCache, seq_len: int) -> np.ndarray:
    """Indices of the pairs that keep a reply token on both sides after truncation to ``seq_len + 1`` tokens."""
    lengths = np.minimum(pairs.lengths().min(axis=1), seq_len + 1)
    return np.flatnonzero(pairs.prompt_lengths() < lengths)


class PairBatches:
    """The pairs of a pair cache as fixed-shape training or eval batches (module docstring)."""

    def __init__(
        self,
        pairs: PairCache,
        *,
        seq_len: int,
        pairs_per_step: int,
        seed: int = 0,
        num_steps: int | None = None,
        num_microbatches: int = 1,
        packing: bool = True,
        reference_logps: np.ndarray | None = None,
        shuffle: bool = True,
    ):
        if pairs_per_step % num_microbatches:
            raise ValueError(f"pairs per step ({pairs_per_step}) must be a multiple of num_microbatches")
        self.pairs, self.seq_len, self.pairs_per_step = pairs, seq_len, pairs_per_step
        self.num_microbatches, self.packing, self.reference_logps = num_microbatches, packing, reference_logps
        self._seq_lengths = np.minimum(pairs.lengths(), seq_len + 1) - 1  # positions each side occupies
        self.usable = usable_pairs(pairs, seq_len)
        self.dropped = len(pairs) - len(self.usable)
        if self.dropped:
            logger.warning("%s: %d pairs left out, their prompt fills %d tokens", pairs.url, self.dropped, seq_len + 1)
        if len(self.usable) == 0:
            raise ValueError(f"{pairs.url}: no pair has a reply within its first {seq_len + 1} tokens")
        self._order = EpochPermutation(len(self.usable), mix_seed(seed, len(self.usable))) if shuffle else None
        steps = num_steps if num_steps is not None else self.num_eval_steps
        self.rows_per_microbatch = max((self._rows_needed(step) for step in range(steps)), default=1)

    @property
    def num_eval_steps(self) -> int:
        """Steps that cover every usable pair once, in order (the last one padded with invalid pairs)."""
        return -(-len(self.usable) // self.pairs_per_step)

    @property
    def rows(self) -> int:
        return self.rows_per_microbatch * self.num_microbatches

    def pair_indices(self, step: int) -> np.ndarray:
        """Cache indices of step ``step``'s pairs; -1 marks padding past the end of an unshuffled pass."""
        ordinals = step * self.pairs_per_step + np.arange(self.pairs_per_step)
        if self._order is not None:
            return self.usable[self._order(ordinals)]
        return np.where(ordinals < len(self.usable), self.usable[np.minimum(ordinals, len(self.usable) - 1)], -1)

    def _groups(self, step: int) -> Iterator[np.ndarray]:
        per = self.pairs_per_step // self.num_microbatches
        indices = self.pair_indices(step)
        for m in range(self.num_microbatches):
            yield indices[m * per : (m + 1) * per]

    def _rows_needed(self, step: int) -> int:
        needed = 0
        for group in self._groups(step):
            lengths = [int(self._seq_lengths[i, side]) for i in group if i >= 0 for side in (0, 1)]
            needed = max(needed, len(pack_rows(lengths, self.seq_len, self.packing)))
        return max(needed, 1)

    def batch(self, step: int) -> dict[str, np.ndarray]:
        """The batch of step ``step``: microbatch ``m``'s rows and pairs are the ``m``-th equal slices."""
        parts = [self._microbatch(group) for group in self._groups(step)]
        return {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}

    def _microbatch(self, group: np.ndarray) -> dict[str, np.ndarray]:
        rows, seq = self.rows_per_microbatch, self.seq_len
        sentinel = 2 * len(group)
        out = {key: np.zeros((rows, seq), np.int32) for key in ROW_KEYS}
        out["loss_mask"] = np.zeros((rows, seq), np.float32)
        out["slot"][:] = sentinel
        sequences = []  # (slot, ids, prompt length)
        for k, index in enumerate(group):
            if index >= 0:
                chosen, rejected, prompt_len = self.pairs.pair(int(index))
                sequences += [(2 * k, chosen[: seq + 1], prompt_len), (2 * k + 1, rejected[: seq + 1], prompt_len)]
        layout = pack_rows([len(ids) - 1 for _, ids, _ in sequences], seq, self.packing)
        if len(layout) > rows:
            raise ValueError(f"pairs need {len(layout)} rows, more than the {rows} fixed for this run")
        for r, members in enumerate(layout):
            at = 0
            for segment, i in enumerate(members):
                slot, ids, prompt_len = sequences[i]
                n = len(ids) - 1
                span = slice(at, at + n)
                out["input_ids"][r, span], out["targets"][r, span] = ids[:-1], ids[1:]
                out["segment_ids"][r, span], out["slot"][r, span] = segment, slot
                out["loss_mask"][r, span] = np.arange(1, n + 1) >= prompt_len  # target j is token j + 1
                at += n
            out["segment_ids"][r, at:] = len(members)  # padding: a segment of its own
        out["pair_valid"] = (group >= 0).astype(np.float32)[:, None]
        if self.reference_logps is not None:
            out["ref_logps"] = np.where(group[:, None] >= 0, self.reference_logps[np.maximum(group, 0)], 0.0).astype(
                np.float32
            )
        return out
