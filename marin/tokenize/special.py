"""Data text is never a control token: special-token strings in data are encoded as the text they are.

A tokenizer matches its special tokens (``<|endoftext|>``, ``<|eot_id|>`` ...) anywhere in the text it is
given, so a web page about language models that quotes ``<|endoftext|>`` would put a forged document
boundary into the token cache, and a user message holding ``<|eot_id|><|start_header_id|>assistant...``
would forge a turn that the loss mask then trains on. Every path that turns data into ids (the tokenize
step, the chat template's content, eval sets, the lm-eval adapter, generation prompts) encodes with
``text_encoder(tokenizer)``: the same vocabulary, merges and pre-tokenizer, with special tokens left
unmatched (``tokenizers``' ``encode_special_tokens``). Only a template emits control tokens.

    enc = text_encoder(tokenizer)
    enc.encode("see <|endoftext|>", add_special_tokens=False).ids   # '<', '|', 'end', ... never the EOS id
    special_strings_in("see <|endoftext|>", special_strings(tokenizer))  # ('<|endoftext|>',)

For text without special strings the ids are exactly the plain tokenizer's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator
from typing import Literal, TypeVar

from tokenizers import Tokenizer

from marin.validation import check

T = TypeVar("T")

SpecialStringPolicy = Literal["text", "drop"]
"""What a data step does with a row (a document, a conversation) whose text contains a special token's
string (``<|endoftext|>`` quoted on a web page, a forged ``<|eot_id|>`` in a message): ``"text"`` encodes it
as ordinary text (the default), ``"drop"`` leaves the row out; both count such rows in the cache ledger
(``special_string_documents``; ``dropped_documents``). Both cache builders apply it through
``marin.tokenize.shards.ShardWriter.admit``."""

SPECIAL_STRING_POLICIES = ("text", "drop")


def check_policy(owner: str, policy: str) -> None:
    """``owner.special_strings`` must name a policy (ValueError naming the field otherwise)."""
    check(owner, "special_strings", policy, lambda v: v in SPECIAL_STRING_POLICIES, "'text' or 'drop'")


def counted(
    rows: Iterable[T], holds_special: Callable[[T], bool], counts: dict, policy: SpecialStringPolicy
) -> Iterator[T]:
    """``rows``, counting in ``counts["special"]`` those that hold a special token's string, and leaving them
    out (``counts["dropped"]``) under the ``"drop"`` policy."""
    for row in rows:
        if holds_special(row):
            counts["special"] += 1
            if policy == "drop":
                counts["dropped"] += 1
                continue
        yield row


def text_encoder(tokenizer: Tokenizer) -> Tokenizer:
    """A copy of ``tokenizer`` that encodes special-token strings in its input as ordinary text."""
    copy = Tokenizer.from_str(tokenizer.to_str())
    copy.encode_special_tokens = True
    return copy


def special_strings(tokenizer: Tokenizer) -> tuple[str, ...]:
    """The strings of the tokenizer's special tokens, longest first (so a longer one wins at a position)."""
    added = tokenizer.get_added_tokens_decoder().values()
    return tuple(sorted({t.content for t in added if t.special and t.content}, key=lambda s: (-len(s), s)))


def special_strings_in(text: str, strings: tuple[str, ...]) -> tuple[str, ...]:
    """Which of ``strings`` occur in ``text`` (in ``strings``' order). A scan for their few distinct
    two-character prefixes ("<|" for most tokenizers) rules most texts out at once: Llama 3 has 256."""
    if not any(p in text for p in _prefixes(strings)):
        return ()
    return tuple(s for s in strings if s in text)


@functools.lru_cache(maxsize=64)
def _prefixes(strings: tuple[str, ...]) -> frozenset[str]:
    return frozenset(s[:2] for s in strings)
