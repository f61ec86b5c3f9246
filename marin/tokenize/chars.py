"""Character-level tokenizers: one id per character, derived deterministically from a corpus.

    tok = build_char_tokenizer(texts, special_tokens=("<|endoftext|>",))
    tok.encode("First Citizen:").ids        # TinyShakespeare: [18, 47, 56, 57, 58, 1, 15, 47, 58, 47, 64, 43, 52, 10]

The vocabulary is ``sorted(set(text))`` over every text (code-point order), then the special tokens:
on TinyShakespeare that is nanoGPT's ``data/shakespeare_char/prepare.py`` exactly (65 characters, the
same ids), so the two trainers' losses compare number for number; the end-of-document token takes id 65.
It is an ordinary ``tokenizers`` tokenizer (a WordLevel model over single-character pieces, a decoder
that concatenates), so it goes through the same token cache, fingerprint and identity rules as a BPE.

A character outside the vocabulary cannot be encoded (a character model has no fallback): ``unknown_character``
finds the first one, and the cache writer's error names it with its code point and position.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

EVERY_CHARACTER = r"[\s\S]"
"""The pre-tokenizer's split: every character its own piece (newlines included)."""


def build_char_tokenizer(texts: Iterable[str], special_tokens: Sequence[str]) -> Tokenizer:
    """A tokenizer whose ids are the sorted distinct characters of ``texts``, then ``special_tokens``."""
    chars: set[str] = set()
    for text in texts:
        chars.update(text)
    if not chars:
        raise ValueError("build_char_tokenizer: the corpus has no characters (every text is empty)")
    overlap = sorted(chars.intersection(special_tokens))
    if overlap:
        raise ValueError(f"build_char_tokenizer: special tokens {overlap} are also characters of the corpus")
    vocab = {ch: i for i, ch in enumerate(sorted(chars))}
    for token in special_tokens:
        vocab[token] = len(vocab)
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex(EVERY_CHARACTER), behavior="isolated")
    tokenizer.decoder = decoders.Fuse()
    tokenizer.add_special_tokens(list(special_tokens))
    return tokenizer


def is_char_tokenizer(tokenizer: Tokenizer) -> bool:
    """Whether ``tokenizer`` was built by ``build_char_tokenizer`` (a WordLevel model over characters)."""
    doc = json.loads(tokenizer.to_str())
    split = doc.get("pre_tokenizer") or {}
    return doc["model"]["type"] == "WordLevel" and split.get("pattern", {}).get("Regex") == EVERY_CHARACTER


def unknown_character(tokenizer: Tokenizer, text: str) -> tuple[int, str] | None:
    """The position and value of the first character of ``text`` that ``tokenizer`` has no id for, or None."""
    vocab = tokenizer.get_vocab(with_added_tokens=False)
    for position, ch in enumerate(text):
        if ch not in vocab:
            return position, ch
    return None


def describe_character(ch: str) -> str:
    """``'z' (U+007A)``: a character as an error message names it."""
    return f"{ch!r} (U+{ord(ch):04X})"


class UnknownCharacter(ValueError):
    """A text holds a character that the character tokenizer has no id for."""


def explain_encode_failure(tokenizer: Tokenizer, texts: Sequence[str], where: str, first: int) -> Exception | None:
    """Why ``tokenizer`` could not encode ``texts`` (documents ``first``, ``first + 1``, ... of ``where``):
    an ``UnknownCharacter`` naming the document, the character and its position, or None if no
    character is missing (the failure is something else)."""
    if not is_char_tokenizer(tokenizer):
        return None
    for i, text in enumerate(texts):
        found = unknown_character(tokenizer, text)
        if found is not None:
            position, ch = found
            return UnknownCharacter(
                f"{where}: document {first + i} holds character {describe_character(ch)} at position {position}, "
                f"which is not in the character tokenizer's vocabulary ({tokenizer.get_vocab_size()} entries); "
                "derive the tokenizer from a corpus that contains every character to be encoded"
            )
    return None
