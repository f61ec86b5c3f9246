"""Chat data: normalization of conversation data sets, the chat template, assistant-only loss masks and
masked token caches for supervised fine-tuning.

``normalize_chat`` (step) reads OpenAI ``messages``, ShareGPT ``conversations`` or Alpaca rows and writes
one schema; ``tokenize_chat`` (step) renders them with ``ChatTokenizer`` (a Jinja template in the Hugging
Face convention) into token caches whose ``.mask`` files mark the assistant tokens the SFT loss counts.
Nothing here imports the trainer.
"""

from marin.chat.cache import build_sft_cache
from marin.chat.normalize import ChatDataConfig, normalize_chat
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
    "SftTokenizeConfig",
    "build_sft_cache",
    "normalize_chat",
    "normalize_record",
    "tokenize_chat",
    "with_chat_tokens",
]
