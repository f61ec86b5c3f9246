"""Instruct eval: does a model answer held-out instructions in the chat format?

    evaluate_instruct(InstructEvalConfig(checkpoint_path=<SFT run>, chat_tokenizer=<sft step>/tokenizer,
                                         eval_sets={"instructions": "held_out.jsonl"}, output_path=...))

Each eval item is a conversation (``{"messages": [...]}``, any shape ``marin.chat.schema`` reads), and every
assistant turn is scored given the turns before it, rendered with the chat template:

- ``exact_match``: the greedy reply (KV-cache decoding, stopped at end-of-turn) equals the reference turn
  (both stripped of surrounding whitespace);
- ``loglik_acc``: for items with ``choices`` and ``gold`` (candidate replies to the last turn), the gold reply
  has the highest log-likelihood (its end-of-turn token included), lm-eval-harness style;
- ``assistant_loss``: mean negative log-likelihood (nats) of the assistant tokens of the held-out
  conversations, the same tokens the SFT loss counts.

``results.json`` holds ``instruct: {set: {...}}`` with standard errors, per-``kind`` breakdowns and a few
sample replies, beside the checkpoint and config like the other evals.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import json
import logging
from collections.abc import Mapping
from typing import Any

import numpy as np

from marin.chat.schema import normalize_record
from marin.chat.template import ChatTokenizer
from marin.evaluation.scoring import Scorer
from marin.evaluation.stats import rate
from marin.storage import join, write_atomic
from marin.storage.records import read_records
from marin.tokenize.inputs import expand_record_paths
from marin.trainer.model.config import LlamaConfig
from marin.validation import check

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True)
class InstructEvalConfig:
    checkpoint_path: str
    """A training (pretraining or SFT) step's output directory, or an HF export."""
    chat_tokenizer: str
    """A chat tokenizer directory (``tokenizer_config.json`` with the template), e.g. ``<sft step>/tokenizer``."""
    output_path: str
    eval_sets: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Name -> conversation files (JSONL/Parquet; optional ``choices``/``gold``/``kind`` per item)."""
    model: LlamaConfig | None = None
    """Required for training checkpoints written without their config; HF exports carry their own."""
    max_items: int | None = 400
    """Items per set (from its start)."""
    max_new_tokens: int = 48
    batch_size: int = 32
    num_samples: int = 8
    """Replies kept in results.json per set, for reading."""

    def __post_init__(self):
        check("InstructEvalConfig", "max_new_tokens", self.max_new_tokens, lambda v: v >= 1, ">= 1")
        check("InstructEvalConfig", "batch_size", self.batch_size, lambda v: v >= 1, ">= 1")


@dataclasses.dataclass
class Turn:
    item: int
    kind: str
    messages: list[dict]
    prompt: np.ndarray
    reference: str
    choices: list[str] | None = None
    gold: int | None = None


def load_items(spec: str, limit: int | None) -> list[dict]:
    items = []
    for url in expand_record_paths(spec):
        for record in read_records(url):
            items.append(record)
            if limit is not None and len(items) >= limit:
                return items
    return items


def turns_of(chat: ChatTokenizer, items: list[dict]) -> list[Turn]:
    """Every assistant turn of every item, with the ids of the conversation before it."""
    turns = []
    for i, item in enumerate(items):
        messages = normalize_record(item)
        last = max(j for j, m in enumerate(messages) if m["role"] == "assistant")
        for j, message in enumerate(messages):
            if message["role"] != "assistant":
                continue
            choices = item.get("choices") if j == last else None
            turns.append(
                Turn(
                    i,
                    item.get("kind", "all"),
                    messages[:j],
                    chat.encode_prompt(messages[:j]),
                    message["content"],
                    choices,
                    item.get("gold") if choices else None,
                )
            )
    return turns


def generate_replies(chat: ChatTokenizer, cfg: LlamaConfig, params: Any, turns: list[Turn], config) -> list[str]:
    """Greedy replies, continuously batched through the serving engine (``config.batch_size`` slots); a
    reply gets the context left after its prompt when that is less than ``max_new_tokens``."""
    from marin.inference.engine import Engine, EngineConfig
    from marin.inference.sampling_params import SamplingParams

    engine = Engine(cfg, params, EngineConfig(slots=config.batch_size), end_tokens=(chat.eot_id,))
    params_each = [
        SamplingParams(max_tokens=max(0, min(config.max_new_tokens, cfg.seq_len - len(t.prompt))), temperature=0.0)
        for t in turns
    ]
    results = engine.generate([t.prompt.tolist() for t in turns], params_each)
    return [chat.decode_reply(r.tokens) for r in results]


def score_set(chat: ChatTokenizer, cfg: LlamaConfig, params: Any, scorer: Scorer, items: list[dict], config) -> dict:
    turns = turns_of(chat, items)
    replies = generate_replies(chat, cfg, params, turns, config)
    exact = [r.strip() == t.reference.strip() for r, t in zip(replies, turns)]
    # Every turn's choices in one scorer call: its batches are then full (one call per turn padded each
    # batch of 32 rows to a turn's 4 choices, 8x the forward passes).
    requests = [(t.prompt.tolist(), _reply_ids(chat, t, c)) for t in turns for c in t.choices]
    scores = iter([s for s, _ in scorer.loglikelihood(requests)])
    loglik: list[bool] = []
    by_kind: dict[str, dict[str, list[bool]]] = collections.defaultdict(lambda: {"exact": [], "loglik": []})
    for t, hit in zip(turns, exact):
        by_kind[t.kind]["exact"].append(hit)
        if t.choices:
            turn_scores = [next(scores) for _ in t.choices]
            loglik.append(int(np.argmax(turn_scores)) == t.gold)
            by_kind[t.kind]["loglik"].append(loglik[-1])
    encoded = [chat.encode(normalize_record(item)) for item in items]
    nll = scorer.token_nll([ids for ids, _ in encoded])
    masked = np.concatenate([n[mask[1:]] for n, (_, mask) in zip(nll, encoded)])
    return {
        "items": len(items),
        "turns": len(turns),
        "exact_match": rate(exact),
        # per turn, in order: two models' evals compare item by item (marin.evaluation.stats.paired_difference)
        "exact_hits": [int(h) for h in exact],
        "turn_kinds": [t.kind for t in turns],
        "loglik_acc": rate(loglik) if loglik else None,
        "chance": float(np.mean([1 / len(t.choices) for t in turns if t.choices])) if loglik else None,
        "assistant_loss": float(masked.mean()),
        "assistant_tokens": int(masked.size),
        "by_kind": {
            k: {
                "exact_match": rate(v["exact"])["value"],
                "loglik_acc": rate(v["loglik"])["value"] if v["loglik"] else None,
            }
            for k, v in sorted(by_kind.items())
        },
        "samples": [
            {"question": t.messages[-1]["content"], "reference": t.reference, "reply": r}
            for t, r in list(zip(turns, replies))[: config.num_samples]
        ],
    }


def _reply_ids(chat: ChatTokenizer, turn: Turn, reply: str) -> list[int]:
    """A candidate reply's ids as training renders the turn (its text and end-of-turn token)."""
    ids, _ = chat.encode(turn.messages + [{"role": "assistant", "content": reply}])
    if ids[: len(turn.prompt)].tolist() != turn.prompt.tolist():
        raise ValueError(f"item {turn.item}: the prompt's ids are not a prefix of the conversation's")
    return ids[len(turn.prompt) :].tolist()


