"""A training step's identity, field by field: result-defining fields move the output path, runtime fields
(declared with ``marin.identity.runtime_field``) keep it. Every field of every training config is in the
table, so a new field cannot be added without deciding which kind it is."""

import dataclasses

import pytest

from experiments.defaults import default_tokenize, default_train
from experiments.models import SimpleTrainConfig, llama_nano
from marin.execution import ExecutorStep, InputName, this_output_path, versioned
from marin.execution.executor import Executor
from marin.identity import is_runtime, result_dict
from marin.trainer.checkpoint import CheckpointConfig
from marin.trainer.data import TokenCacheSourceConfig
from marin.trainer.data.loader import DataConfig
from marin.trainer.data.mixture import MixtureStage
from marin.trainer.loop import TrainerConfig, TrainLmConfig
from marin.trainer.mesh import MeshConfig
from marin.trainer.model.config import Llama3RopeScaling, LlamaConfig
from marin.trainer.optim import OptimizerConfig
from marin.trainer.step import PrecisionPolicy
from marin.trainer.tracking import TrackerConfig
from marin.trainer.train_lm import train_lm

MODEL = llama_nano()
TRAINER = TrainerConfig(num_train_steps=100, batch_size=8)
OPTIMIZER = OptimizerConfig()
PRECISION = PrecisionPolicy()

# (config class, field) -> a different value. Runtime fields must keep the hash, all others must move it.
CHANGES = {
    (LlamaConfig, "vocab_size"): 4096,
    (LlamaConfig, "hidden_dim"): 128,
    (LlamaConfig, "mlp_dim"): 512,
    (LlamaConfig, "num_layers"): 3,
    (LlamaConfig, "num_heads"): 8,
    (LlamaConfig, "num_kv_heads"): 2,
    (LlamaConfig, "seq_len"): 128,
    (LlamaConfig, "head_dim"): 32,
    (LlamaConfig, "rope_theta"): 500_000.0,
    (LlamaConfig, "rope_scaling"): Llama3RopeScaling(),
    (LlamaConfig, "norm_eps"): 1e-6,
    (LlamaConfig, "tie_embeddings"): True,
    (LlamaConfig, "initializer_range"): 0.01,
    (LlamaConfig, "qk_norm"): "head",
    (LlamaConfig, "norm_placement"): "post",
    (LlamaConfig, "attention_bias"): True,
    (LlamaConfig, "sliding_window"): 16,
    (LlamaConfig, "sliding_window_layers"): (1,),
    (LlamaConfig, "num_experts"): 8,
    (LlamaConfig, "experts_per_token"): 1,
    (LlamaConfig, "expert_mlp_dim"): 64,
    (LlamaConfig, "shared_experts"): 1,
    (LlamaConfig, "router_order"): "topk_softmax",
    (LlamaConfig, "normalize_topk"): False,
    (LlamaConfig, "router_aux_loss_coef"): 0.001,
    (LlamaConfig, "router_z_loss_coef"): 0.001,
    (LlamaConfig, "capacity_factor"): 1.25,
    (LlamaConfig, "moe_dispatch"): "dense",
    (LlamaConfig, "scan_layers"): True,
    (LlamaConfig, "remat"): "full",
    (LlamaConfig, "attention_backend"): "pallas",
    (LlamaConfig, "context_attention"): "ring",
    (TrainerConfig, "num_train_steps"): 200,
    (TrainerConfig, "batch_size"): 16,
    (TrainerConfig, "precision"): PrecisionPolicy(compute_dtype="float32"),
    (TrainerConfig, "z_loss"): 1e-4,
    (TrainerConfig, "seed"): 1,
    (TrainerConfig, "max_eval_sequences"): 64,
    (TrainerConfig, "num_microbatches"): 4,
    (TrainerConfig, "loss_block"): 256,
    (TrainerConfig, "log_every"): 1,
    (TrainerConfig, "eval_every"): 5,
    (TrainerConfig, "eval_batch_size"): 4,
    (TrainerConfig, "checkpoint"): CheckpointConfig(keep_every=10, save_interval_minutes=1.0, async_save=False),
    (TrainerConfig, "tracker"): TrackerConfig(wandb=False, progress_bar=False),
    (TrainerConfig, "mesh"): MeshConfig(data=2, fsdp=-1, expert=2),
    (TrainerConfig, "sharding"): "tp",
    (TrainerConfig, "host_processes"): 2,
    (PrecisionPolicy, "param_dtype"): "bfloat16",
    (PrecisionPolicy, "compute_dtype"): "float32",
    (PrecisionPolicy, "matmul_dtype"): "float8",
    **{
        (OptimizerConfig, name): value
        for name, value in {
            "kind": "lion",
            "learning_rate": 1e-3,
            "muon_momentum": 0.9,
            "muon_nesterov": False,
            "muon_ns_steps": 6,
            "muon_lr_scaling": "moonlight",
            "muon_ns_dtype": "bfloat16",
            "muon_adam_learning_rate": 1e-2,
            "soap_precondition_frequency": 5,
            "soap_shampoo_beta": 0.99,
            "weight_decay": 0.0,
            "beta1": 0.8,
            "beta2": 0.99,
            "epsilon": 1e-6,
            "max_grad_norm": None,
            "schedule": "cosine",
            "warmup": 0.1,
            "decay": 0.3,
            "min_lr_ratio": 0.0,
            "cycles": (50,),
            "rewarmup": 0.1,
            "decay_embeddings": True,
            "ema_decay": 0.99,
        }.items()
    },
    (DataConfig, "stages"): (MixtureStage(start_step=0, weights={"web": 1.0}),),
    (DataConfig, "seed"): 3,
    (DataConfig, "mixture_block_size"): 512,
    (DataConfig, "prefetch"): 0,
}
RUNTIME = {
    (LlamaConfig, "scan_layers"),
    (LlamaConfig, "remat"),
    (LlamaConfig, "attention_backend"),
    (LlamaConfig, "context_attention"),
    (LlamaConfig, "moe_dispatch"),
    (TrainerConfig, "num_microbatches"),
    (TrainerConfig, "loss_block"),
    (TrainerConfig, "log_every"),
    (TrainerConfig, "eval_every"),
    (TrainerConfig, "eval_batch_size"),
    (TrainerConfig, "checkpoint"),
    (TrainerConfig, "tracker"),
    (TrainerConfig, "mesh"),
    (TrainerConfig, "sharding"),
    (TrainerConfig, "host_processes"),
    (DataConfig, "prefetch"),
}
# Inputs: dependencies, counted by the upstream step's identity, not by value.
INPUTS = {(DataConfig, "train"), (DataConfig, "validation")}


