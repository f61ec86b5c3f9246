"""Shared material for the post-training tests: real public pairs, a chat tokenizer trained on their text,
a tiny model's random policy and reference parameters, and pair caches built by the real steps."""

import dataclasses
import json
from pathlib import Path

import jax
import numpy as np
import pytest

from marin.chat import CHAT_SPECIAL_TOKENS, ChatTokenizer, build_pair_cache, normalize_preference
from marin.tokenize import TrainTokenizerConfig, build_bpe_tokenizer
from marin.trainer.model import LlamaConfig, init_params

DATA = Path(__file__).resolve().parents[1] / "data"
TINY = LlamaConfig(vocab_size=1024, hidden_dim=64, mlp_dim=128, num_layers=2, num_heads=4, num_kv_heads=2, seq_len=256)


def public_pairs() -> list[dict]:
    """Normalized pairs from the OpenAssistant trees and the AlpacaEval annotations, alternating sources."""
    oasst = [
        p
        for line in (DATA / "public_chat/oasst_en_100_trees.jsonl").read_text().splitlines()
        for p in normalize_preference(json.loads(line))
    ]
    alpaca = []
    for row in json.loads((DATA / "public_preferences/alpaca_eval_gpt4_annotations_300.json").read_text()):
        if row["preference"] in (1, 2):
            alpaca += normalize_preference(row)
    return [p for pair in zip(oasst, alpaca) for p in pair]


def random_params(cfg: LlamaConfig, seed: int, scale: float = 3.0) -> dict:
    """Numpy draws at ``scale`` times the init's spread (peakier logits than an untrained init), norms 1."""
    rng = np.random.default_rng(seed)
    shapes = jax.eval_shape(lambda: init_params(cfg, jax.random.PRNGKey(0)))
    return jax.tree.map(
        lambda s: (
            rng.normal(size=s.shape) * scale * cfg.initializer_range if len(s.shape) > 1 else np.ones(s.shape)
        ).astype(np.float32),
        shapes,
    )


@pytest.fixture(scope="session")
def pairs():
    return public_pairs()


@pytest.fixture(scope="session")
def chat_dir(tmp_path_factory, pairs):
    """A 1,000-token chat BPE (llama3 split, chat tokens reserved) trained on the pairs' text, saved with the
    template the way the tokenize steps save it."""
    texts = [m["content"] for p in pairs[:400] for m in [*p["prompt"], *p["chosen"], *p["rejected"]]]
    config = TrainTokenizerConfig(
        input_paths=["-"],
        output_path="-",
        vocab_size=1000,
        special_tokens=("<|endoftext|>", "<|pad|>", *CHAT_SPECIAL_TOKENS),
    )
    path = tmp_path_factory.mktemp("chat") / "tokenizer"
    chat = ChatTokenizer(build_bpe_tokenizer(iter(texts), config))
    assert chat.tokenizer.get_vocab_size() <= TINY.vocab_size
    chat.save(str(path))
    return path


def write_pair_cache(root: Path, pairs: list[dict], chat_dir: Path) -> Path:
    """``pairs`` as a normalized pair file and its pair cache (the tokenize step's own code)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "pairs.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pairs))
    build_pair_cache([str(root / "pairs.jsonl")], str(root / "cache"), str(chat_dir))
    return root / "cache"


@pytest.fixture(scope="session")
def tiny():
    return dataclasses.replace(TINY)
