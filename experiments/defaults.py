"""Step builders that experiments compose in a few lines: download → (extract → classify → filter) → dedupe →
tokenize → train → eval → export; chat data → SFT; preference pairs → DPO.

    raw = default_download("fineweb-edu", "hf://datasets/HuggingFaceFW/fineweb-edu", revision="87f0914")
    docs = default_dedupe("fineweb-edu", raw, eval_sets=[...])
    tok = default_tokenize("fineweb-edu", train=docs, validation=..., tokenizer="meta-llama/Meta-Llama-3.1-8B")
    model = default_train("nano-fw", {"fw": tok}, llama_nano(), SimpleTrainConfig(...))
    evals = default_eval("nano-fw", model, tokenizer=..., validation={"fw": tok / "validation"}, tasks=[...])

Names follow the paths users browse: ``raw/…``, ``documents/…``, ``tokenizers/…``, ``tokenized/…``,
``checkpoints/…``, ``evaluation/…``, ``exports/…``. Every field that defines a step's result is wrapped
in ``versioned`` here (inputs given as plain strings too: a hub tokenizer name or a bucket path is part
of what a step computed from); knobs that only change speed or placement (workers, batch sizes of I/O,
resources) are not, and inside versioned configs the fields declared with ``marin.identity.runtime_field``
(the device mesh, remat, layer scan, attention kernel, microbatches, cadences) never count, so turning
them reuses existing outputs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from experiments.models import SimpleTrainConfig
from marin.allocator import large_buffers_env
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
from marin.dedupe import DedupeConfig, dedupe_documents
from marin.dedupe.config import DecontaminationConfig, ExactDedupeConfig, MinHashConfig, ParagraphDedupeConfig
from marin.download import DownloadConfig, download_dataset
from marin.environments import (
    ArithmeticPromptsConfig,
    EnvironmentConfig,
    Gsm8kConfig,
    generate_arithmetic_prompts,
    prepare_gsm8k,
)
from marin.evaluation.instruct import InstructEvalConfig, evaluate_instruct
from marin.evaluation.samples import SampleTextConfig, sample_text
from marin.evaluation.step import EvalConfig, evaluate_model
from marin.execution import ExecutorStep, InputName, ResourceConfig, output_path_of, this_output_path, versioned
from marin.export.step import ExportConfig, export_checkpoint
from marin.extract import ExtractConfig, ExtractorConfig, extract_pages
from marin.posttrain import (
    PreferenceLossConfig,
    ReferenceLogpsConfig,
    TrainDpoConfig,
    compute_reference_logps,
    train_dpo,
)
from marin.posttrain.rl.config import GrpoConfig, RolloutConfig, TrainRlConfig
from marin.posttrain.rl.loop import train_rl
from marin.quality import (
    AttributeRule,
    ClassifyConfig,
    FastTextConfig,
    FilterConfig,
    TrainClassifierConfig,
    classify_documents,
    filter_documents,
    train_classifier,
)
from marin.scaling.ladder import LadderPoint, LadderRules, isoflop_grid, target_point
from marin.scaling.step import INTERVALS, FitLadderConfig, LadderRunRef, fit_ladder_step
from marin.scaling.surface import SURFACE_OBJECTIVE
from marin.tokenize import TokenizeConfig, TrainTokenizerConfig, tokenize_corpus, train_tokenizer
from marin.tokenize.special import SpecialStringPolicy
from marin.tokenize.tokenizer import DEFAULT_SPECIAL_TOKENS
from marin.trainer.checkpoint import CheckpointConfig
from marin.trainer.data import TokenCacheSourceConfig
from marin.trainer.data.loader import DataConfig
from marin.trainer.data.mixture import MixtureStage
from marin.trainer.loop import TrainerConfig, TrainLmConfig
from marin.trainer.model.config import LlamaConfig
from marin.trainer.optim import OptimizerConfig
from marin.trainer.sft import TrainSftConfig, train_sft
from marin.trainer.step import PrecisionPolicy
from marin.trainer.tracking import TrackerConfig
from marin.trainer.train_lm import train_lm

Input = ExecutorStep | InputName | str

CPU_DATA = ResourceConfig(num_cpus=1)


def _input(value):
    """A step input: another step's output counts for identity by that step's hash; a literal path or hub
    name counts by its value."""
    return versioned(value) if isinstance(value, str) else value


def _inputs(values: Sequence[Input]) -> tuple:
    return tuple(_input(v) for v in values)


def _named_inputs(values: Mapping[str, Input] | None) -> dict:
    return {name: _input(v) for name, v in (values or {}).items()}


def default_download(
    name: str, source: Input, *, revision: str | None = None, patterns: Sequence[str] = (), files: Sequence[str] = ()
) -> ExecutorStep:
    """``raw/<name>``: a hub data set pinned to ``revision``, or any URL (or another step's output)."""
    return ExecutorStep(
        name=f"raw/{name}",
        fn=download_dataset,
        config=DownloadConfig(
            source=_input(source),
            revision=versioned(revision),
            patterns=versioned(tuple(patterns)),
            files=versioned(tuple(files)),
            output_path=this_output_path(),
        ),
        description=f"download {source}",
        resources=CPU_DATA,
    )


def default_extract(
    name: str,
    pages: Input,
    *,
    extractor: str = ExtractorConfig().name,
    markdown: bool = ExtractorConfig().markdown,
    min_chars: int = 50,
    max_workers: int | None = None,
) -> ExecutorStep:
    """``extracted/<name>``: HTML pages (WARC, records with an ``html`` field, .html files) to text documents."""
    return ExecutorStep(
        name=f"extracted/{name}",
        fn=extract_pages,
        config=ExtractConfig(
            input_path=_input(pages),
            output_path=this_output_path(),
            extractor=versioned(ExtractorConfig(name=extractor, markdown=markdown)),
            min_chars=versioned(min_chars),
            max_workers=max_workers,
        ),
        description=f"extract text from {name} pages with {extractor}",
        resources=CPU_DATA,
    )


def default_train_classifier(
    name: str,
    datasets: Mapping[str, Sequence[Input]],
    *,
    fasttext: FastTextConfig = FastTextConfig(),
    max_docs_per_label: int | None = 20_000,
    max_chars: int = 5_000,
) -> ExecutorStep:
    """``classifiers/<name>``: a fastText classifier on labelled document sets, held-out P/R in metrics.json."""
    return ExecutorStep(
        name=f"classifiers/{name}",
        fn=train_classifier,
        config=TrainClassifierConfig(
            datasets={label: _inputs(paths) for label, paths in datasets.items()},
            output_path=this_output_path(),
            fasttext=versioned(fasttext),
            max_docs_per_label=versioned(max_docs_per_label),
            max_chars=versioned(max_chars),
        ),
        description=f"train the {name} classifier on {', '.join(datasets)}",
        resources=CPU_DATA,
    )


def default_classify(
    name: str, documents: Input, classifier: Input, *, attribute: str, max_chars: int = 5_000
) -> ExecutorStep:
    """``attributes/<name>``: a score per label of ``classifier`` for every document, beside each shard."""
    return ExecutorStep(
        name=f"attributes/{name}",
        fn=classify_documents,
        config=ClassifyConfig(
            input_path=_input(documents),
            model_path=_input(classifier),
            output_path=this_output_path(),
            attribute=versioned(attribute),
            max_chars=versioned(max_chars),
        ),
        description=f"score {attribute} of every document",
        resources=CPU_DATA,
    )


def default_filter(
    name: str, documents: Input, attributes: Sequence[Input], rules: Sequence[AttributeRule]
) -> ExecutorStep:
    """``filtered/<name>``: the documents whose attributes pass every rule (thresholds or top-k percent)."""
    return ExecutorStep(
        name=f"filtered/{name}",
        fn=filter_documents,
        config=FilterConfig(
            input_path=_input(documents),
            attribute_paths=_inputs(attributes),
            output_path=this_output_path(),
            rules=versioned(tuple(rules)),
        ),
        description=f"keep documents passing {', '.join(r.name for r in rules)}",
        resources=CPU_DATA,
    )


def default_dedupe(
    name: str,
    documents: Input,
    *,
    eval_sets: Sequence[Input] = (),
    fuzzy_threshold: float = 0.8,
    paragraph: bool = False,
) -> ExecutorStep:
    """``documents/<name>``: exact + MinHash dedupe, optionally paragraph dedupe and decontamination."""
    decontaminate = None
    if eval_sets:
        decontaminate = DecontaminationConfig(
            eval_paths=_inputs(eval_sets), ngram=versioned(13), min_matches=versioned(1)
        )
    return ExecutorStep(
        name=f"documents/{name}",
        fn=dedupe_documents,
        config=DedupeConfig(
            input_path=_input(documents),
            output_path=this_output_path(),
            exact=versioned(ExactDedupeConfig()),
            fuzzy=versioned(MinHashConfig(threshold=fuzzy_threshold)),
            paragraph=versioned(ParagraphDedupeConfig() if paragraph else None),
            decontaminate=decontaminate,
        ),
        description=f"dedupe {name}",
        resources=CPU_DATA,
    )


def default_train_tokenizer(
    name: str,
    documents: Sequence[Input],
    *,
    vocab_size: int = 8192,
    max_documents: int | None = 50_000,
    special_tokens: Sequence[str] = DEFAULT_SPECIAL_TOKENS,
    pre_tokenizer: str = "llama3",
    kind: str = "bpe",
) -> ExecutorStep:
    """``tokenizers/<name>``: a byte-level BPE trained on ``documents``; ``special_tokens`` may reserve more
    than end-of-document and padding (``(*DEFAULT_SPECIAL_TOKENS, *CHAT_SPECIAL_TOKENS)`` for a later
    instruct phase: the model then has their embeddings from the start). ``pre_tokenizer`` "llama3" (the
    default, versioned: tokenizers trained with GPT-2's split before it are never reused as its output)
    keeps chat prompts a prefix of the training ids and equal to ``transformers``' own. ``kind="char"`` derives a
    character vocabulary instead (``marin.tokenize.chars``; ``vocab_size`` then caps it)."""
    # The default set is left out of the identity, so tokenizers declared before the field existed keep theirs.
    specials = tuple(special_tokens)
    return ExecutorStep(
        name=f"tokenizers/{name}",
        fn=train_tokenizer,
        config=TrainTokenizerConfig(
            input_paths=_inputs(documents),
            output_path=this_output_path(),
            vocab_size=versioned(vocab_size),
            max_documents=versioned(max_documents),
            special_tokens=specials if specials == DEFAULT_SPECIAL_TOKENS else versioned(specials),
            pre_tokenizer=versioned(pre_tokenizer),
            # like the default specials: BPE tokenizers declared before the field existed keep their identity
            kind=kind if kind == "bpe" else versioned(kind),
        ),
        resources=CPU_DATA,
    )


def default_tokenize(
    name: str,
    *,
    train: Sequence[Input],
    validation: Sequence[Input] = (),
    tokenizer: Input,
    num_workers: int = 1,
    special_strings: SpecialStringPolicy = "text",
) -> ExecutorStep:
    """``tokenized/<name>``: token caches ``train/`` and ``validation/``. A special token's string in a
    document is encoded as text (``special_strings="drop"`` leaves such documents out); versioned, so caches
    built before special strings were kept as text (whose ids may differ) are never reused."""
    return ExecutorStep(
        name=f"tokenized/{name}",
        fn=tokenize_corpus,
        config=TokenizeConfig(
            train_paths=_inputs(train),
            validation_paths=_inputs(validation),
            tokenizer=_input(tokenizer),
            output_path=this_output_path(),
            num_workers=num_workers,
            special_strings=versioned(special_strings),
        ),
        resources=CPU_DATA,
    )


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
        validation={k: TokenCacheSourceConfig(path=_input(p)) for k, p in validation.items()},
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
    """``train`` expanded field for field into the trainer's own configs."""
    optimizer = OptimizerConfig(
        kind=train.optimizer,
        muon_lr_scaling=train.muon_lr_scaling,
        muon_adam_learning_rate=train.muon_adam_learning_rate,
        muon_ns_dtype=train.muon_ns_dtype,
        learning_rate=train.learning_rate,
        weight_decay=train.weight_decay,
        decay_embeddings=train.decay_embeddings,
        beta1=train.beta1,
        beta2=train.beta2,
        epsilon=train.epsilon,
        max_grad_norm=train.max_grad_norm,
        schedule=train.schedule,
        warmup=train.warmup,
        decay=train.decay,
        min_lr_ratio=train.min_lr_ratio,
        cycles=train.cycles,
        rewarmup=train.rewarmup,
        ema_decay=train.ema_decay,
    )
    trainer = TrainerConfig(
        num_train_steps=train.num_train_steps,
        batch_size=train.batch_size,
        num_microbatches=train.num_microbatches,
        loss_block=train.loss_block,
        mesh=train.mesh,
        sharding=train.sharding,
        host_processes=train.host_processes,
        z_loss=train.z_loss,
        precision=PrecisionPolicy(compute_dtype=train.compute_dtype, matmul_dtype=train.matmul_dtype),
        seed=train.seed,
        log_every=train.log_every,
        eval_every=train.eval_every,
        max_eval_sequences=train.max_eval_sequences,
        eval_batch_size=train.eval_batch_size,
        checkpoint=CheckpointConfig(save_interval_minutes=train.save_interval_minutes, keep_every=train.keep_every),
        tracker=TrackerConfig(wandb=train.wandb, progress_bar=True),
    )
    return trainer, optimizer


def trainer_resources(resources: ResourceConfig) -> ResourceConfig:
    """A training step's resources; on CPU its worker starts with the trainer's malloc policy as glibc
    tunables (``marin.allocator.large_buffers_env``), in force before JAX runs there: a worker pooled
    with other steps, or one where JAX ran first, would get only part of it (docs/trainer.md)."""
    if resources.num_gpus or resources.tpu is not None or any(k.startswith("TPU") for k in resources.resources):
        return resources
    return dataclasses.replace(resources, env_vars={**large_buffers_env(), **resources.env_vars})


def default_eval(
    name: str,
    checkpoint: ExecutorStep,
    *,
    tokenizer: Input,
    validation: Mapping[str, Input],
    tasks: Sequence[Input] = (),
    num_fewshot: int = 0,
    model: LlamaConfig | None = None,
    max_documents: int | None = 1000,
    unigram_baseline: Mapping[str, Input] | None = None,
    task_limit: int | None = None,
    resources: ResourceConfig = CPU_DATA,
) -> ExecutorStep:
    """``evaluation/<name>``: bits-per-byte per validation set and multiple-choice accuracy.

    ``tasks`` are task files (YAML or JSONL; a YAML task may name a Hugging Face data set). ``resources``
    is where the model runs: one CPU is right for the quickstart, an 8B model wants an accelerator host."""
    return ExecutorStep(
        name=f"evaluation/{name}",
        fn=evaluate_model,
        config=EvalConfig(
            checkpoint_path=checkpoint,
            tokenizer=_input(tokenizer),
            output_path=this_output_path(),
            model=versioned(model),
            validation=_named_inputs(validation),
            tasks=_inputs(tasks),
            num_fewshot=versioned(num_fewshot),
            max_documents=versioned(max_documents),
            unigram_baseline=_named_inputs(unigram_baseline),
            task_limit=versioned(task_limit),
        ),
        resources=resources,
    )


def default_samples(
    name: str,
    checkpoint: ExecutorStep,
    *,
    tokenizer: Input,
    prompts: Sequence[str] = ("\n",),
    num_samples: int = 2,
    max_new_tokens: int | None = None,
    temperature: float = 0.8,
    top_k: int = 200,
    seed: int = 0,
) -> ExecutorStep:
    """``samples/<name>``: ``num_samples`` completions of each prompt drawn through the serving engine
    (``marin.evaluation.samples``), shown by the data browser beside the run."""
    return ExecutorStep(
        name=f"samples/{name}",
        fn=sample_text,
        config=SampleTextConfig(
            checkpoint_path=checkpoint,
            tokenizer=_input(tokenizer),
            output_path=this_output_path(),
            prompts=versioned(tuple(prompts)),
            num_samples=versioned(num_samples),
            max_new_tokens=versioned(max_new_tokens),
            temperature=versioned(temperature),
            top_k=versioned(top_k),
            seed=versioned(seed),
        ),
        description=f"samples from {name}",
        resources=CPU_DATA,
    )


def default_export(
    name: str,
    checkpoint: ExecutorStep,
    *,
    tokenizer: Input | None = None,
    model: LlamaConfig | None = None,
    resources: ResourceConfig = CPU_DATA,
) -> ExecutorStep:
    """``exports/<name>``: the newest checkpoint as a Hugging Face ``LlamaForCausalLM`` directory
    (converted in host memory: ``resources`` must hold the parameters, 32 GB in fp32 for an 8B model)."""
    return ExecutorStep(
        name=f"exports/{name}",
        fn=export_checkpoint,
        config=ExportConfig(
            checkpoint_path=checkpoint,
            tokenizer=_input(tokenizer) if tokenizer else None,
            output_path=this_output_path(),
            model=versioned(model),
        ),
        resources=resources,
    )


# ----------------------------------------------------------------------------------------------------------
# The instruct path: chat data -> chat template + masked caches -> SFT from a pretraining checkpoint


def default_chat_data(
    name: str,
    conversations: Sequence[Input],
    *,
    validation: Sequence[Input] = (),
    validation_fraction: float = 0.0,
    on_error: str = "raise",
) -> ExecutorStep:
    """``chat/<name>``: conversation files of any common shape (messages, ShareGPT, Alpaca) normalized into
    ``train/`` and ``validation/`` (explicit files, or a share held out by content hash)."""
    return ExecutorStep(
        name=f"chat/{name}",
        fn=normalize_chat,
        config=ChatDataConfig(
            input_paths=_inputs(conversations),
            validation_paths=_inputs(validation),
            validation_fraction=versioned(validation_fraction),
            on_error=versioned(on_error),
            output_path=this_output_path(),
        ),
        description=f"normalize chat data {name}",
        resources=CPU_DATA,
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
    """``tokenized/<name>``: the chat tokenizer (``tokenizer/``, template included) and masked caches
    ``train/`` and ``validation/`` rendered from a ``default_chat_data`` step. Special-token strings in
    messages are encoded as text (``"drop"`` leaves such conversations out); versioned like the tokenize
    step's."""
    return ExecutorStep(
        name=f"tokenized/{name}",
        fn=tokenize_chat,
        config=SftTokenizeConfig(
            train_paths=(chat / "train",),
            validation_paths=(chat / "validation",),
            tokenizer=_input(tokenizer),
            output_path=this_output_path(),
            model_max_length=versioned(model_max_length),
            num_workers=num_workers,
            special_strings=versioned(special_strings),
        ),
        description=f"render and tokenize {name} with the chat template",
        resources=CPU_DATA,
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
    length = f"{num_epochs:g} epochs" if num_epochs is not None else f"{train.num_train_steps} steps"
    return dataclasses.replace(
        base, fn=train_sft, config=config, description=f"SFT {name}: {model.param_count / 1e6:.1f}M params, {length}"
    )


def default_instruct_eval(
    name: str,
    checkpoint: ExecutorStep,
    *,
    chat_tokenizer: Input,
    eval_sets: Mapping[str, Input],
    model: LlamaConfig | None = None,
    max_items: int | None = 400,
    max_new_tokens: int = 48,
    resources: ResourceConfig = CPU_DATA,
) -> ExecutorStep:
    """``evaluation/instruct/<name>``: exact match and log-likelihood accuracy per assistant turn of held-out
    conversations, and the loss on their assistant tokens (``marin.evaluation.instruct``)."""
    return ExecutorStep(
        name=f"evaluation/instruct/{name}",
        fn=evaluate_instruct,
        config=InstructEvalConfig(
            checkpoint_path=checkpoint,
            chat_tokenizer=_input(chat_tokenizer),
            output_path=this_output_path(),
            eval_sets=_named_inputs(eval_sets),
            model=versioned(model),
            max_items=versioned(max_items),
            max_new_tokens=versioned(max_new_tokens),
        ),
        resources=resources,
    )


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
    transcripts, AlpacaEval annotations, OpenAssistant trees) as one pair schema in ``train/`` and ``validation/``
    (explicit files, or a share of prompts held out by hash)."""
    return ExecutorStep(
        name=f"preferences/{name}",
        fn=normalize_preferences,
        config=PreferenceDataConfig(
            input_paths=_inputs(pairs),
            validation_paths=_inputs(validation),
            validation_fraction=versioned(validation_fraction),
            on_error=versioned(on_error),
            output_path=this_output_path(),
        ),
        description=f"normalize preference pairs {name}",
        resources=CPU_DATA,
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
    """``tokenized/<name>``: the chat tokenizer and pair caches ``train/`` and ``validation/`` of a
    ``default_preference_data`` step, rendered with the chat template (pass the SFT step's ``tokenizer/``)."""
    return ExecutorStep(
        name=f"tokenized/{name}",
        fn=tokenize_preferences,
        config=PreferenceTokenizeConfig(
            train_paths=(preferences / "train",),
            validation_paths=(preferences / "validation",),
            tokenizer=_input(tokenizer),
            output_path=this_output_path(),
            model_max_length=versioned(model_max_length),
            num_workers=num_workers,
            special_strings=versioned(special_strings),
        ),
        description=f"render and tokenize preference pairs {name} with the chat template",
        resources=CPU_DATA,
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
    length = f"{num_epochs:g} epochs" if num_epochs is not None else f"{train.num_train_steps} steps"
    return ExecutorStep(
        name=f"checkpoints/{name}",
        fn=train_dpo,
        config=config,
        description=f"{loss.type} preference optimization {name} (beta {loss.beta}): {length}",
        resources=trainer_resources(train.resources),
    )


def default_preference_eval(
    name: str,
    checkpoint: ExecutorStep,
    *,
    chat_tokenizer: Input,
    pairs: Mapping[str, Input],
    reference: ExecutorStep | None = None,
    beta: float = 0.1,
    model: LlamaConfig | None = None,
    max_pairs: int | None = 500,
    resources: ResourceConfig = CPU_DATA,
) -> ExecutorStep:
    """``evaluation/preference/<name>``: the eval step on held-out preference pairs: how often the model prefers
    the chosen reply and by what margin, and with ``reference`` (the model DPO started from) DPO's implicit
    reward accuracy and margin at ``beta`` (``marin.evaluation.preference``)."""
    return ExecutorStep(
        name=f"evaluation/preference/{name}",
        fn=evaluate_model,
        config=EvalConfig(
            checkpoint_path=checkpoint,
            tokenizer=_input(chat_tokenizer),
            output_path=this_output_path(),
            model=versioned(model),
            chat_tokenizer=_input(chat_tokenizer),
            preference=_named_inputs(pairs),
            preference_reference=reference,
            preference_beta=versioned(beta),
            max_pairs=versioned(max_pairs),
        ),
        resources=resources,
    )


# ----------------------------------------------------------------------------------------------------------
# Scaling ladders: an isoFLOP grid of runs, their evals, and a fit that predicts a larger target run


@dataclasses.dataclass(frozen=True)
class ScalingLadder:
    """The steps of ``default_scaling_ladder``: ``executor_main(steps=ladder.steps)`` runs all of them."""

    runs: tuple[ExecutorStep, ...]
    evals: tuple[ExecutorStep, ...]
    fit: ExecutorStep
    target: ExecutorStep
    target_eval: ExecutorStep

    @property
    def steps(self) -> list[ExecutorStep]:
        return [*self.evals, self.fit, self.target_eval]


def default_scaling_ladder(
    name: str,
    tokenized: ExecutorStep,
    *,
    tokenizer: Input,
    family: Sequence[LlamaConfig],
    budgets: Sequence[float],
    target_budget: float,
    target_model: LlamaConfig,
    rules: LadderRules = LadderRules(),
    train: SimpleTrainConfig,
    heldout: str = "heldout",
    bootstrap_samples: int = 1000,
    skip_invalid_runs: bool = False,
    eval_max_documents: int | None = 1000,
) -> ScalingLadder:
    """An isoFLOP ladder over ``family`` at ``budgets`` (``marin.scaling.ladder``), trained on ``tokenized``'s
    ``train/`` cache and evaluated on its ``validation/`` cache (named ``heldout`` in the results), an
    analysis step ``analysis/<name>-fit`` (``fit.json``), and the target run it predicts: ``target_model``
    trained on ``target_budget``'s tokens under the same rules.

    Each run is ``checkpoints/<name>-<budget>-<size>``, an ordinary training step configured from ``train``
    (precision, seed, cadences) with the rules' steps, batch, learning rate and schedule; its config depends
    on its own budget and size only, so adding a budget adds steps and reruns none. The fit depends on the
    target only ``nonblocking()``: it predicts without waiting for the target and names where its actual
    loss will be. ``skip_invalid_runs``: a run whose loss is NaN or infinite is left out of the fit (and listed
    in ``fit.json``) instead of failing it. ``eval_max_documents`` caps the held-out documents each run is
    scored on (None: all of them; whole books are long)."""

    def run(point: LadderPoint, label: str) -> tuple[ExecutorStep, ExecutorStep, LadderRunRef]:
        return _ladder_run(
            f"{name}-{label}",
            point,
            tokenized,
            tokenizer=tokenizer,
            train=train,
            rules=rules,
            heldout=heldout,
            eval_max_documents=eval_max_documents,
        )

    grid = [run(p, f"{_budget_label(p.budget)}-{p.label}") for p in isoflop_grid(budgets, family, rules)]
    point = target_point(target_budget, target_model, rules)
    target, target_eval, target_ref = run(point, f"target-{_budget_label(target_budget)}-{point.label}")
    config = FitLadderConfig(
        runs=tuple(ref for _, _, ref in grid),
        heldout=versioned(heldout),
        output_path=this_output_path(),
        target=dataclasses.replace(
            target_ref, run_path=target_ref.run_path.nonblocking(), eval_path=target_ref.eval_path.nonblocking()
        ),
        bootstrap_samples=versioned(bootstrap_samples),
        skip_invalid_runs=versioned(skip_invalid_runs),
        objective=versioned(SURFACE_OBJECTIVE),
        intervals=versioned(INTERVALS),
    )
    fit = ExecutorStep(
        name=f"analysis/{name}-fit",
        fn=fit_ladder_step,
        config=config,
        description=f"isoFLOP fit of {len(grid)} runs at {len(budgets)} budgets; predicts {target.name}",
    )
    return ScalingLadder(
        runs=tuple(c for c, _, _ in grid),
        evals=tuple(e for _, e, _ in grid),
        fit=fit,
        target=target,
        target_eval=target_eval,
    )


def _budget_label(budget: float) -> str:
    return f"{budget:.3g}".replace("+", "")


def _ladder_run(
    run_name: str,
    point: LadderPoint,
    tokenized: ExecutorStep,
    *,
    tokenizer: Input,
    train: SimpleTrainConfig,
    rules: LadderRules,
    heldout: str,
    eval_max_documents: int | None = 1000,
) -> tuple[ExecutorStep, ExecutorStep, LadderRunRef]:
    """One ladder run: its training step (``train`` with the rules' steps, batch, rate and schedule), its eval
    on ``heldout``, and the analysis step's reference to both."""
    config = dataclasses.replace(
        train,
        num_train_steps=point.steps,
        batch_size=point.batch_size,
        learning_rate=point.learning_rate,
        schedule="wsd",
        warmup=rules.warmup,
        decay=rules.decay,
        min_lr_ratio=rules.min_lr_ratio,
    )
    checkpoint = default_train(run_name, {heldout: tokenized}, point.model, config, validation={})
    evaluation = default_eval(
        run_name,
        checkpoint,
        tokenizer=tokenizer,
        validation={heldout: tokenized / "validation"},
        model=point.model,
        max_documents=eval_max_documents,
    )
    ref = LadderRunRef(
        run=checkpoint.name,
        run_path=output_path_of(checkpoint),
        eval_path=output_path_of(evaluation),
        budget=point.budget,
        params=point.params,
        tokens=point.tokens,
    )
    return checkpoint, evaluation, ref


# ----------------------------------------------------------------------------------------------------------
# RL with verifiable rewards: prompt sets -> environments -> GRPO from an SFT checkpoint


def default_prompt_set(name: str, source: Input, *, max_rows: int | None = None) -> ExecutorStep:
    """``environments/<name>``: GSM8K-format JSONL (``question`` / ``answer`` ending ``#### n``; a download step
    or any path) as prompt records with verifiable answers (``prompts.jsonl``)."""
    return ExecutorStep(
        name=f"environments/{name}",
        fn=prepare_gsm8k,
        config=Gsm8kConfig(
            input_paths=(_input(source),),
            output_path=this_output_path(),
            id_prefix=versioned(name),
            max_rows=versioned(max_rows),
        ),
        description=f"prompt records with verifiable answers from {name}",
        resources=CPU_DATA,
    )


def default_arithmetic_prompts(kind: str = "addition", seed: int = 0) -> ExecutorStep:
    """``environments/<kind>``: the quickstart's addition or counting questions in the instruct data's training
    phrasings (never its held-out ones), answered as the instruct data answers them."""
    return ExecutorStep(
        name=f"environments/{kind}",
        fn=generate_arithmetic_prompts,
        config=ArithmeticPromptsConfig(output_path=this_output_path(), kind=versioned(kind), seed=versioned(seed)),
        description=f"{kind} prompts for RL, phrased as the training instructions",
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
    process, or on Ray workers; never part of the hash). Its checkpoints are a training run's: evaluation,
    export and serving read them unchanged; resuming is the default."""
    config = TrainRlConfig(
        output_path=this_output_path(),
        initialize_from=initialize_from,
        tokenizer=_input(chat_tokenizer),
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
