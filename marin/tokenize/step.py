"""The tokenize step: record files in, one token cache per split out (``<output>/train``, ``<output>/validation``)."""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

from marin.storage import join, write_atomic
from marin.storage.records import OnError
from marin.tokenize.inputs import expand_record_paths
from marin.tokenize.special import SpecialStringPolicy, check_policy
from marin.tokenize.tokenizer import load_tokenizer
from marin.tokenize.writer import build_cache
from marin.validation import check

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class TokenizeConfig:
    train_paths: Sequence[str]
    """Record files, directories or globs of the training split."""
    validation_paths: Sequence[str]
    """Same for the held-out split (may be empty)."""
    tokenizer: str
    """A tokenizer.json path/URL, a directory holding one, or a hub repo id."""
    output_path: str
    text_key: str = "text"
    eos_token: str | None = None
    """End-of-document token; default: the tokenizer's first known EOS spelling."""
    num_workers: int = 1
    """Shards built at once (Ray tasks when > 1). The cache's bytes do not depend on it."""
    batch_size: int = 1024
    on_error: OnError = "raise"
    """'raise': a malformed record stops the step naming file and line; 'skip': count and go on."""
    long_document_tokens: int = 4096
    """Documents longer than this (e.g. the training sequence length) are kept and counted in the ledger."""
    special_strings: SpecialStringPolicy = "text"
    """A document holding a special token's string: 'text' or 'drop' (``marin.tokenize.special``)."""

    def __post_init__(self):
        # check() skips executor placeholders: the executor re-validates the concrete config.
        check("TokenizeConfig", "train_paths", self.train_paths, lambda v: len(v) > 0, "at least one path")
        check("TokenizeConfig", "num_workers", self.num_workers, lambda v: v >= 1, ">= 1")
        check("TokenizeConfig", "batch_size", self.batch_size, lambda v: v >= 1, ">= 1")
        check("TokenizeConfig", "on_error", self.on_error, lambda v: v in ("raise", "skip"), "'raise' or 'skip'")
        check_policy("TokenizeConfig", self.special_strings)


def tokenize_corpus(config: TokenizeConfig) -> None:
    tokenizer = load_tokenizer(config.tokenizer)
    build = functools.partial(
        build_cache,
        tokenizer=tokenizer,
        tokenizer_name=config.tokenizer,
        eos_token=config.eos_token,
        text_key=config.text_key,
        **cache_options(config),
    )
    build_split_caches(config.output_path, {"train": config.train_paths, "validation": config.validation_paths}, build)


CACHE_OPTIONS = ("num_workers", "batch_size", "on_error", "long_document_tokens", "special_strings")
"""Fields of the tokenize and SFT tokenize configs that both cache builders take as they are."""


def cache_options(config: Any) -> dict[str, Any]:
    """``CACHE_OPTIONS`` of a tokenize or SFT tokenize config, as the cache builders' keyword arguments."""
    return {name: getattr(config, name) for name in CACHE_OPTIONS}


SUMMARY_KEYS = (
    "num_documents",
    "num_tokens",
    "empty_documents",
    "special_string_documents",
    "dropped_documents",
    "skipped_records",
    "long_documents",
    "max_document_tokens",
)
"""What ``summary.json`` reports of each split's cache ledger."""


def build_split_caches(
    output_path: str,
    splits: dict[str, Sequence[str]],
    build: Callable[..., dict],
    summary: dict | None = None,
    extra_keys: tuple[str, ...] = (),
) -> dict:
    """One cache per split with paths, ``build(files, cache_url)`` (the tokenize and SFT steps' shared
    shell); then ``summary.json``: ``summary``'s entries and each split's ``SUMMARY_KEYS`` + ``extra_keys``."""
    summary = dict(summary or {})
    for split, paths in splits.items():
        if not paths:
            continue
        ledger = build(expand_record_paths(list(paths)), join(output_path, split))
        summary[split] = {k: ledger[k] for k in (*SUMMARY_KEYS, *extra_keys)}
    write_atomic(join(output_path, "summary.json"), json.dumps(summary, indent=2))
    return summary
