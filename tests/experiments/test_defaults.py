"""experiments/defaults: stable step names, which fields define a step's result (and so its output
path), and that speed/placement knobs do not."""

import dataclasses

from experiments.defaults import (
    default_dedupe,
    default_download,
    default_eval,
    default_export,
    default_tokenize,
    default_train,
    default_train_tokenizer,
    mixture_stages,
    trainer_configs,
)
from experiments.models import SimpleTrainConfig, llama_nano
from marin.allocator import large_buffers_env
from marin.execution import Executor, ExecutorStep, ResourceConfig
from marin.trainer.data.mixture import MixtureStage
from marin.trainer.mesh import MeshConfig


def output_path(step: ExecutorStep) -> str:
    return next(p.output_path for p in Executor(prefix="/lab").plan([step]).steps if p.step is step)


def pipeline(tokenizer="meta-llama/Meta-Llama-3.1-8B", revision="abc123", workers=1, **train_overrides):
    raw = default_download("web", "hf://datasets/org/web", revision=revision)
    documents = default_dedupe("web", raw)
    tokenized = default_tokenize(
        "web",
        train=[documents / "documents"],
        validation=["gs://b/val.jsonl"],
        tokenizer=tokenizer,
        num_workers=workers,
    )
    train = SimpleTrainConfig(**{"num_train_steps": 100, "batch_size": 8, "learning_rate": 1e-3, **train_overrides})
    model = default_train("nano-web", {"web": tokenized}, llama_nano(), train)
    return {
        "raw": raw,
        "documents": documents,
        "tokenized": tokenized,
        "model": model,
        "tokenizer": default_train_tokenizer("web-bpe", [documents / "documents"]),
        "eval": default_eval(
            "nano-web",
            model,
            tokenizer=tokenizer,
            validation={"web": "gs://b/val.jsonl"},
            tasks=["gs://b/tasks/arc.yaml"],
        ),
        "export": default_export("nano-web", model, tokenizer=tokenizer),
    }


def test_steps_are_named_where_users_browse():
    names = {k: s.name for k, s in pipeline().items()}
    assert names == {
        "raw": "raw/web",
        "documents": "documents/web",
        "tokenized": "tokenized/web",
        "model": "checkpoints/nano-web",
        "tokenizer": "tokenizers/web-bpe",
        "eval": "evaluation/nano-web",
        "export": "exports/nano-web",
    }


def test_output_paths_are_stable_and_defined_by_what_changes_results():
    base = {k: output_path(s) for k, s in pipeline().items()}
    assert base == {k: output_path(s) for k, s in pipeline().items()}  # same declaration, same paths
    # A string input counts by its value: another tokenizer is another tokenization, eval and export.
    other = {k: output_path(s) for k, s in pipeline(tokenizer="gpt2").items()}
    assert {k for k in base if base[k] != other[k]} == {"tokenized", "model", "eval", "export"}
    # Another revision of the data changes everything downstream of the download.
    other = {k: output_path(s) for k, s in pipeline(revision="def456").items()}
    assert all(base[k] != other[k] for k in base)
    # Workers, microbatches, mesh, sharding and resources only change speed or placement.
    same = pipeline(
        workers=8,
        num_microbatches=4,
        mesh=MeshConfig(data=2, fsdp=-1),
        sharding="dp",
        resources=ResourceConfig(num_cpus=4),
    )
    assert {k: output_path(s) for k, s in same.items()} == base
    # The batch size and learning rate define the training run (and what evaluates it).
    for change in ({"batch_size": 16}, {"learning_rate": 3e-4}, {"schedule": "cosine"}):
        other = {k: output_path(s) for k, s in pipeline(**change).items()}
        assert {k for k in base if base[k] != other[k]} == {"model", "eval", "export"}, change


def test_eval_and_export_version_their_inputs_and_take_resources():
    model = pipeline()["model"]

    def evaluation(**kw):
        args = {"tokenizer": "gpt2", "validation": {"web": "gs://b/val.jsonl"}, "tasks": ["gs://b/arc.yaml"], **kw}
        return output_path(default_eval("e", model, **args))

    base = evaluation()
    assert evaluation(validation={"web": "gs://b/other.jsonl"}) != base
    assert evaluation(tasks=["gs://b/arc.yaml", "gs://b/piqa.yaml"]) != base
    assert evaluation(task_limit=100) != base
    tpu = ResourceConfig.tpu_pod("v4-8")
    assert evaluation(resources=tpu) == base
    assert default_eval("e", model, tokenizer="gpt2", validation={}, resources=tpu).resource_config == tpu
    assert default_export("e", model, resources=tpu).resource_config == tpu
    assert output_path(default_export("e", model, tokenizer="gpt2")) != output_path(default_export("e", model))


