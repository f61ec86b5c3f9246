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
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import jax
import numpy as np

from marin.evaluation.perplexity import evaluate_documents, unigram_bits_per_byte
from marin.evaluation.scoring import Scorer
from marin.evaluation.tasks import MultipleChoiceTask, load_task_yaml, score_task
from marin.progress import progress_bar
from marin.storage import exists, join, write_atomic
from marin.trainer.model.config import LlamaConfig
from marin.validation import check

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True)
class EvalConfig:
    checkpoint_path: str
    """A training step's output directory (newest checkpoint under ``checkpoints/``) or an HF export."""
    tokenizer: str
    output_path: str
    model: LlamaConfig | None = None
    """Required for training checkpoints; HF exports carry their own config.json."""
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

    def __post_init__(self):
        check("EvalConfig", "batch_size", self.batch_size, lambda v: v >= 1, ">= 1")
        check("EvalConfig", "num_fewshot", self.num_fewshot, lambda v: v >= 0, ">= 0")


def load_model(path: str, model: LlamaConfig | None, step: int | None = None) -> tuple[LlamaConfig, Any, int | None]:
    """(config, params, checkpoint step) from an HF export directory or a training run. The parameters are
    host (numpy) arrays: exporting needs nothing else, and ``place_params`` puts them on the devices."""
    if exists(join(path, "config.json")) and exists(join(path, "model.safetensors")):
        from marin.export.hf import import_hf

        cfg, params = import_hf(path)
        return cfg, params, None
    model = model or model_from_run(path)
    from marin.trainer.checkpoint import restore_params
    from marin.trainer.model.llama import init_params

    template = jax.eval_shape(lambda: init_params(model, jax.random.PRNGKey(0)))
    params, found = restore_params(join(path, "checkpoints"), template, step)
    return model, params, found


def place_params(cfg: LlamaConfig, params: Any) -> Any:
    """Host parameters on the devices, once: on a host with several devices (a TPU host's 4 chips)
    FSDP-sharded over all of them, straight from host memory, so a model larger than one device's memory
    (8B in fp32: 32 GB) can be scored; otherwise on the one device. Inputs stay replicated: every device
    computes the whole batch (evaluation needs memory, not speed)."""
    if jax.device_count() == 1:
        return jax.device_put(params)
    from marin.trainer.mesh import MeshConfig, sharding_context, tree_shardings
    from marin.trainer.model import param_axes

    context = sharding_context(MeshConfig(), "fsdp")
    return jax.tree.map(jax.device_put, params, tree_shardings(context, param_axes(cfg), params))


def model_from_run(path: str) -> LlamaConfig:
    """The model config a training step ran with, from its ``.executor_info`` (the executor's record)."""
    from marin.execution.status import INFO_FILE
    from marin.storage import read_text
    from marin.trainer.model.config import Llama3RopeScaling

    info_url = join(path, INFO_FILE)
    if not exists(info_url):
        raise ValueError(f"{path}: no {INFO_FILE} to read the model config from; pass the model config explicitly")
    model = dict(json.loads(read_text(info_url))["config"]["model"])
    if model.get("rope_scaling"):
        model["rope_scaling"] = Llama3RopeScaling(**model["rope_scaling"])
    return LlamaConfig(**model)


def _texts(spec: str, tokenizer) -> Iterator[str]:
    """Documents of a validation set: decoded from a token cache, or read from record files."""
    if exists(join(spec, "cache.json")):
        from marin.tokenize.reader import TokenCache

        cache = TokenCache.open(spec, tokenizer=tokenizer)
        for i in range(cache.num_documents):
            yield tokenizer.decode(cache.document(i).tolist(), skip_special_tokens=False)
        return
    from marin.tokenize.inputs import expand_record_paths, iter_texts

    yield from iter_texts(expand_record_paths(spec))


