"""RL phases as steps: ``default_rl``'s identity (what the run computes moves its output path; where rollouts
run does not), the quickstart's RL phase on prompts disjoint from its held-out instructions, and Tootsie's
RL phase on GSM8K after its instruct phase."""

import dataclasses
import json
from pathlib import Path

import pytest

from experiments import quickstart, tootsie_8b
from experiments.defaults import default_arithmetic_prompts, default_environment, default_rl
from marin.execution import Executor, ExecutorStep
from marin.posttrain.rl.config import GrpoConfig, RolloutConfig
from marin.posttrain.rl.loss import LossConfig
from marin.trainer.optim import OptimizerConfig
from tests.experiments.test_quickstart import SFT_FLOOR

SFT = quickstart.STEPS["sft"]


def _rl(environment=None, **changes) -> ExecutorStep:
    grpo = changes.pop("grpo", GrpoConfig(num_iterations=4))
    env = environment or default_environment(default_arithmetic_prompts(), rewards=(("exact", 1.0),))
    args = dict(chat_tokenizer=quickstart.STEPS["sft_data"] / "tokenizer", grpo=grpo, optimizer=OptimizerConfig())
    return default_rl("t-rl", SFT, {"arithmetic": env}, **{**args, **changes})


def _path(step: ExecutorStep) -> str:
    return next(p.output_path for p in Executor(prefix="/p").plan([step]).steps if p.name == step.name)


def test_what_the_run_computes_moves_its_path_and_where_rollouts_run_does_not():
    base = _path(_rl())
    assert _path(_rl(rollout=RolloutConfig(num_workers=4, slots=8))) == base
    assert _path(_rl(save_interval_minutes=1.0, wandb=False)) == base
    moved = [
        _rl(grpo=GrpoConfig(num_iterations=5)),
        _rl(grpo=GrpoConfig(num_iterations=4, off_policy_lag=1)),
        _rl(grpo=GrpoConfig(num_iterations=4, loss=LossConfig(beta=0.1))),
        _rl(optimizer=OptimizerConfig(learning_rate=1e-5)),
        _rl(environment=default_environment(default_arithmetic_prompts(), rewards=(("numeric", 1.0),))),
        _rl(environment=default_environment(default_arithmetic_prompts(seed=1), rewards=(("exact", 1.0),))),
        _rl(environment=default_environment(default_arithmetic_prompts("counting"), rewards=(("exact", 1.0),))),
        _rl(environment=default_environment(default_arithmetic_prompts(), system_prompt="Be brief.")),
    ]
    paths = [_path(step) for step in moved]
    assert base not in paths and len(set(paths)) == len(paths)


def test_the_quickstart_rl_phase_starts_from_sft_and_is_evaluated_like_it():
    plan = Executor(prefix="/p").plan(quickstart.TARGETS)
    by_name = {s.name: s for s in plan.steps}
    rl = by_name[quickstart.STEPS["rl"].name]
    assert rl.inputs["initialize_from"] == by_name[SFT.name].output_path
    assert {d.name for d in rl.deps} >= {"environments/addition", SFT.name}
    evaluation = by_name[quickstart.STEPS["instruct_eval_rl"].name]
    sft_eval = by_name[quickstart.STEPS["instruct_eval_sft"].name]
    assert evaluation.deps[0] is rl and evaluation.version["config"] == sft_eval.version["config"]


def test_tootsie_declares_rl_on_gsm8k_after_its_instruct_phase():
    plan = Executor(prefix="gs://bucket/lab").plan([tootsie_8b.rl["export"]])
    by_name = {s.name: s for s in plan.steps}
    rl = next(s for s in plan.steps if s.name == "checkpoints/tootsie-8b-rl")
    assert rl.inputs["initialize_from"] == by_name["checkpoints/tootsie-8b-instruct"].output_path
    prompts = by_name["environments/gsm8k-train"]
    assert prompts in rl.deps and by_name["raw/gsm8k-train"] in prompts.deps
    download = by_name["raw/gsm8k-train"].version["config"]["source"]
    assert download.startswith("https://raw.githubusercontent.com/openai/grade-school-math/3101c7d")
    assert "GSM8K problems x 16 completions (GRPO" in tootsie_8b.describe()
    assert dataclasses.asdict(tootsie_8b.RL_GRPO)["off_policy_lag"] == 1


@pytest.mark.slow
def test_the_quickstart_rl_phase_keeps_the_held_out_instructions(quickstart_run):
    """Exact match on the held-out instructions, SFT -> RL. Measured over seeds 0-2 (docs/rl.md, AMD EPYC host):
    0.85 -> 0.855, 0.78 -> 0.775, 0.77 -> 0.785; the 300-step SFT model answers the addition prompts RL trains on
    at 0.82-0.98 already, so the quickstart's RL phase shows the mechanics, and the held-out effect stays within
    one or two of the 200 items of SFT's (the earlier +0.03 on addition was one host's draw of the 100-step
    recipe; on this host it was -0.04)."""
    paths = quickstart_run["paths"]
    results = {
        key: json.loads((Path(paths[key]) / "results.json").read_text())["instruct"]["instructions"]
        for key in ("instruct_eval_sft", "instruct_eval_rl")
    }
    sft, rl = (results[k]["exact_match"]["value"] for k in ("instruct_eval_sft", "instruct_eval_rl"))
    assert rl >= sft - 0.01 and rl >= SFT_FLOOR, (sft, rl)
    metrics = [json.loads(line) for line in (Path(paths["rl"]) / "metrics.jsonl").read_text().splitlines()]
    assert len(metrics) == quickstart.RL_GRPO.num_iterations and all(m["rl/first_step_ratio"] > 0.99 for m in metrics)
    assert (Path(paths["rl"]) / "rollouts" / "iteration-000001.jsonl").exists()
