"""Training steps: a model trained on a mixture of token caches, in phases.

    phase1 = default_train("nano", {"web": tok}, llama_nano(), SimpleTrainConfig(num_train_steps=1000, ...))
    cooldown = default_train("nano-cooldown", {"web": tok, "math": math}, llama_nano(), cooldown_train,
                             weights={"web": 0.3, "math": 0.7}, initialize_from=phase1)

``SimpleTrainConfig`` (``experiments.models``) is expanded into the trainer's own configs by ``trainer_configs``,
which post-training reuses. Inside those versioned configs the fields declared with
``marin.identity.runtime_field`` (the device mesh, remat, layer scan, attention kernel, microbatches,
cadences) never count, so changing them reuses a step's outputs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from experiments.defaults.inputs import Input, step_input
from experiments.models import SimpleTrainConfig
from marin.allocator import large_buffers_env
from marin.execution import ExecutorStep, ResourceConfig, this_output_path, versioned
from marin.trainer.checkpoint import CheckpointConfig
from marin.trainer.data import TokenCacheSourceConfig
from marin.trainer.data.loader import DataConfig
from marin.trainer.data.mixture import MixtureStage
from marin.trainer.loop import TrainerConfig, TrainLmConfig
from marin.trainer.model.config import LlamaConfig
from marin.trainer.optim import OptimizerConfig
from marin.trainer.step import PrecisionPolicy
from marin.trainer.tracking import TrackerConfig
from marin.trainer.train_lm import train_lm


def mixture_stages(weights: Mapping[str, float], changes: Sequence[tuple[int, Mapping[str, float]]] = ()):
    """Weights from step 0, then each ``(step, weights)`` from that step on."""
    return (
        MixtureStage(start_step=0, weights=dict(weights)),
        *(MixtureStage(start_step=s, weights=dict(w)) for s, w in changes),
    )


def default_train(
    name: str,
    tokenized: Mapping[str, ExecutorStep],
    model: LlamaConfig,
    train: SimpleTrainConfig,
    *,
    weights: Mapping[str, float] | None = None,
    weight_changes: Sequence[tuple[int, Mapping[str, float]]] = (),
    validation: Mapping[str, Input] | None = None,
    initialize_from: ExecutorStep | None = None,
) -> ExecutorStep:
    """``checkpoints/<name>``: train ``model`` on a mixture of token caches (each tokenize step's ``train/``).

    ``validation`` defaults to every tokenize step's ``validation/`` cache, evaluated during training.
    ``initialize_from`` starts from another training step's newest parameters (a new phase of a run)."""
    weights = weights or {k: 1.0 for k in tokenized}
    validation = validation if validation is not None else {k: s / "validation" for k, s in tokenized.items()}
    data = DataConfig(
        train={k: TokenCacheSourceConfig(path=s / "train") for k, s in tokenized.items()},
        validation={k: TokenCacheSourceConfig(path=step_input(p)) for k, p in validation.items()},
        stages=versioned(mixture_stages(weights, weight_changes)),
        seed=versioned(train.seed),
        mixture_block_size=versioned(DataConfig.__dataclass_fields__["mixture_block_size"].default),
    )
    trainer, optimizer = trainer_configs(train)
    return ExecutorStep(
        name=f"checkpoints/{name}",
        fn=train_lm,
        # the model's and trainer's runtime fields (remat, scan, attention kernel, mesh, microbatches,
        # cadences) are declared as such and never enter the hash: a run moved to another slice resumes.
        config=TrainLmConfig(
            output_path=this_output_path(),
            model=versioned(model),
            data=data,
            trainer=versioned(trainer),
            optimizer=versioned(optimizer),
            initialize_from=initialize_from,
        ),
        description=f"train {name}: {model.param_count / 1e6:.1f}M params, {train.num_train_steps} steps",
        resources=trainer_resources(_with_host_cores(train)),
    )


def _with_host_cores(train: SimpleTrainConfig) -> ResourceConfig:
    """``train.resources``, with a CPU per process when ``host_processes`` splits the step over the machine's
    cores (each process is pinned to its own)."""
    if train.host_processes > train.resources.num_cpus:
        return dataclasses.replace(train.resources, num_cpus=train.host_processes)
    return train.resources


def trainer_configs(train: SimpleTrainConfig) -> tuple[TrainerConfig, OptimizerConfig]:
    """``train`` expanded into the trainer's own configs, each field into the config that declares the same name
    (``optimizer`` is the optimizer's ``kind``; ``resources`` is the step's)."""
    optimizer = OptimizerConfig(kind=train.optimizer, **_same_named(OptimizerConfig, train))
    trainer = TrainerConfig(
        **_same_named(TrainerConfig, train),
        precision=PrecisionPolicy(**_same_named(PrecisionPolicy, train)),
        checkpoint=CheckpointConfig(**_same_named(CheckpointConfig, train)),
        tracker=TrackerConfig(**_same_named(TrackerConfig, train), progress_bar=True),
    )
    return trainer, optimizer


def _same_named(config_class: type, train: SimpleTrainConfig) -> dict:
    """The fields of ``train`` that ``config_class`` declares under the same name, with their values."""
    declared = {f.name for f in dataclasses.fields(config_class)}
    return {f.name: getattr(train, f.name) for f in dataclasses.fields(train) if f.name in declared}


def trainer_resources(resources: ResourceConfig) -> ResourceConfig:
    """A training step's resources; on CPU its worker starts with the trainer's malloc policy as glibc
    tunables (``marin.allocator.large_buffers_env``), in force before JAX runs there: a worker pooled
    with other steps, or one where JAX ran first, would get only part of it (docs/trainer.md)."""
    if resources.num_gpus or resources.tpu is not None or any(k.startswith("TPU") for k in resources.resources):
        return resources
    return dataclasses.replace(resources, env_vars={**large_buffers_env(), **resources.env_vars})
