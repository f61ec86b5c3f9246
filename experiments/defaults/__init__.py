"""Step builders that experiments compose in a few lines, one module per phase:

- ``data``: download → (extract → classify → filter) → dedupe → (train a tokenizer) → tokenize;
- ``training``: train on a mixture of token caches, in phases;
- ``posttrain``: chat data → SFT; preference pairs → DPO; prompt sets → environments → GRPO;
- ``evaluation``: evals (base, instruct, preference), samples, Hugging Face exports;
- ``ladders``: an isoFLOP ladder, its evals and the fit that predicts a target run.

    raw = default_download("fineweb-edu", "hf://datasets/HuggingFaceFW/fineweb-edu", revision="87f0914")
    docs = default_dedupe("fineweb-edu", raw, eval_sets=[...])
    tok = default_tokenize("fineweb-edu", train=[docs / "documents"], tokenizer="meta-llama/Meta-Llama-3.1-8B")
    model = default_train("nano-fw", {"fw": tok}, llama_nano(), SimpleTrainConfig(...))
    evals = default_eval("nano-fw", model, tokenizer=..., validation={"fw": tok / "validation"}, tasks=[...])

Names follow the paths users browse: ``raw/…``, ``documents/…``, ``tokenizers/…``, ``tokenized/…``,
``checkpoints/…``, ``evaluation/…``, ``exports/…``. Every field that defines a step's result is wrapped in
``versioned`` (inputs given as plain strings too: a hub tokenizer name or a bucket path is part of what a step
computed from; ``inputs.step_input``); knobs that only change speed or placement (workers, batch sizes of I/O,
resources) are not, so changing them reuses existing outputs.
"""

from experiments.defaults.data import (
    default_classify,
    default_dedupe,
    default_download,
    default_extract,
    default_filter,
    default_tokenize,
    default_train_classifier,
    default_train_tokenizer,
)
from experiments.defaults.evaluation import (
    default_eval,
    default_export,
    default_instruct_eval,
    default_preference_eval,
    default_samples,
)
from experiments.defaults.inputs import CPU_DATA, Input
from experiments.defaults.ladders import ScalingLadder, default_scaling_ladder
from experiments.defaults.posttrain import (
    default_chat_data,
    default_dpo,
    default_environment,
    default_instruction_prompts,
    default_preference_data,
    default_preference_tokenize,
    default_prompt_set,
    default_reference_logps,
    default_rl,
    default_sft,
    default_sft_tokenize,
)
from experiments.defaults.training import default_train, mixture_stages, trainer_configs, trainer_resources
from marin.execution import output_path_of  # imported from here by experiments written before the split

__all__ = [
    "CPU_DATA",
    "Input",
    "ScalingLadder",
    "default_instruction_prompts",
    "default_chat_data",
    "default_classify",
    "default_dedupe",
    "default_download",
    "default_dpo",
    "default_environment",
    "default_eval",
    "default_export",
    "default_extract",
    "default_filter",
    "default_instruct_eval",
    "default_preference_data",
    "default_preference_eval",
    "default_preference_tokenize",
    "default_prompt_set",
    "default_reference_logps",
    "default_rl",
    "default_samples",
    "default_scaling_ladder",
    "default_sft",
    "default_sft_tokenize",
    "default_tokenize",
    "default_train",
    "default_train_classifier",
    "default_train_tokenizer",
    "mixture_stages",
    "output_path_of",
    "trainer_configs",
    "trainer_resources",
]
