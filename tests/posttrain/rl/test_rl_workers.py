"""Rollouts on two Ray workers: the same completions and rewards per seed as the training process's own engine,
and none lost or used twice when a worker is killed mid-iteration (its units are redone by a replacement)."""

import dataclasses
import json

import jax
import pytest

from marin.chat import ChatTokenizer
from marin.inference import load_model
from marin.inference.engine import Engine, EngineConfig
from marin.posttrain.rl.batch import score_groups
from marin.posttrain.rl.config import RolloutConfig
from marin.posttrain.rl.loop import load_prompts, train_rl
from marin.posttrain.rl.rollout import SamplingConfig, generate_rollouts, plan_iteration
from marin.posttrain.rl.workers import RolloutPool
from tests.posttrain.rl.rl_setup import make_policy, rl_config, with_rollout

SAMPLING = SamplingConfig(max_completion_tokens=12)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("workers")
    config = rl_config(root, str(root / "unused"))
    export, tokenizer = make_policy(root)
    chat = ChatTokenizer.load(tokenizer)
    cfg, params, _ = load_model(export)
    envs = {name: env.build(name) for name, env in config.environments.items()}
    prompts, _ = load_prompts(envs, chat, cfg.seq_len, SAMPLING.max_completion_tokens)
    requests = plan_iteration(
        prompts, {"letters": 1.0}, iteration=3, seed=5, prompts_per_iteration=6, num_generations=4
    )
    engine = Engine(
        cfg, jax.tree.map(jax.numpy.asarray, params), EngineConfig(slots=32, prefill_chunk=32), (chat.eot_id,)
    )
    local = generate_rollouts(engine, requests, SAMPLING, chat.decode_reply, version=0)
    records = {("letters", r["id"]): r for r in envs["letters"].records}
    return {"root": root, "cfg": cfg, "params": params, "tokenizer": tokenizer, "requests": requests, "local": local,
            "envs": envs, "records": records}  # fmt: skip


def _rewards(setup, rollouts):
    return [
        r.reward
        for r in score_groups(rollouts, setup["envs"], setup["records"], num_generations=4, scale="group").rollouts
    ]


@pytest.mark.slow  # two worker processes compile the engine's programs
@pytest.mark.timeout(600)
def test_a_worker_killed_mid_iteration_loses_and_repeats_no_rollout(setup, ray_address):
    killed = []

    def kill_once(pool, ticket, unit):
        if not killed:  # after the first unit's results, kill a worker that still has work queued
            victim = next(w for u, (w, _) in ticket.assigned.items() if u != unit)
            pool.kill(victim)
            killed.append(victim)

    rollout = RolloutConfig(num_workers=2, slots=32, prefill_chunk=32, worker_cpus=0.5, units_per_worker=3)
    pool = RolloutPool(setup["cfg"], setup["tokenizer"], SAMPLING, rollout, on_unit_done=kill_once)
    try:
        ticket = pool.submit(setup["requests"], setup["params"], version=0)
        assert len(ticket.units) == 6  # 6 groups over 2 workers x 3 units
        rollouts = pool.collect(ticket)
    finally:
        pool.close()
    assert killed and pool.replaced == 1
    keys = [r.request.key for r in rollouts]
    assert keys == sorted({r.key for r in setup["requests"]}) and len(keys) == len(setup["requests"])
    local = setup["local"]
    assert [r.tokens for r in rollouts] == [r.tokens for r in local]  # the same completions, seed by seed
    assert _rewards(setup, rollouts) == _rewards(setup, local)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_an_rl_run_on_two_workers_sampling_one_iteration_ahead(setup, ray_address):
    """The loop on two workers with off_policy_lag=1: iteration 1 is the in-process run's (same seeds, same
    starting policy), iteration 2 was sampled by the starting policy while iteration 1 updated."""
    root = setup["root"]
    local = rl_config(root, str(root / "local"), num_iterations=2)
    lagged = with_rollout(rl_config(root, str(root / "lagged"), num_iterations=2), num_workers=2, worker_cpus=0.5)
    lagged = dataclasses.replace(lagged, grpo=dataclasses.replace(lagged.grpo, off_policy_lag=1))
    runs = {}
    for config in (local, lagged):
        train_rl(config)
        with open(f"{config.output_path}/metrics.jsonl") as f:
            runs[config.output_path] = [json.loads(line) for line in f]
    here, there = runs[local.output_path], runs[lagged.output_path]
    assert [m["rl/policy_lag"] for m in there] == [0.0, 1.0] and [m["rl/policy_lag"] for m in here] == [0.0, 0.0]
    assert there[0]["rl/reward_mean"] == here[0]["rl/reward_mean"]
    assert there[0]["train/loss"] == pytest.approx(here[0]["train/loss"], rel=1e-5, abs=1e-7)
    assert there[0]["rl/duplicate_rollouts"] == 0
