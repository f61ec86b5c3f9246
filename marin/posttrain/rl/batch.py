"""From sampled completions to a training batch: rewards, group advantages, and padded arrays.

    scored = score_groups(rollouts, envs, num_generations=8, scale="group")   # rewards, advantages, skips
    batch = make_batch(scored.rollouts, rows=16 * 8, seq_len=256)              # numpy arrays [rows, length]

A row is one completion after its prompt: ``input_ids`` the prompt and completion tokens, ``targets`` the
next token at each position, ``mask`` 1 where the target is a completion token (its end-of-turn token
included), ``old_logp`` the rollout policy's log-probability of that target, ``advantages`` the row's
advantage, ``rows`` 1 (0 on the padding rows that give every batch of an iteration the same shape, so the
update compiles once per length bucket).

A group that cannot be scored (a reward error or an empty completion under ``"skip"``) is dropped whole and
counted by reason: its remaining completions would have a baseline of fewer samples than the others'.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from marin.environments import Environment, RewardError
from marin.posttrain.rl.loss import group_advantages
from marin.posttrain.rl.rollout import Rollout

LENGTH_BUCKET = 32


@dataclasses.dataclass
class ScoredGroups:
    rollouts: list[Rollout]
    """The kept completions, rewards and advantages set, in (group, sample) order."""
    groups: int
    zero_variance: int
    """Kept groups whose rewards were all equal (every advantage 0: nothing to learn from them)."""
    skipped: collections.Counter
    """Dropped groups by reason ("reward_error", "empty_completion")."""
    empty_completions: int
    """Completions with no token before the end of turn (scored, skipped or refused per environment)."""


class EmptyCompletion(ValueError):
    """A completion with no tokens in an environment with ``on_empty_completion="raise"``."""


def _score_one(rollout: Rollout, env: Environment, record: Mapping) -> float | str:
    """The rollout's reward, or the reason its group is skipped; raises under the "raise" policies."""
    request = rollout.request
    if not rollout.text.strip():
        policy = env.config.on_empty_completion
        if policy == "raise":
            raise EmptyCompletion(
                f"environment {env.name!r}, record {request.record_id!r}: sample {request.sample} of iteration "
                f"{request.iteration} is an empty completion (on_empty_completion='raise')"
            )
        if policy == "skip":
            return "empty_completion"
    try:
        return env.score(record, rollout.text)
    except RewardError:
        if env.config.on_reward_error == "raise":
            raise
        return "reward_error"


def score_groups(
    rollouts: Sequence[Rollout],
    envs: Mapping[str, Environment],
    records: Mapping[tuple[str, str], Mapping],
    *,
    num_generations: int,
    scale: str,
) -> ScoredGroups:
    """Reward every completion, drop unscorable groups, and set group-normalized advantages."""
    by_group: dict[int, list[Rollout]] = collections.defaultdict(list)
    for r in rollouts:
        by_group[r.request.group].append(r)
    kept, rewards, skipped = [], [], collections.Counter()
    empty = sum(not r.text.strip() for r in rollouts)
    for group in sorted(by_group):
        members = sorted(by_group[group], key=lambda r: r.request.sample)
        if len(members) != num_generations:
            raise RuntimeError(f"group {group} has {len(members)} completions, expected {num_generations}")
        scores = [_score_one(r, envs[r.request.env], records[r.request.env, r.request.record_id]) for r in members]
        reasons = [s for s in scores if isinstance(s, str)]
        if reasons:
            skipped[reasons[0]] += 1
            continue
        kept.append(members)
        rewards.append(scores)
    if not kept:
        return ScoredGroups([], 0, 0, skipped, empty)
    advantages, zero = group_advantages(np.asarray(rewards), scale)
    for members, group_rewards, group_advantage in zip(kept, rewards, advantages):
        for r, reward, advantage in zip(members, group_rewards, group_advantage):
            r.reward, r.advantage = float(reward), float(advantage)
    return ScoredGroups([r for members in kept for r in members], len(kept), int(zero.sum()), skipped, empty)


def make_batch(rollouts: Sequence[Rollout], *, rows: int, seq_len: int) -> dict[str, np.ndarray]:
    """Padded arrays for ``rows`` rows (``len(rollouts)`` real ones); the length is the longest prompt plus
    completion rounded up to a multiple of 32 (at most ``seq_len``)."""
    if len(rollouts) > rows:
        raise ValueError(f"{len(rollouts)} rollouts do not fit a batch of {rows} rows")
    longest = max((len(r.request.prompt) + len(r.tokens) for r in rollouts), default=1)
    length = min(-(-longest // LENGTH_BUCKET) * LENGTH_BUCKET, seq_len)
    batch = {
        "input_ids": np.zeros((rows, length), np.int32),
        "targets": np.zeros((rows, length), np.int32),
        "mask": np.zeros((rows, length), np.float32),
        "old_logp": np.zeros((rows, length), np.float32),
        "advantages": np.zeros(rows, np.float32),
        "rows": np.zeros(rows, np.float32),
    }
    for i, r in enumerate(rollouts):
        sequence = [*r.request.prompt, *r.tokens]
        if len(sequence) > seq_len:
            raise ValueError(f"rollout {r.request.key}: {len(sequence)} tokens exceed the context of {seq_len}")
        n, first = len(sequence), len(r.request.prompt) - 1  # position predicting the first completion token
        batch["input_ids"][i, :n] = sequence
        batch["targets"][i, : n - 1] = sequence[1:]
        batch["mask"][i, first : n - 1] = 1.0
        batch["old_logp"][i, first : n - 1] = r.logprobs
        batch["advantages"][i] = r.advantage
        batch["rows"][i] = 1.0
    return batch