def _path(model=MODEL, trainer=TRAINER, optimizer=OPTIMIZER, **data_fields) -> str:
    source = TokenCacheSourceConfig(path=InputName.hardcoded("tokenized/web/train"))
    fields = {
        "stages": (MixtureStage(start_step=0, weights={"web": 0.5}),),
        "seed": 0,
        "mixture_block_size": 2048,
        **data_fields,
    }
    data = DataConfig(
        train={"web": source},
        stages=versioned(fields["stages"]),
        seed=versioned(fields["seed"]),
        mixture_block_size=versioned(fields["mixture_block_size"]),
        prefetch=fields.get("prefetch", 2),
    )
    step = ExecutorStep(
        name="checkpoints/identity",
        fn=train_lm,
        config=TrainLmConfig(
            output_path=this_output_path(),
            model=versioned(model),
            data=data,
            trainer=versioned(trainer),
            optimizer=versioned(optimizer),
        ),
    )
    return Executor(prefix="/lab").plan([step]).steps[0].output_path


CLASSES = (LlamaConfig, TrainerConfig, PrecisionPolicy, OptimizerConfig, DataConfig)


def test_every_field_of_every_training_config_is_in_the_table():
    assert {(cls, f.name) for cls in CLASSES for f in dataclasses.fields(cls)} - INPUTS == set(CHANGES)
    # the table's runtime set is what the types declare
    assert {(cls, f.name) for cls in CLASSES for f in dataclasses.fields(cls) if is_runtime(f)} == RUNTIME


