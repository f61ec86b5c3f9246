"""GRPO learns: on a task whose optimum is known (write the letter "o"), the reward rises through the engine's
rollouts and the policy update; the same run with the advantage's sign flipped makes it fall."""

import json

import pytest

from marin.posttrain.rl import batch as batch_module
from marin.posttrain.rl.loop import train_rl
from tests.posttrain.rl.rl_setup import rl_config

ITERATIONS = 8


def _rewards(output: str) -> list[float]:
    with open(f"{output}/metrics.jsonl") as f:
        return [json.loads(line)["rl/reward_mean"] for line in f]


def _lr(config, lr):
    import dataclasses

    return dataclasses.replace(config, optimizer=dataclasses.replace(config.optimizer, learning_rate=lr))


@pytest.mark.slow  # two RL runs of a tiny model; most of it is compiling the engine's programs once
@pytest.mark.timeout(600)
def test_reward_rises_and_a_flipped_advantage_makes_it_fall(tmp_path, monkeypatch):
    config = _lr(rl_config(tmp_path, str(tmp_path / "up"), num_iterations=ITERATIONS), 1e-2)
    result = train_rl(config)
    up = _rewards(config.output_path)
    assert result.iterations == ITERATIONS and len(up) == ITERATIONS
    # measured: 0.03 -> 0.25 in 8 iterations (the random policy writes "o" in 3% of its characters)
    assert sum(up[-2:]) / 2 > 2.5 * sum(up[:2]) / 2, up
    metrics = [json.loads(line) for line in open(f"{config.output_path}/metrics.jsonl")]
    assert all(0 <= m["rl/clip_fraction"] <= 1 and m["rl/entropy"] > 0 for m in metrics)
    # the engine's log-probabilities are the trainer's for the same weights and tokens
    assert all(m["rl/first_step_ratio"] == pytest.approx(1.0, abs=1e-3) for m in metrics)
    samples = [json.loads(line) for line in open(f"{config.output_path}/rollouts/iteration-000001.jsonl")]
    assert len(samples) == 4 * 8 and {"prompt", "completion", "reward", "advantage"} <= set(samples[0])

    flipped = batch_module.group_advantages
    monkeypatch.setattr(batch_module, "group_advantages", lambda r, s: (-flipped(r, s)[0], flipped(r, s)[1]))
    config = _lr(rl_config(tmp_path, str(tmp_path / "down"), num_iterations=ITERATIONS), 1e-2)
    train_rl(config)
    down = _rewards(config.output_path)
    assert down[0] == up[0]  # the same first rollouts: same seeds, same policy
    assert sum(down[-2:]) / 2 < 0.6 * sum(down[:2]) / 2, down
