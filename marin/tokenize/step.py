"""The tokenize step: record files in, one token cache per split out (``<output>/train``, ``<output>/validation``)."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Sequence

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
    """A document containing a special token's string (``<|endoftext|>`` quoted on a web page): 'text'
    encodes that string as ordinary text (never the control token), 'drop' leaves the document out; both
    count such documents in the ledger (``special_string_documents``)."""

    def __post_init__(self):
        # check() skips executor placeholders: the executor re-validates the concrete config.
        check("TokenizeConfig", "train_paths", self.train_paths, lambda v: len(v) > 0, "at least one path")
        check("TokenizeConfig", "num_workers", self.num_workers, lambda v: v >= 1, ">= 1")
        check("TokenizeConfig", "batch_size", self.batch_size, lambda v: v >= 1, ">= 1")
        check("TokenizeConfig", "on_error", self.on_error, lambda v: v in ("raise", "skip"), "'raise' or 'skip'")
        check_policy("TokenizeConfig", self.special_strings)


def tokenize_corpus(config: TokenizeConfig) -> None:
    tokenizer = load_tokenizer(config.tokenizer)
    summary = {}
    for split, paths in (("train", config.train_paths), ("validation", config.validation_paths)):
        if not paths:
            continue
        files = expand_record_paths(list(paths))
        ledger = build_cache(
            files,
            join(config.output_path, split),
            tokenizer,
            tokenizer_name=config.tokenizer,
            eos_token=config.eos_token,
            text_key=config.text_key,
            num_workers=config.num_workers,
            batch_size=config.batch_size,
            on_error=config.on_error,
            long_document_tokens=config.long_document_tokens,
            special_strings=config.special_strings,
        )
        summary[split] = {
            k: ledger[k]
            for k in (
                "num_documents",
                "num_tokens",
                "empty_documents",
                "special_string_documents",
                "dropped_documents",
                "skipped_records",
                "long_documents",
                "max_document_tokens",
            )
        }
    write_atomic(join(config.output_path, "summary.json"), json.dumps(summary, indent=2))
