"""Chat data: normalization of conversation data sets, the chat template, assistant-only loss masks and
masked token caches for supervised fine-tuning.

``normalize_chat`` (step) reads OpenAI ``messages``, ShareGPT ``conversations`` or Alpaca rows and writes
one schema; ``tokenize_chat`` (step) renders them with ``ChatTokenizer`` (a Jinja template in the Hugging
Face convention) into token caches whose ``.mask`` files mark the assistant tokens the SFT loss counts.
Nothing here imports the trainer.
"""

from marin.chat.cache import build_sft_cache
from marin.chat.normalize import ChatDataConfig, normalize_chat
from marin.chat.preference import MalformedPreference, normalize_preference
from marin.chat.preference_cache import PairCache, build_pair_cache, encode_pairs
from marin.chat.preference_step import (
    PreferenceDataConfig,
    PreferenceTokenizeConfig,
    normalize_preferences,
    tokenize_preferences,
)
from marin.chat.schema import MalformedConversation, normalize_record
from marin.chat.step import SftTokenizeConfig, tokenize_chat
from marin.chat.template import CHAT_SPECIAL_TOKENS, CHAT_TEMPLATE, EOT_TOKEN, ChatTokenizer, with_chat_tokens

__all__ = [
    "CHAT_SPECIAL_TOKENS",
    "CHAT_TEMPLATE",
    "EOT_TOKEN",
    "ChatDataConfig",
    "ChatTokenizer",
    "MalformedConversation",
    "MalformedPreference",
    "PairCache",
    "PreferenceDataConfig",
    "PreferenceTokenizeConfig",
    "SftTokenizeConfig",
    "build_pair_cache",
    "build_sft_cache",
    "encode_pairs",
    "normalize_chat",
    "normalize_preference",
    "normalize_preferences",
    "normalize_record",
    "tokenize_chat",
    "tokenize_preferences",
    "with_chat_tokens",
]
