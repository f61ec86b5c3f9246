"""Named model and training configurations that experiments pick from.

Model shapes come from the trainer's preset registry (``marin.trainer.model.config``); here they get the
names experiments use and the vocabulary of the tokenizer they will be trained with. Train configs are the
few numbers a run is usually described by (batch, learning rate, schedule, steps, resources).
"""

import dataclasses

from marin.execution import ResourceConfig
from marin.trainer.checkpoint import CheckpointConfig
from marin.trainer.loop import TrainerConfig
from marin.trainer.mesh import MeshConfig, ShardingSpec
from marin.trainer.model.config import LlamaConfig, model_preset
from marin.trainer.optim import OptimizerConfig
from marin.trainer.step import PrecisionPolicy
from marin.trainer.tracking import TrackerConfig


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


def _default(config_class: type, field: str):
    """The trainer's own default for ``field``: defaults are defined once, where the trainer declares them."""
    spec = config_class.__dataclass_fields__[field]
    return spec.default if spec.default is not dataclasses.MISSING else spec.default_factory()


@dataclasses.dataclass(frozen=True, kw_only=True)
class SimpleTrainConfig:
    """A flat preset over the trainer's configs: the few numbers a run is usually described by.

    It holds no defaults of its own (each is the trainer config's, read from its declaration), and
    ``default_train`` expands it field for field into ``TrainerConfig``, ``OptimizerConfig``,
    ``PrecisionPolicy``, ``CheckpointConfig`` and ``TrackerConfig``. Which fields define the result and
    which only say how it runs is declared there (``marin.identity.runtime_field``)."""

    num_train_steps: int
    batch_size: int
    learning_rate: float
    optimizer: str = _default(OptimizerConfig, "kind")
    """adamw, muon, lion, adafactor or soap (marin.trainer.optim; docs/optimizers.md)."""
    muon_lr_scaling: str = _default(OptimizerConfig, "muon_lr_scaling")
    """muon: jordan (sqrt(max(1, fan_out/fan_in))) or moonlight (0.2 sqrt(max(fan_in, fan_out)): AdamW's lr)."""
    muon_adam_learning_rate: float | None = _default(OptimizerConfig, "muon_adam_learning_rate")
    """muon: peak lr of the embedding, output head and norms (AdamW's); None: learning_rate."""
    muon_ns_dtype: str = _default(OptimizerConfig, "muon_ns_dtype")
    """muon: Newton–Schulz's matmul operands, float32 or bfloat16 (torch's and Jordan's; 1.08x AdamW's step
    at ``medium`` against fp32's 1.26x on a CPU with AMX: docs/optimizers.md)."""
    schedule: str = _default(OptimizerConfig, "schedule")
    """cosine, linear, wsd or wsd_s (see marin.trainer.optim)."""
    warmup: float = _default(OptimizerConfig, "warmup")
    decay: float | None = _default(OptimizerConfig, "decay")
    min_lr_ratio: float = _default(OptimizerConfig, "min_lr_ratio")
    cycles: tuple[int, ...] = _default(OptimizerConfig, "cycles")
    """wsd_s only: steps at which a cycle ends (and the next re-warms)."""
    rewarmup: float = _default(OptimizerConfig, "rewarmup")
    weight_decay: float = _default(OptimizerConfig, "weight_decay")
    decay_embeddings: bool = _default(OptimizerConfig, "decay_embeddings")
    """Weight-decay the embedding and output projection too (nanoGPT and GPT-2 do; Llama does not)."""
    beta1: float = _default(OptimizerConfig, "beta1")
    beta2: float = _default(OptimizerConfig, "beta2")
    """Adam's second-moment decay: 0.95 by default (Llama, Marin); TRL and torch default to 0.999."""
    epsilon: float = _default(OptimizerConfig, "epsilon")
    max_grad_norm: float | None = _default(OptimizerConfig, "max_grad_norm")
    """Clip the global gradient norm to this; None: no clipping."""
    ema_decay: float | None = _default(OptimizerConfig, "ema_decay")
    compute_dtype: str = _default(PrecisionPolicy, "compute_dtype")
    """bfloat16 by default; CPU experiments choose float32 (faster on CPUs without bf16 units)."""
    matmul_dtype: str = _default(PrecisionPolicy, "matmul_dtype")
    """"float8" runs the blocks' projections in FP8 (GPUs with FP8 tensor cores)."""
    z_loss: float = _default(TrainerConfig, "z_loss")
    seed: int = _default(TrainerConfig, "seed")
    num_microbatches: int = _default(TrainerConfig, "num_microbatches")
    loss_block: int | None = _default(TrainerConfig, "loss_block")
    """The loss this many positions at a time, never the whole logits (one device; trainer/model/chunked_loss.py)."""
    mesh: MeshConfig = _default(TrainerConfig, "mesh")
    """Devices per mesh axis (data, fsdp, tensor); by default every device on fsdp."""
    sharding: ShardingSpec = _default(TrainerConfig, "sharding")
    """dp, fsdp, tp, fsdp_tp or explicit rules (marin/trainer/mesh.py)."""
    host_processes: int = _default(TrainerConfig, "host_processes")
    """CPU only: processes on the machine that split each batch's rows, each on its share of the cores
    (marin/trainer/host_parallel.py); 1: one process."""
    eval_every: int | None = _default(TrainerConfig, "eval_every")
    max_eval_sequences: int = _default(TrainerConfig, "max_eval_sequences")
    """Sequences evaluated per validation set during training, from its start."""
    eval_batch_size: int | None = _default(TrainerConfig, "eval_batch_size")
    log_every: int = _default(TrainerConfig, "log_every")
    save_interval_minutes: float | None = _default(CheckpointConfig, "save_interval_minutes")
    keep_every: int | None = _default(CheckpointConfig, "keep_every")
    wandb: bool = _default(TrackerConfig, "wandb")
    """W&B logging (offline unless WANDB_API_KEY is set)."""
    resources: ResourceConfig = ResourceConfig(num_cpus=1)


CPU_TRAIN = ResourceConfig(num_cpus=1)
# Whole slices, one training process per host (ResourceConfig.tpu_pod; marin.trainer.distributed).
TPU_V5E_256 = ResourceConfig.tpu_pod("v5e-256", max_retries=100)
TPU_V4_2048 = ResourceConfig.tpu_pod("v4-2048", max_retries=100)
