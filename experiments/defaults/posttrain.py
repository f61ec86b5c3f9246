"""Post-training steps: SFT on chat data, preference optimization (DPO and its family), and RL (GRPO).

    chat = default_chat_data("instructions", [raw / "instructions.jsonl"], validation_fraction=0.05)
    sft_data = default_sft_tokenize("instructions-sft", chat, tokenizer=tok / "tokenizer")
    sft = default_sft("nano-sft", {"instructions": sft_data}, model, train, initialize_from=base)
    pairs = default_preference_data("pairs", [raw / "pairs.jsonl"], validation_fraction=0.05)
    dpo_data = default_preference_tokenize("pairs-dpo", pairs, tokenizer=sft_data / "tokenizer")
    dpo = default_dpo("nano-dpo", dpo_data, model, dpo_train, initialize_from=sft)
    rl = default_rl("nano-rl", sft, {"addition": default_environment(default_instruction_prompts())}, ...)

Chat data and preference pairs take the same two data steps: rows of any public shape normalized into
``train/`` and ``validation/`` (explicit files, or a share held out by hash), then rendered with the chat
template by the chat tokenizer (``tokenizer/``, template included). A special token's string inside a message
is encoded as text (``special_strings="drop"`` leaves such rows out), versioned like the tokenize step's. Every
phase then runs from ``initialize_from``'s newest parameters, and its checkpoints are a training run's:
evaluation, export and serving read them unchanged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

from experiments.defaults.inputs import CPU_DATA, Input, step_input, step_inputs
from experiments.defaults.training import default_train, trainer_configs, trainer_resources
from experiments.models import SimpleTrainConfig
from marin.chat import (
    ChatDataConfig,
    PreferenceDataConfig,
    PreferenceTokenizeConfig,
    SftTokenizeConfig,
    normalize_chat,
    normalize_preferences,
    tokenize_chat,
    tokenize_preferences,
)
from marin.environments import (
    EnvironmentConfig,
    Gsm8kConfig,
    InstructionPromptsConfig,
    generate_instruction_prompts,
    prepare_gsm8k,
)
from marin.execution import ExecutorStep, ResourceConfig, this_output_path, versioned
from marin.posttrain import (
    PreferenceLossConfig,
    ReferenceLogpsConfig,
    TrainDpoConfig,
    compute_reference_logps,
    train_dpo,
)
from marin.posttrain.rl.config import GrpoConfig, RolloutConfig, TrainRlConfig
from marin.posttrain.rl.loop import train_rl
from marin.tokenize.special import SpecialStringPolicy
from marin.trainer.checkpoint import CheckpointConfig
from marin.trainer.loop import TrainLmConfig
from marin.trainer.model.config import LlamaConfig
from marin.trainer.optim import OptimizerConfig
from marin.trainer.sft import TrainSftConfig, train_sft
from marin.trainer.step import PrecisionPolicy
from marin.trainer.tracking import TrackerConfig

# ----------------------------------------------------------------------------------------------------------
# The two data steps chat data and preference pairs share


def _normalized_rows(
    path: str,
    fn: Callable,
    config_class: type,
    rows: Sequence[Input],
    *,
    validation: Sequence[Input],
    validation_fraction: float,
    on_error: str,
    description: str,
) -> ExecutorStep:
    """``<path>``: ``rows`` normalized by ``fn`` into ``train/`` and ``validation/``."""
    return ExecutorStep(
        name=path,
        fn=fn,
        config=config_class(
            input_paths=step_inputs(rows),
            validation_paths=step_inputs(validation),
            validation_fraction=versioned(validation_fraction),
            on_error=versioned(on_error),
            output_path=this_output_path(),
        ),
        description=description,
        resources=CPU_DATA,
    )


def _rendered_with_template(
    name: str,
    normalized: ExecutorStep,
    fn: Callable,
    config_class: type,
    *,
    tokenizer: Input,
    model_max_length: int | None,
    num_workers: int,
    special_strings: SpecialStringPolicy,
    description: str,
) -> ExecutorStep:
    """``tokenized/<name>``: the chat tokenizer and the caches of ``normalized``'s ``train/`` and ``validation/``."""
    return ExecutorStep(
        name=f"tokenized/{name}",
        fn=fn,
        config=config_class(
            train_paths=(normalized / "train",),
            validation_paths=(normalized / "validation",),
            tokenizer=step_input(tokenizer),
            output_path=this_output_path(),
            model_max_length=versioned(model_max_length),
            num_workers=num_workers,
            special_strings=versioned(special_strings),
        ),
        description=description,
        resources=CPU_DATA,
    )