def test_cpu_training_steps_start_their_workers_with_the_trainers_malloc_policy():
    """glibc reads its tunables at process start only (marin.allocator): a CPU training step asks for a
    worker of its own started with them; accelerator steps and the run's identity are untouched."""
    cpu = pipeline()["model"]
    assert cpu.resource_config.env_vars == large_buffers_env({})
    assert cpu.resource_config.num_cpus == 1
    gpu = pipeline(resources=ResourceConfig(num_gpus=8))["model"]
    assert gpu.resource_config == ResourceConfig(num_gpus=8)
    assert output_path(gpu) == output_path(cpu)
    ours = pipeline(resources=ResourceConfig(env_vars={"GLIBC_TUNABLES": "x=1"}))["model"]
    assert ours.resource_config.env_vars == {"GLIBC_TUNABLES": "x=1"}  # the experiment's own setting wins
    # host_processes pins a process to each of its cores: the step asks Ray for that many, same identity
    split = pipeline(host_processes=2)["model"]
    assert split.resource_config.num_cpus == 2 and output_path(split) == output_path(cpu)
    assert pipeline(host_processes=2, resources=ResourceConfig(num_cpus=4))["model"].resource_config.num_cpus == 4


def test_mixture_stages_start_at_zero_and_change_at_the_given_steps():
    stages = mixture_stages({"a": 0.7, "b": 0.3}, [(120, {"a": 0.4, "b": 0.6})])
    assert stages == (
        MixtureStage(start_step=0, weights={"a": 0.7, "b": 0.3}),
        MixtureStage(start_step=120, weights={"a": 0.4, "b": 0.6}),
    )
    model = default_train(
        "m",
        {"a": pipeline()["tokenized"]},
        llama_nano(),
        SimpleTrainConfig(num_train_steps=10, batch_size=8, learning_rate=1e-3),
    )
    assert model.config.data.stages.value == (MixtureStage(start_step=0, weights={"a": 1.0}),)


def test_phase_two_initializes_from_phase_one_and_depends_on_it():
    phase1 = pipeline()["model"]
    phase2 = default_train(
        "nano-web-2",
        {"web": pipeline()["tokenized"]},
        llama_nano(),
        SimpleTrainConfig(num_train_steps=50, batch_size=8, learning_rate=1e-3),
        initialize_from=phase1,
    )
    plan = Executor(prefix="/lab").plan([phase2])
    planned = {p.name: p for p in plan.steps}
    assert planned["checkpoints/nano-web-2"].inputs["initialize_from"] == planned["checkpoints/nano-web"].output_path


def test_every_simple_train_field_reaches_the_trainer_config_of_its_name():
    """``trainer_configs`` matches fields by name: each field of ``SimpleTrainConfig`` (but the optimizer's kind
    and the step's resources) must be declared by exactly one of the trainer's configs, or it would be dropped."""
    train = SimpleTrainConfig(
        num_train_steps=7,
        batch_size=3,
        learning_rate=0.5,
        optimizer="muon",
        muon_ns_dtype="bfloat16",
        beta2=0.9,
        compute_dtype="float32",
        matmul_dtype="float8",
        seed=4,
        keep_every=9,
        wandb=False,
        eval_every=11,
    )
    trainer, optimizer = trainer_configs(train)
    built = (trainer, optimizer, trainer.precision, trainer.checkpoint, trainer.tracker)
    for field in dataclasses.fields(SimpleTrainConfig):
        owners = [c for c in built if field.name in {f.name for f in dataclasses.fields(c)}]
        assert len(owners) == (field.name not in ("optimizer", "resources")), (field.name, owners)
        assert all(getattr(c, field.name) == getattr(train, field.name) for c in owners), field.name
    assert optimizer.kind == "muon" and trainer.tracker.progress_bar
