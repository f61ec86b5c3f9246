"""Named model and training configurations that experiments pick from.

Model shapes come from the trainer's preset registry (``marin.trainer.model.config``); here they get the
names experiments use and the vocabulary of the tokenizer they will be trained with. Train configs are the
few numbers a run is usually described by (batch, learning rate, schedule, steps, resources).
"""

import dataclasses

from marin.execution import ResourceConfig
from marin.trainer.mesh import MeshConfig, ShardingSpec
from marin.trainer.model.config import LlamaConfig, model_preset


def _model(preset: str, **overrides) -> LlamaConfig:
    return dataclasses.replace(model_preset(preset), **overrides)


def llama_nano(vocab_size: int = 8192, seq_len: int = 256) -> LlamaConfig:
    """~5.8M parameters at vocab 8192: the quickstart's model, trains in minutes on a laptop CPU."""
    return _model("nano", vocab_size=vocab_size, seq_len=seq_len)


def llama_small(vocab_size: int = 8192, seq_len: int = 512) -> LlamaConfig:
    return _model("small", vocab_size=vocab_size, seq_len=seq_len)


def llama_150m(vocab_size: int = 128_256, seq_len: int = 4096) -> LlamaConfig:
    return _model("llama_150m", vocab_size=vocab_size, seq_len=seq_len)


def llama_1b(vocab_size: int = 128_256, seq_len: int = 4096) -> LlamaConfig:
    return _model("llama_1b", vocab_size=vocab_size, seq_len=seq_len)


def llama_8b(vocab_size: int = 128_256, seq_len: int = 4096) -> LlamaConfig:
    """Marin 8B / Llama 3 8B: hidden 4096, FFN 14336, 32 layers, 32 heads, 8 KV heads."""
    return _model("llama_8b", vocab_size=vocab_size, seq_len=seq_len)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SimpleTrainConfig:
    """What a training run is usually described by; ``default_train`` expands it into the trainer's config."""

    num_train_steps: int
    batch_size: int
    learning_rate: float
    schedule: str = "wsd"
    """cosine, linear, wsd or wsd_s (see marin.trainer.optim)."""
    warmup: float = 0.05
    decay: float | None = 0.2
    min_lr_ratio: float = 0.1
    cycles: tuple[int, ...] = ()
    """wsd_s only: steps at which a cycle ends (and the next re-warms)."""
    rewarmup: float = 0.0
    weight_decay: float = 0.1
    ema_decay: float | None = None
    num_microbatches: int = 1
    mesh: MeshConfig = MeshConfig()
    """Devices per mesh axis (data, fsdp, tensor); by default every device on fsdp."""
    sharding: ShardingSpec = "fsdp"
    """dp, fsdp, tp, fsdp_tp or explicit rules (marin/trainer/mesh.py). Neither changes the step's identity."""
    compute_dtype: str = "float32"
    """bfloat16 on accelerators; float32 is faster on CPUs without bf16 units."""
    seed: int = 0
    eval_every: int | None = None
    log_every: int = 10
    save_interval_minutes: float | None = 10.0
    keep_every: int | None = None
    wandb: bool = False
    resources: ResourceConfig = ResourceConfig(num_cpus=1)


CPU_TRAIN = ResourceConfig(num_cpus=1)
# Whole slices, one training process per host (ResourceConfig.tpu_pod; marin.trainer.distributed).
TPU_V5E_256 = ResourceConfig.tpu_pod("v5e-256", max_retries=100)
TPU_V4_2048 = ResourceConfig.tpu_pod("v4-2048", max_retries=100)
