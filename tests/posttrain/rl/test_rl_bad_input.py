"""Bad input at run time is named or counted, never a silent zero reward: a prompt longer than the context,
an empty completion, a reward that raises; and the pieces of an iteration that must be pure functions."""

import json
import math

import pytest

from marin.chat import ChatTokenizer
from marin.environments import EnvironmentConfig, RewardError, register_reward
from marin.environments.rewards import REWARDS
from marin.posttrain.rl.batch import EmptyCompletion, make_batch, score_groups
from marin.posttrain.rl.loop import load_prompts
from marin.posttrain.rl.rollout import Rollout, RolloutRequest, plan_iteration, prompt_counts, rollout_seed
from tests.posttrain.rl.rl_setup import make_policy


@pytest.fixture(scope="module")
def chat(tmp_path_factory):
    _, tokenizer = make_policy(tmp_path_factory.mktemp("policy"))
    return ChatTokenizer.load(tokenizer)


def _env(tmp_path, rows, **options):
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return EnvironmentConfig(prompts=str(path), **options).build("math")


def test_a_prompt_longer_than_the_context_is_named_or_counted(tmp_path, chat):
    rows = [
        {"id": "short", "prompt": "The dog ran", "answer": "1"},
        {"id": "long", "prompt": "moo " * 60, "answer": "2"},
    ]
    with pytest.raises(ValueError, match=r"environment 'math', record 'long': field 'prompt' is \d+ tokens"):
        load_prompts({"math": _env(tmp_path, rows)}, chat, seq_len=64, max_completion_tokens=16)
    prompts, skipped = load_prompts(
        {"math": _env(tmp_path, rows, on_long_prompt="skip")}, chat, seq_len=64, max_completion_tokens=16
    )
    assert [p.record["id"] for p in prompts["math"]] == ["short"] and skipped == {"math": 1}


def _group(texts, env="math", record_id="q", group=0):
    return [
        Rollout(
            RolloutRequest(0, group, i, env, record_id, (1, 2, 3), 7 + i),
            [5] * max(len(t), 1),
            [-0.5] * max(len(t), 1),
            t,
            "stop",
            0,
        )
        for i, t in enumerate(texts)
    ]


def test_an_empty_completion_is_scored_and_counted_skipped_or_refused(tmp_path):
    rows = [{"id": "q", "prompt": "2+2?", "answer": "4"}, {"id": "r", "prompt": "3+3?", "answer": "6"}]
    rollouts = _group(["4", "", "5", "4"]) + _group(["6", "6", "7", "6"], record_id="r", group=1)
    records = {("math", r["id"]): r for r in rows}
    scored = score_groups(rollouts, {"math": _env(tmp_path, rows)}, records, num_generations=4, scale="group")
    assert scored.empty_completions == 1 and scored.groups == 2
    assert [r.reward for r in scored.rollouts[:4]] == [1.0, 0.0, 0.0, 1.0]  # scored, and counted
    skip = _env(tmp_path, rows, on_empty_completion="skip")
    scored = score_groups(rollouts, {"math": skip}, records, num_generations=4, scale="group")
    assert scored.groups == 1 and scored.skipped == {"empty_completion": 1}
    assert {r.request.record_id for r in scored.rollouts} == {"r"}
    refuse = _env(tmp_path, rows, on_empty_completion="raise")
    with pytest.raises(EmptyCompletion, match=r"environment 'math', record 'q': sample 1 of iteration 0"):
        score_groups(rollouts, {"math": refuse}, records, num_generations=4, scale="group")


def test_a_failing_reward_stops_the_run_or_drops_its_group_counted(tmp_path):
    @register_reward("test_fails_on_five")
    def fails(record, completion):
        return math.nan if "5" in completion else 1.0

    try:
        rows = [{"id": "q", "prompt": "2+2?", "answer": "4"}, {"id": "r", "prompt": "3+3?", "answer": "6"}]
        records = {("math", r["id"]): r for r in rows}
        rollouts = _group(["4", "5", "4", "4"]) + _group(["6", "7", "6", "1"], record_id="r", group=1)
        strict = _env(tmp_path, rows, rewards=(("test_fails_on_five", 1.0),))
        with pytest.raises(
            RewardError, match=r"environment 'math', record 'q': reward 'test_fails_on_five' returned nan"
        ):
            score_groups(rollouts, {"math": strict}, records, num_generations=4, scale="group")
        lenient = _env(tmp_path, rows, rewards=(("test_fails_on_five", 1.0),), on_reward_error="skip")
        scored = score_groups(rollouts, {"math": lenient}, records, num_generations=4, scale="group")
        assert scored.skipped == {"reward_error": 1} and scored.groups == 1 and scored.zero_variance == 1
    finally:
        REWARDS.pop("test_fails_on_five")


def test_seeds_and_prompt_order_are_pure_functions_of_seed_and_iteration(tmp_path, chat):
    rows = [{"id": f"q{i}", "prompt": f"The dog ran {i}", "answer": str(i)} for i in range(5)]
    prompts, _ = load_prompts({"math": _env(tmp_path, rows)}, chat, seq_len=128, max_completion_tokens=8)

    def plan(iteration, seed=0):
        return plan_iteration(
            prompts, {"math": 1.0}, iteration=iteration, seed=seed, prompts_per_iteration=3, num_generations=2
        )

    assert plan(4) == plan(4) and plan(4) != plan(5) and plan(4) != plan(4, seed=1)
    # an epoch is a permutation: five consecutive prompts cover the five records (iterations 0 and 1, 3 + 2)
    first = [r.record_id for r in plan(0) + plan(1) if r.sample == 0]
    assert sorted(first[:5]) == [f"q{i}" for i in range(5)]
    seeds = [r.seed for r in plan(0)]
    assert len(set(seeds)) == len(seeds) and seeds[0] == rollout_seed(0, 0, "math", plan(0)[0].record_id, 0)
    assert prompt_counts({"a": 1.0, "b": 2.0}, 10) == {"a": 3, "b": 7}


def test_batch_rows_align_targets_mask_and_old_logprobs():
    request = RolloutRequest(0, 0, 0, "math", "q", (11, 12, 13), 1)
    rollout = Rollout(request, [21, 22, 99], [-0.1, -0.2, -0.3], "x", "stop", 0, reward=1.0, advantage=0.5)
    batch = make_batch([rollout], rows=2, seq_len=64)
    assert batch["input_ids"].shape == (2, 32)
    assert batch["input_ids"][0, :6].tolist() == [11, 12, 13, 21, 22, 99]
    assert batch["targets"][0, 2:5].tolist() == [21, 22, 99] and batch["mask"][0].tolist()[:6] == [0, 0, 1, 1, 1, 0]
    assert batch["old_logp"][0, 2:5].tolist() == pytest.approx([-0.1, -0.2, -0.3])
    assert batch["rows"].tolist() == [1.0, 0.0] and batch["advantages"].tolist() == [0.5, 0.0]
