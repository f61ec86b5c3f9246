"""What a trained checkpoint is turned into: evaluations, samples and a Hugging Face export.

    evals = default_eval("nano", model, tokenizer=tok / "tokenizer", validation={"web": tok / "validation"})
    chat = default_instruct_eval("nano-sft", sft, chat_tokenizer=sft_data / "tokenizer", eval_sets={...})
    pairs = default_preference_eval("nano-dpo", dpo, chat_tokenizer=..., pairs={...}, reference=sft)
    export = default_export("nano", model, tokenizer=tok / "tokenizer")

Results land under ``evaluation/…`` (``results.json``), ``samples/…`` and ``exports/…``. ``resources`` is where
the model runs: one CPU is right for the quickstart, an 8B model wants an accelerator host.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from experiments.defaults.inputs import CPU_DATA, Input, named_inputs, step_input, step_inputs
from marin.evaluation.instruct import InstructEvalConfig, evaluate_instruct
from marin.evaluation.samples import SampleTextConfig, sample_text
from marin.evaluation.step import EvalConfig, evaluate_model
from marin.execution import ExecutorStep, ResourceConfig, this_output_path, versioned
from marin.export.step import ExportConfig, export_checkpoint
from marin.trainer.model.config import LlamaConfig


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

    ``tasks`` are task files (YAML or JSONL; a YAML task may name a Hugging Face data set)."""
    return ExecutorStep(
        name=f"evaluation/{name}",
        fn=evaluate_model,
        config=EvalConfig(
            checkpoint_path=checkpoint,
            tokenizer=step_input(tokenizer),
            output_path=this_output_path(),
            model=versioned(model),
            validation=named_inputs(validation),
            tasks=step_inputs(tasks),
            num_fewshot=versioned(num_fewshot),
            max_documents=versioned(max_documents),
            unigram_baseline=named_inputs(unigram_baseline),
            task_limit=versioned(task_limit),
        ),
        resources=resources,
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
            chat_tokenizer=step_input(chat_tokenizer),
            output_path=this_output_path(),
            eval_sets=named_inputs(eval_sets),
            model=versioned(model),
            max_items=versioned(max_items),
            max_new_tokens=versioned(max_new_tokens),
        ),
        resources=resources,
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
            tokenizer=step_input(chat_tokenizer),
            output_path=this_output_path(),
            model=versioned(model),
            chat_tokenizer=step_input(chat_tokenizer),
            preference=named_inputs(pairs),
            preference_reference=reference,
            preference_beta=versioned(beta),
            max_pairs=versioned(max_pairs),
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
            tokenizer=step_input(tokenizer),
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
            tokenizer=step_input(tokenizer) if tokenizer else None,
            output_path=this_output_path(),
            model=versioned(model),
        ),
        resources=resources,
    )
