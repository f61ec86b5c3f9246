"""The eval step: a trained model in, ``results.json`` and a readable table out.

    EvalConfig(checkpoint_path=<train step output>, model=llama_nano(), tokenizer=<tokenizer step>,
               validation={"stories": <cache dir or record files>}, tasks=("eval/animal_sounds.jsonl", ...),
               output_path=this_output_path())

``checkpoint_path`` is a training run's output directory (its ``checkpoints/``) or a Hugging Face export.
Validation sets report loss, perplexity and bits-per-byte; tasks report acc / acc_norm with standard error
and 95% interval, next to chance.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from marin.evaluation.datasets import token_counts, validation_texts
from marin.evaluation.perplexity import evaluate_documents, unigram_bits_per_byte
from marin.evaluation.results import config_record, format_table
from marin.evaluation.scoring import Scorer
from marin.evaluation.tasks import MultipleChoiceTask, load_task_yaml, score_task
from marin.inference import load_model, place_params
from marin.progress import progress_bar
from marin.storage import join, write_atomic
from marin.tokenize.special import text_encoder
from marin.tokenize.tokenizer import eos_id, load_tokenizer
from marin.trainer.model.config import LlamaConfig
from marin.trainer.model.llama import forward
from marin.validation import check

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True)
class EvalConfig:
    checkpoint_path: str
    """A training step's output directory (newest checkpoint under ``checkpoints/``) or an HF export."""
    tokenizer: str
    output_path: str
    model: LlamaConfig | None = None
    """Default: the config stored with the checkpoint (HF exports carry their own config.json)."""
    checkpoint_step: int | None = None
    """Evaluate this step's checkpoint instead of the newest."""
    validation: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Name -> a token cache directory (holding cache.json) or record files/directories/globs."""
    tasks: Sequence[str] = ()
    """Multiple-choice task files: YAML task definitions (JSONL items or a Hugging Face data set, see
    ``marin.evaluation.tasks``) or JSONL item files."""
    num_fewshot: int = 0
    """For tasks given as JSONL (YAML tasks carry their own)."""
    max_documents: int | None = 1000
    """Documents per validation set (from its start)."""
    unigram_baseline: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Validation set name -> a training token cache: also report the bits-per-byte of a unigram model
    fitted on that cache (the floor any trained model must clearly beat)."""
    task_limit: int | None = None
    batch_size: int = 32
    max_len: int | None = None
    """Scoring window; default the model's seq_len."""
    lm_eval_tasks: Sequence[str] = ()
    """lm-evaluation-harness tasks (names from its library or ``lm_eval_include_path``): log-likelihood,
    rolling and generative, reported under ``lm_eval`` in ``results.json`` (``marin.evaluation.harness``)."""
    lm_eval_via: str = "engine"
    """``"engine"``: in process, batched; ``"server"``: lm-eval's ``local-completions`` against the lab's
    OpenAI-compatible server on loopback."""
    lm_eval_include_path: str | None = None
    lm_eval_limit: int | None = None
    lm_eval_num_fewshot: int | None = None
    preference: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Name -> preference pair files (any shape ``marin.chat.preference`` reads): how often the model prefers the
    chosen reply, and by what margin (``marin.evaluation.preference``); needs ``chat_tokenizer``."""
    chat_tokenizer: str | None = None
    """The chat tokenizer preference pairs are rendered with (a chat or preference tokenize step's ``tokenizer/``)."""
    preference_reference: str | None = None
    """The model DPO started from (a run or an HF export): adds DPO's implicit reward accuracy and margin."""
    preference_beta: float = 0.1
    """β of the implicit reward ``β·(log p − log p_ref)`` (the DPO run's)."""
    max_pairs: int | None = 500
    """Pairs per preference set (from its start)."""

    def __post_init__(self):
        from marin.evaluation.harness import HARNESS_VIAS

        check("EvalConfig", "batch_size", self.batch_size, lambda v: v >= 1, ">= 1")
        check("EvalConfig", "num_fewshot", self.num_fewshot, lambda v: v >= 0, ">= 0")
        check("EvalConfig", "lm_eval_via", self.lm_eval_via, lambda v: v in HARNESS_VIAS, f"one of {HARNESS_VIAS}")
        if self.preference and not self.chat_tokenizer:
            raise ValueError("EvalConfig.chat_tokenizer must be set to score preference pairs (EvalConfig.preference)")


def _task(spec: str, num_fewshot: int, limit: int | None) -> MultipleChoiceTask:
    if spec.endswith((".yaml", ".yml")):
        task = load_task_yaml(spec)
        return dataclasses.replace(task, limit=limit) if limit is not None else task
    name = spec.rstrip("/").rsplit("/", 1)[-1].split(".", 1)[0]
    return MultipleChoiceTask(name=name, path=spec, num_fewshot=num_fewshot, limit=limit)


def _preference(config: EvalConfig, scorer: Scorer) -> dict[str, Any]:
    """Each preference set's accuracy and margin; DPO's reward against ``preference_reference`` when given."""
    from marin.chat.template import ChatTokenizer
    from marin.evaluation.preference import load_pairs, score_preferences

    chat = ChatTokenizer.load(config.chat_tokenizer)
    reference = None
    if config.preference_reference:
        ref_cfg, ref_params, _ = load_model(config.preference_reference, config.model)
        reference = Scorer(
            functools.partial(forward, ref_cfg),
            params=place_params(ref_cfg, ref_params),
            batch_size=scorer.batch_size,
            max_len=scorer.max_len,
            pad_id=scorer.pad_id,
        )
    out = {}
    for name, spec in config.preference.items():
        pairs = load_pairs(spec, config.max_pairs)
        out[name] = score_preferences(scorer, chat, pairs, reference=reference, beta=config.preference_beta)
        logger.info("preference %s: accuracy %.3f over %d pairs", name, out[name]["accuracy"]["value"], len(pairs))
    return out


def evaluate_model(config: EvalConfig) -> dict[str, Any]:
    cfg, params, step = load_model(config.checkpoint_path, config.model, config.checkpoint_step)
    tokenizer = load_tokenizer(config.tokenizer)
    if tokenizer.get_vocab_size() > cfg.vocab_size:
        raise ValueError(
            f"tokenizer {config.tokenizer} has {tokenizer.get_vocab_size()} tokens, the model only {cfg.vocab_size}"
        )
    eos = eos_id(tokenizer)
    as_text = text_encoder(tokenizer)  # a special token's string in a task is text, never a control token

    def encode(text: str) -> list[int]:
        return as_text.encode(text, add_special_tokens=False).ids

    scorer = Scorer(
        functools.partial(forward, cfg),
        params=place_params(cfg, params),
        batch_size=config.batch_size,
        max_len=config.max_len or cfg.seq_len,
        pad_id=eos,
    )
    results: dict[str, Any] = {
        "checkpoint": config.checkpoint_path,
        "checkpoint_step": step,
        "model": dataclasses.asdict(cfg),
        "params": cfg.param_count,
        "tokenizer": config.tokenizer,
        "config": config_record(config, scorer.max_len),
        "validation": {},
        "tasks": {},
    }
    bar = progress_bar(len(config.validation) + len(config.tasks), "evaluate", unit="set")
    for name, spec in config.validation.items():
        bar.set_postfix_str(name)
        texts = list(itertools.islice(validation_texts(spec, tokenizer), config.max_documents))
        results["validation"][name] = evaluate_documents(scorer, texts, encode, eos)
        if name in config.unigram_baseline:
            counts = token_counts(config.unigram_baseline[name], cfg.vocab_size)
            results["validation"][name]["unigram_bits_per_byte"] = unigram_bits_per_byte(counts, texts, encode, eos)
        logger.info("validation %s: %s", name, results["validation"][name])
        bar.update()
    for spec in config.tasks:
        task = _task(spec, config.num_fewshot, config.task_limit)
        bar.set_postfix_str(task.name)
        # the task as scored: its source, k-shot, few-shot seed, delimiters, limit and field mapping
        results["tasks"][task.name] = {**score_task(task, scorer, encode, eos), "config": dataclasses.asdict(task)}
        bar.update()
    bar.close()
    if config.preference:
        results["preference"] = _preference(config, scorer)
    if config.lm_eval_tasks:
        from marin.evaluation.harness import run_harness

        results["lm_eval"] = run_harness(
            config.checkpoint_path,
            config.tokenizer,
            config.lm_eval_tasks,
            via=config.lm_eval_via,
            include_path=config.lm_eval_include_path,
            batch_size=config.batch_size,
            limit=config.lm_eval_limit,
            num_fewshot=config.lm_eval_num_fewshot,
        )
    write_atomic(join(config.output_path, "results.json"), json.dumps(results, indent=2))
    logger.info("evaluation of %s (step %s)\n%s", config.checkpoint_path, step, format_table(results))
    return results