@pytest.mark.parametrize(
    "cls,field",
    sorted(CHANGES, key=lambda k: (k[0].__name__, k[1])),
    ids=lambda v: v if isinstance(v, str) else v.__name__,
)
def test_runtime_fields_keep_the_path_and_result_fields_move_it(cls, field):
    value = CHANGES[(cls, field)]
    if cls is LlamaConfig and field == "sliding_window_layers":  # only meaningful beside a window
        windowed = dataclasses.replace(MODEL, sliding_window=16)
        assert _path(model=dataclasses.replace(windowed, **{field: value})) != _path(model=windowed)
        return
    if cls is LlamaConfig:
        changed = {"model": dataclasses.replace(MODEL, **{field: value})}
    elif cls is TrainerConfig:
        changed = {"trainer": dataclasses.replace(TRAINER, **{field: value})}
    elif cls is PrecisionPolicy:
        changed = {"trainer": dataclasses.replace(TRAINER, precision=dataclasses.replace(PRECISION, **{field: value}))}
    elif cls is OptimizerConfig:
        schedule = {"cycles": "wsd_s", "rewarmup": "wsd_s"}.get(field, OPTIMIZER.schedule)
        base = dataclasses.replace(OPTIMIZER, schedule=schedule)
        assert _path(optimizer=base) != _path() or schedule == OPTIMIZER.schedule
        changed = {"optimizer": dataclasses.replace(base, **{field: value})}
        if field in ("cycles", "rewarmup"):
            assert _path(**changed) != _path(optimizer=base)
            return
    else:
        changed = {field: value}
    if (cls, field) in RUNTIME:
        assert _path(**changed) == _path(), f"{cls.__name__}.{field} is runtime-only but moved the output"
    else:
        assert _path(**changed) != _path(), f"{cls.__name__}.{field} defines the result but kept the output"


def test_default_train_runtime_knobs_keep_the_path():
    base = SimpleTrainConfig(num_train_steps=100, batch_size=8, learning_rate=1e-3)
    tokenized = {"web": default_tokenize("web", train=["gs://b/web.jsonl"], tokenizer="gs://b/tokenizer")}

    def path(train):
        return Executor(prefix="/lab").plan([default_train("nano", tokenized, MODEL, train)]).steps[-1].output_path

    for runtime in (
        {"num_microbatches": 2},
        {"loss_block": 1024},
        {"mesh": MeshConfig(data=2, fsdp=-1)},
        {"sharding": "dp"},
        {"host_processes": 2},
        {"log_every": 1},
        {"eval_every": 7},
        {"save_interval_minutes": None},
        {"keep_every": 5},
        {"wandb": not base.wandb},
    ):
        assert path(dataclasses.replace(base, **runtime)) == path(base), runtime
    for result in (
        {"learning_rate": 2e-3},
        {"optimizer": "muon"},
        {"optimizer": "muon", "muon_lr_scaling": "moonlight"},
        {"optimizer": "muon", "muon_adam_learning_rate": 3e-3},
        {"optimizer": "muon", "muon_ns_dtype": "bfloat16"},
        {"beta2": 0.99},
        {"compute_dtype": "float32"},
        {"matmul_dtype": "float8"},
        {"z_loss": 1e-4},
        {"seed": 1},
        {"batch_size": 16},
    ):
        assert path(dataclasses.replace(base, **result)) != path(base), result
    remat = dataclasses.replace(MODEL, remat="full", scan_layers=True, attention_backend="reference")
    plan = Executor(prefix="/lab").plan([default_train("nano", tokenized, remat, base)])
    assert plan.steps[-1].output_path == path(base)


def test_simple_train_config_has_no_defaults_of_its_own():
    simple = SimpleTrainConfig(num_train_steps=1, batch_size=1, learning_rate=1.0)
    assert (simple.schedule, simple.warmup, simple.min_lr_ratio) == (
        OPTIMIZER.schedule,
        OPTIMIZER.warmup,
        OPTIMIZER.min_lr_ratio,
    )
    assert (simple.compute_dtype, simple.wandb) == (PRECISION.compute_dtype, TrackerConfig().wandb)
    assert simple.num_microbatches == TRAINER.num_microbatches and simple.keep_every == CheckpointConfig().keep_every
    assert (simple.optimizer, simple.muon_lr_scaling, simple.beta2) == (OPTIMIZER.kind, OPTIMIZER.muon_lr_scaling, 0.95)


def test_checkpoints_store_only_the_result_defining_model_fields():
    stored = result_dict(dataclasses.replace(MODEL, remat="full", attention_backend="pallas"))
    assert "remat" not in stored and "attention_backend" not in stored and "scan_layers" not in stored
    assert LlamaConfig.from_dict(stored) == MODEL
