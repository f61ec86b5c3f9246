"""What an RL iteration reports: rewards per environment, group statistics, the update's clip fraction, KL
and entropy, timings; and the sample rollouts the data browser shows.

Metric names (``metrics.jsonl``, W&B; the step is the number of completed iterations):

==================================  ===================================================================
``rl/reward_mean``, ``rl/reward_std``     over every kept completion of the iteration
``rl/<env>/reward_mean``, ``_std``        per environment
``rl/zero_variance_groups``               fraction of kept groups whose rewards were all equal
``rl/completion_length``                  mean completion tokens (end-of-turn included)
``rl/clip_fraction``                      completion tokens whose ratio was clipped (TRL's region mean),
                                          over every optimizer step; ``rl/clip_low``, ``rl/clip_high``
``rl/kl``, ``rl/entropy``, ``rl/ratio``   per completion token, averaged over the optimizer steps
``rl/first_step_ratio``                   the ratio on the iteration's first step: with no lag, the trainer's
                                          over the engine's probability of the same tokens (1 + float noise)
``rl/skipped/<reason>``                   groups dropped (``reward_error``, ``empty_completion``);
                                          ``rl/skipped/long_prompt``: records left out of the prompt sets
``rl/empty_completions``, ``rl/policy_lag``  completions with no text; iterations between sampling and use
``train/loss``, ``train/grad_norm``, ``train/learning_rate``   as training logs them (mean over steps)
``time/rollout_s``, ``time/update_s``, ``throughput/rollout_tokens_per_s``
==================================  ===================================================================
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np

from marin.posttrain.rl.batch import ScoredGroups
from marin.posttrain.rl.rollout import Rollout
from marin.storage import join
from marin.storage.records import write_records


class IterationMetrics:
    """Collects one iteration's numbers; ``finish`` fetches the update's device metrics (the one host sync
    of the update) and returns the record to log."""

    def __init__(self, iteration: int, envs: Mapping[str, Any]):
        self.iteration, self.envs = iteration, envs
        self.record: dict[str, float] = {}
        self.updates: list[dict] = []
        self.completion_tokens = 0
        self._update_start: float | None = None

    def add_timing(self, name: str, seconds: float) -> None:
        self.record[f"time/{name}"] = seconds

    def add_counts(self, counts: Mapping[str, float]) -> None:
        self.record.update({f"rl/{k}": float(v) for k, v in counts.items()})

    def add_rollouts(self, scored: ScoredGroups, long_prompts: Mapping[str, int]) -> None:
        rollouts = scored.rollouts
        rewards = np.asarray([r.reward for r in rollouts], np.float64)
        self.record["rl/reward_mean"] = float(rewards.mean()) if rollouts else float("nan")
        self.record["rl/reward_std"] = float(rewards.std()) if rollouts else float("nan")
        for env in self.envs:
            mine = np.asarray([r.reward for r in rollouts if r.request.env == env], np.float64)
            if mine.size:
                self.record[f"rl/{env}/reward_mean"], self.record[f"rl/{env}/reward_std"] = mine.mean(), mine.std()
        self.record["rl/zero_variance_groups"] = scored.zero_variance / scored.groups if scored.groups else 1.0
        self.completion_tokens = sum(len(r.tokens) for r in rollouts)
        self.record["rl/completion_length"] = self.completion_tokens / len(rollouts) if rollouts else 0.0
        self.record["rl/policy_lag"] = float(np.mean([self.iteration - r.policy_version for r in rollouts] or [0]))
        self.record["rl/empty_completions"] = float(scored.empty_completions)
        for reason in ("reward_error", "empty_completion"):
            self.record[f"rl/skipped/{reason}"] = float(scored.skipped.get(reason, 0))
        self.record["rl/skipped/long_prompt"] = float(sum(long_prompts.values()))
        self._update_start = time.perf_counter()

    def add_update(self, metrics: dict) -> None:
        self.updates.append(metrics)

    def finish(self) -> dict[str, float]:
        if self.updates:
            steps = jax.device_get(self.updates)  # waits for the last update
            total = {k: float(sum(s[k] for s in steps)) for k in steps[0]}
            tokens = max(total["tokens"], 1.0)
            self.record.update(
                {
                    "train/loss": total["loss"] / len(steps),
                    "train/grad_norm": total["grad_norm"] / len(steps),
                    "train/learning_rate": float(steps[-1]["learning_rate"]),
                    "rl/clip_low": total["clipped_low"] / tokens,
                    "rl/clip_high": total["clipped_high"] / tokens,
                    "rl/clip_fraction": (total["clipped_low"] + total["clipped_high"]) / tokens,
                    "rl/kl": total["kl"] / tokens,
                    "rl/entropy": total["entropy"] / tokens,
                    "rl/ratio": total["ratio"] / tokens,
                    "rl/first_step_ratio": float(steps[0]["ratio"]) / max(float(steps[0]["tokens"]), 1.0),
                }
            )
            for name in ("router_aux_loss", "router_z_loss"):  # a MoE policy's (rl.update.ROUTER_METRICS)
                if name in total:
                    self.record[f"train/{name}"] = total[name] / len(steps)
        if self._update_start is not None:
            self.record["time/update_s"] = time.perf_counter() - self._update_start
        seconds = self.record.get("time/rollout_s") or self.record.get("time/rollout_wait_s")
        if seconds:
            self.record["throughput/rollout_tokens_per_s"] = self.completion_tokens / seconds
        return {k: float(v) for k, v in self.record.items()}


def write_samples(
    output_path: str,
    iteration: int,
    rollouts: Sequence[Rollout],
    records: Mapping[tuple[str, str], Mapping],
    groups: int,
) -> str:
    """``rollouts/iteration-<k>.jsonl``: the first ``groups`` groups of the iteration (prompt, completion,
    reward, advantage), for the data browser."""
    keep = sorted({r.request.group for r in rollouts})[:groups]
    rows = [
        {
            "iteration": iteration + 1,
            "env": r.request.env,
            "record_id": r.request.record_id,
            "group": r.request.group,
            "sample": r.request.sample,
            "prompt": records[r.request.env, r.request.record_id]["prompt"],
            "completion": r.text,
            "reward": r.reward,
            "advantage": r.advantage,
            "completion_tokens": len(r.tokens),
            "finish_reason": r.finish_reason,
            "seed": r.request.seed,
        }
        for r in rollouts
        if r.request.group in keep
    ]
    url = join(output_path, "rollouts", f"iteration-{iteration + 1:06d}.jsonl")
    write_records(url, rows)
    return url
