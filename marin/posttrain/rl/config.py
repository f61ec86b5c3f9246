"""Configuration of an RL run: what it computes (``GrpoConfig``, environments, optimizer), then how it runs.

TrainRlConfig(
    output_path=..., initialize_from=<SFT run>, tokenizer=<SFT tokenizer dir>,
    environments={"arithmetic": EnvironmentConfig(prompts=<prompt set>/prompts.jsonl)},
    grpo=GrpoConfig(num_iterations=30, prompts_per_iteration=16, num_generations=8),
    optimizer=OptimizerConfig(learning_rate=1e-4, schedule="constant", warmup=0),
    rollout=RolloutConfig(num_workers=2),            # runtime: never part of the step's identity
)
"""

from __future__ import annotations

import dataclasses

from marin.environments import EnvironmentConfig
from marin.identity import runtime_field
from marin.posttrain.rl.loss import SCALE_REWARDS, LossConfig
from marin.posttrain.rl.rollout import SamplingConfig
from marin.trainer.checkpoint import CheckpointConfig
from marin.trainer.model.config import LlamaConfig
from marin.trainer.optim import OptimizerConfig
from marin.trainer.step import PrecisionPolicy
from marin.trainer.tracking import TrackerConfig
from marin.validation import check, concrete


@dataclasses.dataclass(frozen=True, kw_only=True)
class GrpoConfig:
    num_iterations: int
    """Iterations: each samples a batch of rollouts, then updates the policy on it."""
    prompts_per_iteration: int = 16
    num_generations: int = 8
    """G: completions per prompt, whose rewards normalize each other (TRL's ``num_generations``)."""
    sampling: SamplingConfig = dataclasses.field(default_factory=SamplingConfig)
    loss: LossConfig = dataclasses.field(default_factory=LossConfig)
    scale_rewards: str = "group"
    """Divide advantages by the group's reward std ("group"), the batch's ("batch") or not ("none")."""
    ppo_epochs: int = 1
    """Passes over each batch of rollouts (TRL's ``num_iterations``)."""
    num_minibatches: int = 1
    """Optimizer steps per pass: ``ppo_epochs * num_minibatches`` updates per iteration."""
    off_policy_lag: int = 0
    """Rollouts of iteration k are sampled by the policy of iteration ``max(0, k - off_policy_lag)``, so
    rollout workers can sample ahead while the trainer updates. 0: fully on-policy (and bitwise resumable)."""
    seed: int = 0
    """Seeds prompt order and every rollout's sampling seed."""

    def __post_init__(self):
        for name in ("num_iterations", "prompts_per_iteration", "ppo_epochs", "num_minibatches"):
            check("GrpoConfig", name, getattr(self, name), lambda v: v >= 1, ">= 1")
        check("GrpoConfig", "num_generations", self.num_generations, lambda v: v >= 2, ">= 2 (a group needs peers)")
        check("GrpoConfig", "scale_rewards", self.scale_rewards, lambda v: v in SCALE_REWARDS, str(SCALE_REWARDS))
        check("GrpoConfig", "off_policy_lag", self.off_policy_lag, lambda v: v >= 0, ">= 0")
        rows = self.prompts_per_iteration * self.num_generations
        check("GrpoConfig", "num_minibatches", self.num_minibatches, lambda v: rows % v == 0, f"a divisor of {rows}")

    @property
    def rows(self) -> int:
        return self.prompts_per_iteration * self.num_generations

    @property
    def num_updates(self) -> int:
        return self.num_iterations * self.ppo_epochs * self.num_minibatches


@dataclasses.dataclass(frozen=True, kw_only=True)
class RolloutConfig:
    """Where and how rollouts are sampled; never changes what they are."""

    num_workers: int = 0
    """Ray actors sampling rollouts, each with its own engine; 0 samples in the training process."""
    slots: int = 64
    """Requests each engine decodes together."""
    prefill_chunk: int = 256
    """Most prompt tokens an engine step reads: a batch's whole prompts are packed into chunks of this size
    (the quickstart's 128 rollouts of a 28-token prompt: 79 steps, 1.22 s at 64; 39 steps, 0.63-0.70 s at 256)."""
    worker_cpus: float = 1.0
    units_per_worker: int = 4
    """Each iteration's groups are split into this many units of work per worker (a lost unit is redone)."""

    def __post_init__(self):
        check("RolloutConfig", "num_workers", self.num_workers, lambda v: v >= 0, ">= 0")
        check("RolloutConfig", "units_per_worker", self.units_per_worker, lambda v: v >= 1, ">= 1")


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainRlConfig:
    output_path: str
    initialize_from: str
    """The policy's start (and the KL reference): a training run's output directory (its newest
    checkpoint) or a Hugging Face directory."""
    tokenizer: str
    """A chat tokenizer directory (the SFT step's ``tokenizer/``): prompts are rendered as user turns."""
    environments: dict[str, EnvironmentConfig]
    grpo: GrpoConfig
    optimizer: OptimizerConfig = dataclasses.field(
        default_factory=lambda: OptimizerConfig(learning_rate=1e-5, schedule="constant", warmup=0, weight_decay=0.0)
    )
    precision: PrecisionPolicy = dataclasses.field(default_factory=lambda: PrecisionPolicy(compute_dtype="float32"))
    model: LlamaConfig | None = None
    """Only for checkpoints written without their model config."""

    num_microbatches: int = runtime_field(1)
    rollout: RolloutConfig = runtime_field(default_factory=RolloutConfig)
    checkpoint: CheckpointConfig = runtime_field(default_factory=lambda: CheckpointConfig(keep_every=None))
    tracker: TrackerConfig = runtime_field(default_factory=TrackerConfig)
    sample_groups: int = runtime_field(4)
    """Groups per iteration written to ``rollouts/`` for the data browser."""

    def __post_init__(self):
        check("TrainRlConfig", "environments", self.environments, lambda v: len(v) > 0, "at least one environment")
        known, grpo = concrete(self.grpo)  # an experiment wraps it in versioned()
        if known:
            rows = grpo.rows // grpo.num_minibatches
            ok = lambda v: rows % v == 0  # noqa: E731
            check("TrainRlConfig", "num_microbatches", self.num_microbatches, ok, f"a divisor of {rows}")
