"""Tokenization: tokenizer loading and training, and the token cache (writer and random-access reader).

The format is described in ``marin.tokenize.cache_format`` and docs/token_cache.md.
"""

from marin.tokenize.chars import UnknownCharacter, build_char_tokenizer, is_char_tokenizer
from marin.tokenize.reader import CacheError, TokenCache
from marin.tokenize.special import special_strings, text_encoder
from marin.tokenize.step import TokenizeConfig, tokenize_corpus
from marin.tokenize.tokenizer import (
    TrainTokenizerConfig,
    build_bpe_tokenizer,
    build_tokenizer,
    eos_id,
    fingerprint,
    load_tokenizer,
    train_tokenizer,
)
from marin.tokenize.writer import build_cache

__all__ = [
    "CacheError",
    "TokenCache",
    "TokenizeConfig",
    "TrainTokenizerConfig",
    "UnknownCharacter",
    "build_bpe_tokenizer",
    "build_cache",
    "build_char_tokenizer",
    "build_tokenizer",
    "eos_id",
    "fingerprint",
    "is_char_tokenizer",
    "load_tokenizer",
    "special_strings",
    "text_encoder",
    "tokenize_corpus",
    "train_tokenizer",
]
