"""The embedded JAX trainer: a Llama model, one jitted step, deterministic data, exact resume.

``train_lm(TrainLmConfig(...))`` is the executor-facing entry point; the parts live in subpackages:
``model`` (configs, parameters, forward), ``attention`` (backends), ``data`` (sources, shuffles,
mixtures, batches), and modules ``optim``, ``step``, ``checkpoint``, ``tracking``, ``loop``, ``axes``,
``mesh`` (the device mesh and sharding presets: ``TrainerConfig(mesh=MeshConfig(...), sharding="fsdp")``).
Nothing here imports ``marin.execution``.

Importing this package on CPU, before JAX's runtime has started, puts the trainer's malloc policy in place
(``marin.allocator``; ``MARIN_MALLOC_DEFAULTS=1`` opts out): a notebook that imports the trainer, runs an
eval or another jit, then trains, trains as fast as a fresh process (``benchmarks/history_bench.py``).
"""

from marin.trainer.checkpoint import CheckpointConfig, Checkpointer
from marin.trainer.data import DataConfig, MixtureStage, NumpySourceConfig, SyntheticSourceConfig, TokenSource
from marin.trainer.loop import NonFiniteLoss, TrainerConfig, TrainLmConfig, TrainResult, train, tune_host_allocator
from marin.trainer.mesh import MeshConfig
from marin.trainer.model import LlamaConfig, model_preset
from marin.trainer.optim import OptimizerConfig, schedule_free_eval_params
from marin.trainer.step import PrecisionPolicy, TrainState
from marin.trainer.tracking import TrackerConfig
from marin.trainer.train_lm import train_lm

__all__ = [
    "CheckpointConfig",
    "Checkpointer",
    "DataConfig",
    "LlamaConfig",
    "MeshConfig",
    "MixtureStage",
    "NonFiniteLoss",
    "NumpySourceConfig",
    "OptimizerConfig",
    "PrecisionPolicy",
    "SyntheticSourceConfig",
    "TokenSource",
    "TrackerConfig",
    "TrainLmConfig",
    "TrainResult",
    "TrainState",
    "TrainerConfig",
    "model_preset",
    "schedule_free_eval_params",
    "train",
    "train_lm",
]

tune_host_allocator(early_only=True)
