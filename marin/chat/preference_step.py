"""Preference data steps: pair files of any common shape in, one schema out; then the chat template's ids.

    normalize_preferences(PreferenceDataConfig(input_paths=["raw/oasst1-1a2b/data"], output_path="prefs/oasst",
                                               validation_fraction=0.02))
    # prefs/oasst/train/00000.jsonl.gz       {"id", "prompt": [...], "chosen": [...], "rejected": [...]}
    # prefs/oasst/validation/00000.jsonl.gz  held out by a hash of the prompt: pairs of one prompt stay together
    # prefs/oasst/summary.json               pairs per split, rows skipped by reason

    tokenize_preferences(PreferenceTokenizeConfig(train_paths=["prefs/oasst/train"], tokenizer=..., output_path=...))
    # <output>/tokenizer/   the chat tokenizer (template included), as the SFT tokenize step writes it
    # <output>/train/       pair cache (marin.chat.preference_cache); <output>/validation/ likewise

The shapes and their errors are ``marin.chat.preference``'s. A malformed row stops the step with
``<file>:<line>: <field>: <what was expected>``; with ``on_error="skip"`` it is counted by reason (its field,
indices elided) in ``summary.json``. Output file ``k`` comes from input file ``k`` (sorted).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Sequence

from marin.chat.normalize import SplitDataConfig, split_files
from marin.chat.preference import MalformedPreference, normalize_preference
from marin.chat.preference_cache import PAIR_TOTALS, build_pair_cache
from marin.chat.step import save_chat_tokenizer
from marin.chat.template import CHAT_TEMPLATE
from marin.storage.records import OnError
from marin.tokenize.special import SpecialStringPolicy, check_policy
from marin.tokenize.step import build_split_caches
from marin.validation import check

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True)
class PreferenceDataConfig(SplitDataConfig):
    """Preference rows (any shape ``marin.chat.preference`` reads), held out by a hash of the prompt, so that all
    pairs of a prompt fall on one side."""


def normalize_preferences(config: PreferenceDataConfig) -> None:
    split_files(config, noun="pairs", parse=normalize_preference, errors=MalformedPreference, held_out_by="prompt")


@dataclasses.dataclass(frozen=True, kw_only=True)
class PreferenceTokenizeConfig:
    train_paths: Sequence[str]
    """Normalized pair files (a ``normalize_preferences`` step's ``train/``; any shape is read)."""
    tokenizer: str
    """A tokenizer.json path/URL, a directory holding one (an SFT step's ``tokenizer/``), or a hub repo id."""
    output_path: str
    validation_paths: Sequence[str] = ()
    template: str = CHAT_TEMPLATE
    """The chat template (HF convention); the SFT model's, so pairs render as its training conversations did."""
    model_max_length: int | None = None
    num_workers: int = 1
    batch_size: int = 256
    on_error: OnError = "raise"
    long_pair_tokens: int = 4096
    """Pairs whose longer side exceeds this are kept and counted (training truncates at its sequence length)."""
    special_strings: SpecialStringPolicy = "text"
    """A pair whose messages hold a special token's string: 'text' encodes it as text (only the template
    emits control tokens, as for SFT), 'drop' leaves the pair out; both count such pairs."""

    def __post_init__(self):
        check("PreferenceTokenizeConfig", "train_paths", self.train_paths, lambda v: len(v) > 0, "at least one path")
        check("PreferenceTokenizeConfig", "num_workers", self.num_workers, lambda v: v >= 1, ">= 1")
        check_policy("PreferenceTokenizeConfig", self.special_strings)


def tokenize_preferences(config: PreferenceTokenizeConfig) -> None:
    tokenizer_dir, chat = save_chat_tokenizer(config)
    build = functools.partial(
        build_pair_cache,
        tokenizer_dir=tokenizer_dir,
        num_workers=config.num_workers,
        batch_size=config.batch_size,
        on_error=config.on_error,
        long_pair_tokens=config.long_pair_tokens,
        special_strings=config.special_strings,
    )
    build_split_caches(
        config.output_path,
        {"train": config.train_paths, "validation": config.validation_paths},
        build,
        summary={"tokenizer": tokenizer_dir, "vocab_size": chat.tokenizer.get_vocab_size()},
        extra_keys=(*PAIR_TOTALS, "max_pair_tokens"),
    )