def token_counts(cache_path: str, vocab_size: int, chunk: int = 1 << 22) -> np.ndarray:
    """How often each token id occurs in a token cache (read in chunks, never whole)."""
    from marin.tokenize.reader import TokenCache

    cache = TokenCache.open(cache_path)
    counts = np.zeros(vocab_size, dtype=np.int64)
    for start in range(0, cache.num_tokens, chunk):
        counts += np.bincount(cache.read(start, min(chunk, cache.num_tokens - start)), minlength=vocab_size)
    return counts


def _task(spec: str, num_fewshot: int, limit: int | None) -> MultipleChoiceTask:
    if spec.endswith((".yaml", ".yml")):
        task = load_task_yaml(spec)
        return dataclasses.replace(task, limit=limit) if limit is not None else task
    name = spec.rstrip("/").rsplit("/", 1)[-1].split(".", 1)[0]
    return MultipleChoiceTask(name=name, path=spec, num_fewshot=num_fewshot, limit=limit)


def evaluate_model(config: EvalConfig) -> dict[str, Any]:
    from marin.tokenize.tokenizer import eos_id, load_tokenizer
    from marin.trainer.model.llama import forward

    cfg, params, step = load_model(config.checkpoint_path, config.model, config.checkpoint_step)
    tokenizer = load_tokenizer(config.tokenizer)
    if tokenizer.get_vocab_size() > cfg.vocab_size:
        raise ValueError(f"tokenizer {config.tokenizer} has {tokenizer.get_vocab_size()} tokens, the model only "
                         f"{cfg.vocab_size}")
    eos = eos_id(tokenizer)

    def encode(text: str) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False).ids

    scorer = Scorer(functools.partial(forward, cfg), params=place_params(cfg, params),
                    batch_size=config.batch_size, max_len=config.max_len or cfg.seq_len, pad_id=eos)
    results: dict[str, Any] = {"checkpoint": config.checkpoint_path, "checkpoint_step": step,
                               "model": dataclasses.asdict(cfg), "tokenizer": config.tokenizer,
                               "config": config_record(config, scorer.max_len), "validation": {}, "tasks": {}}
    bar = progress_bar(len(config.validation) + len(config.tasks), "evaluate", unit="set")
    for name, spec in config.validation.items():
        bar.set_postfix_str(name)
        texts = list(itertools.islice(_texts(spec, tokenizer), config.max_documents))
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
    write_atomic(join(config.output_path, "results.json"), json.dumps(results, indent=2))
    logger.info("evaluation of %s (step %s)\n%s", config.checkpoint_path, step, format_table(results))
    return results


def config_record(config: EvalConfig, max_len: int) -> dict[str, Any]:
    """The eval's own settings for ``results.json`` (the model's are under ``model``), so a number can be
    traced to what produced it without the executor's records."""
    record = {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.name != "model"}
    record.update(max_len=max_len, validation=dict(config.validation), tasks=list(config.tasks),
                  unigram_baseline=dict(config.unigram_baseline))
    return json.loads(json.dumps(record, default=str))  # executor paths and the like as plain strings


def format_table(results: dict[str, Any]) -> str:
    lines = ["| set | loss | perplexity | bits/byte | unigram bits/byte |", "|---|---|---|---|---|"]
    for name, r in results["validation"].items():
        unigram = f"{r['unigram_bits_per_byte']:.4f}" if "unigram_bits_per_byte" in r else "-"
        lines.append(f"| {name} | {r['loss']:.4f} | {r['perplexity']:.2f} | {r['bits_per_byte']:.4f} | {unigram} |")
    if results["tasks"]:
        lines += ["", "| task | k-shot | items | acc | acc 95% CI | acc_norm | chance |",
                  "|---|---|---|---|---|---|---|"]
        for name, r in results["tasks"].items():
            lo, hi = r["acc"]["ci95"]
            lines.append(f"| {name} | {r['num_fewshot']} | {r['items']} | {r['acc']['value']:.3f} | "
                         f"[{lo:.3f}, {hi:.3f}] | {r['acc_norm']['value']:.3f} | {r['chance']:.3f} |")
    return "\n".join(lines)