def _length(train: SimpleTrainConfig, num_epochs: float | None) -> str:
    return f"{num_epochs:g} epochs" if num_epochs is not None else f"{train.num_train_steps} steps"


# ----------------------------------------------------------------------------------------------------------
# SFT: chat data -> chat template + masked caches -> SFT from a pretraining checkpoint


def default_chat_data(
    name: str,
    conversations: Sequence[Input],
    *,
    validation: Sequence[Input] = (),
    validation_fraction: float = 0.0,
    on_error: str = "raise",
) -> ExecutorStep:
    """``chat/<name>``: conversation files of any common shape (messages, ShareGPT, Alpaca), held out by content
    hash."""
    return _normalized_rows(
        f"chat/{name}",
        normalize_chat,
        ChatDataConfig,
        conversations,
        validation=validation,
        validation_fraction=validation_fraction,
        on_error=on_error,
        description=f"normalize chat data {name}",
    )


def default_sft_tokenize(
    name: str,
    chat: ExecutorStep,
    *,
    tokenizer: Input,
    model_max_length: int | None = None,
    num_workers: int = 1,
    special_strings: SpecialStringPolicy = "text",
) -> ExecutorStep:
    """``tokenized/<name>``: the chat tokenizer (``tokenizer/``) and caches of a ``default_chat_data`` step,
    loss-masked to assistant tokens."""
    return _rendered_with_template(
        name,
        chat,
        tokenize_chat,
        SftTokenizeConfig,
        tokenizer=tokenizer,
        model_max_length=model_max_length,
        num_workers=num_workers,
        special_strings=special_strings,
        description=f"render and tokenize {name} with the chat template",
    )


def default_sft(
    name: str,
    sft_sets: Mapping[str, ExecutorStep],
    model: LlamaConfig,
    train: SimpleTrainConfig,
    *,
    initialize_from: ExecutorStep,
    weights: Mapping[str, float] | None = None,
    num_epochs: float | None = None,
    validation: Mapping[str, Input] | None = None,
) -> ExecutorStep:
    """``checkpoints/<name>``: supervised fine-tuning of ``initialize_from``'s newest parameters on a mixture of
    ``default_sft_tokenize`` caches (loss on assistant tokens only), with the pretraining trainer.

    ``num_epochs`` (if given) replaces ``train.num_train_steps`` once the caches' sizes are known;
    ``validation`` defaults to each set's held-out conversations (loss on their assistant tokens)."""
    base = default_train(
        name, sft_sets, model, train, weights=weights, validation=validation, initialize_from=initialize_from
    )
    fields = {f.name: getattr(base.config, f.name) for f in dataclasses.fields(TrainLmConfig)}
    config = TrainSftConfig(**fields, num_epochs=versioned(num_epochs))
    description = f"SFT {name}: {model.param_count / 1e6:.1f}M params, {_length(train, num_epochs)}"
    return dataclasses.replace(base, fn=train_sft, config=config, description=description)


# ----------------------------------------------------------------------------------------------------------
# Preference optimization: pairs -> chat template + pair caches -> DPO from an SFT checkpoint, against itself


def default_preference_data(
    name: str,
    pairs: Sequence[Input],
    *,
    validation: Sequence[Input] = (),
    validation_fraction: float = 0.0,
    on_error: str = "raise",
) -> ExecutorStep:
    """``preferences/<name>``: preference rows of any public shape (explicit/UltraFeedback pairs, HH-RLHF
    transcripts, AlpacaEval annotations, OpenAssistant trees) as one pair schema, held out by prompt."""
    return _normalized_rows(
        f"preferences/{name}",
        normalize_preferences,
        PreferenceDataConfig,
        pairs,
        validation=validation,
        validation_fraction=validation_fraction,
        on_error=on_error,
        description=f"normalize preference pairs {name}",
    )


