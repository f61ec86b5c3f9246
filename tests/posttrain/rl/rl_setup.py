"""A tiny chat policy and prompt set for RL tests, and a reward with a known optimum: the share of the letter
"o" in the completion (a random policy writes some; more is always better), registered on import."""

import dataclasses
import json
from pathlib import Path

from marin.environments import EnvironmentConfig, register_reward
from marin.environments.rewards import REWARDS
from marin.posttrain.rl.config import GrpoConfig, RolloutConfig, TrainRlConfig
from marin.posttrain.rl.loss import LossConfig
from marin.posttrain.rl.rollout import SamplingConfig
from marin.trainer.checkpoint import CheckpointConfig
from marin.trainer.optim import OptimizerConfig
from marin.trainer.tracking import TrackerConfig
from tests.export.tiny_model import TEXTS, make_tiny_export


def letter_o(record, completion: str) -> float:
    return completion.count("o") / max(len(completion), 1)


if "test_letter_o" not in REWARDS:
    register_reward("test_letter_o")(letter_o)


def make_policy(root: Path) -> tuple[str, str]:
    """(HF export of a random tiny Llama, its chat tokenizer directory)."""
    export = root / "policy"
    if not export.exists():
        make_tiny_export(str(export), chat=True)
    return str(export), f"{export}-chat-tokenizer"


def make_prompts(root: Path, n: int = 8) -> str:
    path = root / "prompts.jsonl"
    rows = [{"id": f"p{i}", "prompt": TEXTS[i % 2].split(".")[0], "answer": str(i)} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def rl_config(root: Path, output: str, **grpo) -> TrainRlConfig:
    export, tokenizer = make_policy(root)
    defaults = dict(
        num_iterations=6,
        prompts_per_iteration=4,
        num_generations=8,
        num_minibatches=2,
        sampling=SamplingConfig(max_completion_tokens=12),
        loss=LossConfig(max_completion_tokens=12),
    )
    return TrainRlConfig(
        output_path=output,
        initialize_from=export,
        tokenizer=tokenizer,
        environments={"letters": EnvironmentConfig(prompts=make_prompts(root), rewards=(("test_letter_o", 1.0),))},
        grpo=GrpoConfig(**{**defaults, **grpo}),
        optimizer=OptimizerConfig(learning_rate=3e-3, schedule="constant", warmup=0, weight_decay=0.0),
        rollout=RolloutConfig(slots=32, prefill_chunk=32),
        checkpoint=CheckpointConfig(save_interval_minutes=None, keep_every=None),
        tracker=TrackerConfig(wandb=False, progress_bar=False),
    )


def with_rollout(config: TrainRlConfig, **rollout) -> TrainRlConfig:
    return dataclasses.replace(config, rollout=dataclasses.replace(config.rollout, **rollout))
