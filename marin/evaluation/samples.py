"""The samples step: text drawn from a trained model through the serving engine, kept beside its evals.

    sample_text(SampleTextConfig(checkpoint_path=<train step>, tokenizer=<tokenizer step>,
                prompts=("ROMEO:",), num_samples=2, output_path=this_output_path()))

writes ``samples.jsonl`` (one record per sample: ``prompt``, ``text`` (the completion alone), ``seed``,
``tokens``, ``finish_reason``) and ``summary.json``. Sample ``i`` of prompt ``p`` draws with seed
``seed + p * num_samples + i`` (the engine's draws depend only on a request's seed and token index: equal
seeds would give different prompts correlated samples), so a step's samples are reproducible, and the data
browser shows them for the checkpoint.
"""

from __future__ import annotations

import dataclasses
import json
import logging

from marin.inference import load_model, place_params
from marin.inference.engine import Engine, EngineConfig
from marin.inference.sampling_params import from_flags
from marin.storage import join, write_atomic
from marin.storage.records import write_records
from marin.tokenize import eos_id, load_tokenizer, text_encoder
from marin.trainer.model.config import LlamaConfig
from marin.validation import check

logger = logging.getLogger(__name__)
SAMPLES_FILE = "samples.jsonl"


@dataclasses.dataclass(frozen=True, kw_only=True)
class SampleTextConfig:
    checkpoint_path: str
    """A training step's output directory (newest checkpoint) or a Hugging Face export."""
    tokenizer: str
    output_path: str
    prompts: tuple[str, ...] = ("\n",)
    """Each is encoded after the end-of-document token (where a training document starts)."""
    num_samples: int = 2
    """Samples per prompt."""
    max_new_tokens: int | None = None
    """At most this many tokens per sample; None: up to the context's end (the engine never slides it)."""
    temperature: float = 0.8
    top_k: int = 200
    """nanoGPT's ``sample.py`` defaults (temperature 0.8, top-k 200); 0: off."""
    seed: int = 0
    model: LlamaConfig | None = None
    """Default: the config stored with the checkpoint."""

    def __post_init__(self):
        check("SampleTextConfig", "prompts", self.prompts, lambda v: len(v) > 0, "at least one prompt")
        check("SampleTextConfig", "num_samples", self.num_samples, lambda v: v >= 1, ">= 1")
        check("SampleTextConfig", "max_new_tokens", self.max_new_tokens, lambda v: v is None or v >= 1, ">= 1 or None")


def sample_text(config: SampleTextConfig) -> list[dict]:
    """Step: every prompt ``num_samples`` times; returns the records written to ``samples.jsonl``."""
    cfg, weights, step = load_model(config.checkpoint_path, config.model)
    tokenizer = load_tokenizer(config.tokenizer)
    eos = eos_id(tokenizer)
    encoder = text_encoder(tokenizer)
    prompts = [[eos, *encoder.encode(p, add_special_tokens=False).ids] for p in config.prompts]
    requests, params = [], []
    for p, (text, ids) in enumerate(zip(config.prompts, prompts)):
        room = cfg.seq_len - len(ids)
        max_tokens = config.max_new_tokens or room
        if max_tokens > room:
            raise ValueError(
                f"SampleTextConfig.max_new_tokens={max_tokens}: prompt {text!r} ({len(ids)} tokens) leaves room for "
                f"{room} in the model's context of {cfg.seq_len} tokens"
            )
        sampling = from_flags(
            max_tokens=max_tokens, temperature=config.temperature, top_k=config.top_k, seed=config.seed
        )
        for i in range(config.num_samples):
            requests.append((text, ids, p * config.num_samples + i))  # a seed per sample, across prompts too
            params.append(sampling.with_seed_offset(requests[-1][2]))
    engine = Engine(cfg, place_params(cfg, weights), EngineConfig(slots=len(requests)), end_tokens=(eos,))
    results = engine.generate([ids for _, ids, _ in requests], params, detokenize=tokenizer.decode)
    records = [
        {
            "prompt": prompt,
            "text": result.text,
            "seed": config.seed + offset,
            "tokens": len(result.tokens),
            "finish_reason": result.finish_reason,
        }
        for (prompt, _, offset), result in zip(requests, results)
    ]
    write_records(join(config.output_path, SAMPLES_FILE), records)
    summary = {"checkpoint_path": config.checkpoint_path, "checkpoint_step": step, "samples": len(records)}
    write_atomic(join(config.output_path, "summary.json"), json.dumps(summary, indent=2))
    logger.info("samples: %d from step %s", len(records), step)
    return records