def default_preference_tokenize(
    name: str,
    preferences: ExecutorStep,
    *,
    tokenizer: Input,
    model_max_length: int | None = None,
    num_workers: int = 1,
    special_strings: SpecialStringPolicy = "text",
) -> ExecutorStep:
    """``tokenized/<name>``: the chat tokenizer and pair caches of a ``default_preference_data`` step (pass the
    SFT step's ``tokenizer/``)."""
    return _rendered_with_template(
        name,
        preferences,
        tokenize_preferences,
        PreferenceTokenizeConfig,
        tokenizer=tokenizer,
        model_max_length=model_max_length,
        num_workers=num_workers,
        special_strings=special_strings,
        description=f"render and tokenize preference pairs {name} with the chat template",
    )


def default_reference_logps(
    name: str,
    checkpoint: ExecutorStep,
    pairs: ExecutorStep,
    model: LlamaConfig,
    *,
    compute_dtype: str = "float32",
    resources: ResourceConfig = CPU_DATA,
) -> ExecutorStep:
    """``reference/<name>``: the frozen reference's log-probabilities of every pair of a
    ``default_preference_tokenize`` step (``train`` and ``validation``), computed once at ``model.seq_len``
    (a forward pass: ``resources`` must hold the model, as an eval's do)."""
    return ExecutorStep(
        name=f"reference/{name}",
        fn=compute_reference_logps,
        config=ReferenceLogpsConfig(
            checkpoint_path=checkpoint,
            pairs={"train": pairs / "train", "validation": pairs / "validation"},
            output_path=this_output_path(),
            model=versioned(model),
            seq_len=versioned(model.seq_len),
            compute_dtype=versioned(compute_dtype),
        ),
        description=f"reference log-probabilities of {pairs.name} under {checkpoint.name}",
        resources=resources,
    )


def default_dpo(
    name: str,
    pairs: ExecutorStep,
    model: LlamaConfig,
    train: SimpleTrainConfig,
    *,
    initialize_from: ExecutorStep,
    loss: PreferenceLossConfig = PreferenceLossConfig(),
    precompute_reference: bool = True,
    reference_resources: ResourceConfig = CPU_DATA,
    num_epochs: float | None = None,
    max_eval_pairs: int = 512,
) -> ExecutorStep:
    """``checkpoints/<name>``: DPO (or IPO, SimPO, ... by ``loss``) of ``initialize_from`` (an SFT step) on a
    ``default_preference_tokenize`` step's pairs, the same checkpoint frozen as the reference. ``train.batch_size``
    counts pairs. ``precompute_reference`` (the default, measured faster in docs/dpo.md) adds a
    ``reference/<name>`` step that computes the reference's log-probabilities once; False runs the reference
    forward in every step (``reference_resources``: where the reference step runs). Held-out pairs
    (``validation/``) are evaluated every ``train.eval_every`` steps."""
    trainer, optimizer = trainer_configs(train)
    reference = None
    if precompute_reference and not loss.reference_free:
        reference = default_reference_logps(
            name, initialize_from, pairs, model, compute_dtype=train.compute_dtype, resources=reference_resources
        )
    config = TrainDpoConfig(
        output_path=this_output_path(),
        model=versioned(model),
        trainer=versioned(trainer),
        optimizer=versioned(optimizer),
        initialize_from=initialize_from,
        train_pairs=pairs / "train",
        validation_pairs={"validation": pairs / "validation"},
        loss=versioned(loss),
        reference_logps=reference,
        num_epochs=versioned(num_epochs),
        seed=versioned(train.seed),
        max_eval_pairs=versioned(max_eval_pairs),
    )
    return ExecutorStep(
        name=f"checkpoints/{name}",
        fn=train_dpo,
        config=config,
        description=f"{loss.type} preference optimization {name} (beta {loss.beta}): {_length(train, num_epochs)}",
        resources=trainer_resources(train.resources),
    )


# ----------------------------------------------------------------------------------------------------------
# RL with verifiable rewards: prompt sets -> environments -> GRPO from an SFT checkpoint


