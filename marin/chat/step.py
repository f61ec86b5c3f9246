"""The SFT tokenize step: conversations in, a chat tokenizer and masked token caches out.

    sft = ExecutorStep(name="tokenized/alpaca-sft", fn=tokenize_chat, config=SftTokenizeConfig(
        train_paths=[chat / "train"], validation_paths=[chat / "validation"],
        tokenizer="meta-llama/Meta-Llama-3.1-8B", output_path=this_output_path()))

    <output>/tokenizer/     tokenizer.json + tokenizer_config.json carrying the chat template (HF convention)
    <output>/train/         SFT token cache (ids, offsets, assistant mask)    marin.chat.cache
    <output>/validation/    the same for held-out conversations
    <output>/summary.json   conversations, tokens, trained (masked) tokens, skips, per split

The tokenizer directory is what training, the chat CLI, the instruct eval and the export read, so every
one of them renders conversations with the same template and special tokens.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Sequence

from marin.chat.cache import build_sft_cache
from marin.chat.template import CHAT_TEMPLATE, ChatTokenizer, with_chat_tokens
from marin.storage import join
from marin.storage.records import OnError
from marin.tokenize.special import SpecialStringPolicy, check_policy
from marin.tokenize.step import build_split_caches, cache_options
from marin.tokenize.tokenizer import load_tokenizer
from marin.validation import check

logger = logging.getLogger(__name__)
TOKENIZER_DIR = "tokenizer"


@dataclasses.dataclass(frozen=True, kw_only=True)
class SftTokenizeConfig:
    train_paths: Sequence[str]
    """Conversation files (a chat step's ``train/``; any shape ``marin.chat.schema`` reads)."""
    tokenizer: str
    """A tokenizer.json path/URL, a directory holding one, or a hub repo id; chat tokens are added if missing."""
    output_path: str
    validation_paths: Sequence[str] = ()
    template: str = CHAT_TEMPLATE
    """Jinja chat template (HF convention; assistant turns inside ``{% generation %}`` blocks)."""
    model_max_length: int | None = None
    """Written into tokenizer_config.json (the model's sequence length)."""
    num_workers: int = 1
    """Shards built at once (Ray tasks when > 1); the caches' bytes do not depend on it."""
    batch_size: int = 256
    on_error: OnError = "raise"
    long_document_tokens: int = 4096
    """Conversations longer than this (e.g. the training sequence length) are kept and counted."""
    special_strings: SpecialStringPolicy = "text"
    """A conversation holding a special token's string (a forged ``<|eot_id|>``): 'text' or 'drop'
    (``marin.tokenize.special``); only the template emits control tokens."""

    def __post_init__(self):
        check("SftTokenizeConfig", "train_paths", self.train_paths, lambda v: len(v) > 0, "at least one path")
        check(
            "SftTokenizeConfig",
            "template",
            self.template,
            lambda v: "generation" in v,
            "a template marking assistant turns with {% generation %} ... {% endgeneration %}",
        )
        check("SftTokenizeConfig", "num_workers", self.num_workers, lambda v: v >= 1, ">= 1")
        check_policy("SftTokenizeConfig", self.special_strings)


def save_chat_tokenizer(config) -> tuple[str, ChatTokenizer]:
    """The chat tokenizer of a chat tokenize ``config`` (SFT or preference: its ``tokenizer`` with the chat tokens,
    its ``template``) saved under ``<output_path>/tokenizer/``, where training and serving read it."""
    tokenizer_dir = join(config.output_path, TOKENIZER_DIR)
    chat = ChatTokenizer(with_chat_tokens(load_tokenizer(config.tokenizer)), template=config.template)
    chat.save(tokenizer_dir, model_max_length=config.model_max_length)
    return tokenizer_dir, chat


def tokenize_chat(config: SftTokenizeConfig) -> None:
    tokenizer_dir, chat = save_chat_tokenizer(config)
    build = functools.partial(
        build_sft_cache,
        tokenizer_dir=tokenizer_dir,
        **cache_options(config),
    )
    build_split_caches(
        config.output_path,
        {"train": config.train_paths, "validation": config.validation_paths},
        build,
        summary={"tokenizer": tokenizer_dir, "vocab_size": chat.tokenizer.get_vocab_size()},
        extra_keys=("num_masked_tokens",),
    )
