"""RL with verifiable rewards (GRPO): rollouts through the lab's engine, a clipped policy-gradient update
with the trainer's state, optimizer and checkpoints, reproducible to the bit (docs/rl.md).

``config`` holds the step's config, ``loop`` the step (``train_rl``) and its prompts, ``rollout`` the plan
and seeds of an iteration's samples and the engine call, ``batch`` rewards, advantages and the padded batch,
``loss`` the GRPO loss; ``sources`` and ``workers`` (Ray actors) are how rollouts are sampled.
"""

from marin.posttrain.rl.batch import EmptyCompletion, make_batch, score_groups
from marin.posttrain.rl.config import GrpoConfig, RolloutConfig, TrainRlConfig
from marin.posttrain.rl.loop import RlResult, load_prompts, train_rl
from marin.posttrain.rl.loss import LossConfig, group_advantages, grpo_loss, token_logprobs
from marin.posttrain.rl.rollout import (
    Prompt,
    Rollout,
    RolloutRequest,
    SamplingConfig,
    generate_rollouts,
    plan_iteration,
    rollout_seed,
)

__all__ = [
    "EmptyCompletion",
    "GrpoConfig",
    "LossConfig",
    "Prompt",
    "RlResult",
    "Rollout",
    "RolloutConfig",
    "RolloutRequest",
    "SamplingConfig",
    "TrainRlConfig",
    "generate_rollouts",
    "group_advantages",
    "grpo_loss",
    "load_prompts",
    "make_batch",
    "plan_iteration",
    "rollout_seed",
    "score_groups",
    "token_logprobs",
    "train_rl",
]