def evaluate_instruct(config: InstructEvalConfig) -> dict[str, Any]:
    from marin.inference import load_model, place_params
    from marin.trainer.model.llama import forward

    cfg, params, step = load_model(config.checkpoint_path, config.model)
    chat = ChatTokenizer.load(config.chat_tokenizer)
    if chat.tokenizer.get_vocab_size() > cfg.vocab_size:
        raise ValueError(
            f"chat tokenizer {config.chat_tokenizer} has {chat.tokenizer.get_vocab_size()} tokens, the "
            f"model only {cfg.vocab_size}"
        )
    params = place_params(cfg, params)
    scorer = Scorer(
        functools.partial(forward, cfg),
        params=params,
        batch_size=config.batch_size,
        max_len=cfg.seq_len,
        pad_id=chat.eot_id,
    )
    results: dict[str, Any] = {
        "checkpoint": config.checkpoint_path,
        "checkpoint_step": step,
        "model": dataclasses.asdict(cfg),
        "tokenizer": config.chat_tokenizer,
        "config": json.loads(
            json.dumps(
                {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.name != "model"}, default=str
            )
        ),
        "instruct": {},
    }
    for name, spec in config.eval_sets.items():
        items = load_items(spec, config.max_items)
        results["instruct"][name] = score_set(chat, cfg, params, scorer, items, config)
        r = results["instruct"][name]
        logger.info(
            "instruct %s: exact match %.3f, loglik acc %s, assistant loss %.4f",
            name,
            r["exact_match"]["value"],
            f"{r['loglik_acc']['value']:.3f}" if r["loglik_acc"] else "-",
            r["assistant_loss"],
        )
    write_atomic(join(config.output_path, "results.json"), json.dumps(results, indent=2))
    return results