def default_prompt_set(name: str, source: Input, *, max_rows: int | None = None) -> ExecutorStep:
    """``environments/<name>``: GSM8K-format JSONL (``question`` / ``answer`` ending ``#### n``; a download step
    or any path) as prompt records with verifiable answers (``prompts.jsonl``)."""
    return ExecutorStep(
        name=f"environments/{name}",
        fn=prepare_gsm8k,
        config=Gsm8kConfig(
            input_paths=(step_input(source),),
            output_path=this_output_path(),
            id_prefix=versioned(name),
            max_rows=versioned(max_rows),
        ),
        description=f"prompt records with verifiable answers from {name}",
        resources=CPU_DATA,
    )


def default_instruction_prompts(kind: str = "addition", seed: int = 0, phrasings: str = "training") -> ExecutorStep:
    """``environments/<kind>`` (``-practice`` for the practice phrasings): the quickstart's questions of one kind
    (sums, counts, animal sounds, opposites) in the instruct data's training phrasings or in the practice ones
    (never its held-out ones), answered as the instruct data answers them."""
    suffix, phrased = ("", "the training instructions") if phrasings == "training" else (f"-{phrasings}", phrasings)
    config = InstructionPromptsConfig(output_path=this_output_path(), kind=versioned(kind), seed=versioned(seed))
    if phrasings != "training":  # a field only where it differs, so the training phrasings' steps keep their identity
        config = dataclasses.replace(config, phrasings=versioned(phrasings))
    return ExecutorStep(
        name=f"environments/{kind}{suffix}",
        fn=generate_instruction_prompts,
        config=config,
        description=f"{kind} prompts for RL, phrased as {phrased}",
        resources=CPU_DATA,
    )


def default_environment(
    prompt_set: ExecutorStep,
    *,
    rewards: Sequence[tuple[str, float]] = (("numeric", 1.0),),
    system_prompt: str | None = None,
    weight: float = 1.0,
    max_prompts: int | None = None,
) -> EnvironmentConfig:
    """An environment over a prompt-set step's records; every field that changes the run is versioned."""
    return EnvironmentConfig(
        prompts=prompt_set / "prompts.jsonl",
        rewards=versioned(tuple(tuple(r) for r in rewards)),
        system_prompt=versioned(system_prompt),
        weight=versioned(weight),
        max_prompts=versioned(max_prompts),
    )


def default_rl(
    name: str,
    initialize_from: ExecutorStep,
    environments: Mapping[str, EnvironmentConfig],
    *,
    chat_tokenizer: Input,
    grpo: GrpoConfig,
    optimizer: OptimizerConfig,
    precision: PrecisionPolicy | None = None,
    model: LlamaConfig | None = None,
    rollout: RolloutConfig | None = None,
    save_interval_minutes: float | None = 10.0,
    keep_every: int | None = None,
    wandb: bool = True,
    resources: ResourceConfig = CPU_DATA,
) -> ExecutorStep:
    """``checkpoints/<name>``: GRPO from ``initialize_from``'s newest parameters (an SFT step) on
    ``environments`` (``default_environment``), rollouts through the lab's engine (``rollout``: in the step's
    process, or on Ray workers; never part of the hash). Resuming is the default."""
    config = TrainRlConfig(
        output_path=this_output_path(),
        initialize_from=initialize_from,
        tokenizer=step_input(chat_tokenizer),
        environments=dict(environments),
        grpo=versioned(grpo),
        optimizer=versioned(optimizer),
        precision=versioned(precision or PrecisionPolicy(compute_dtype="float32")),
        model=versioned(model),
        rollout=rollout or RolloutConfig(),
        checkpoint=CheckpointConfig(save_interval_minutes=save_interval_minutes, keep_every=keep_every),
        tracker=TrackerConfig(wandb=wandb, progress_bar=True),
    )
    return ExecutorStep(
        name=f"checkpoints/{name}",
        fn=train_rl,
        config=config,
        description=f"GRPO {name}: {grpo.num_iterations} iterations x {grpo.prompts_per_iteration} prompts x "
        f"{grpo.num_generations} completions on {', '.join(environments)}",
        resources=trainer_resources(resources),
    )
