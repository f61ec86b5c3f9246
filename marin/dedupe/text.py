"""How dedupe and decontamination see text: normalization, words, shingles and paragraphs.

One definition, used three ways: by the vectorized hashing in ``marin.dedupe.hashing`` (bytes level),
by the corpus generator to compute the ground-truth Jaccard of planted near-duplicates, and by tests as
the slow reference. For example::

    >>> words("Hello,  World! Hello-world.")
    ['hello', 'world', 'hello', 'world']
    >>> sorted(shingles("a b c d", 3))
    [('a', 'b', 'c'), ('b', 'c', 'd')]

Words are what remains after lower-casing and turning punctuation and every Unicode whitespace into
ASCII spaces, split on spaces. Because only ASCII spaces separate words after ``normalize_words``, the
bytes-level tokenizer (which splits UTF-8 on byte 0x20) yields exactly the same words.
"""

from __future__ import annotations

import re
import string
import unicodedata


def _separator_table() -> dict[int, str]:
    table = {ord(c): " " for c in string.punctuation}
    for cp in list(range(0x80, 0x3040)) + list(range(0xFF00, 0xFF66)):
        ch = chr(cp)
        if unicodedata.category(ch).startswith("P"):
            table[cp] = " "
    for cp in range(0x3040):
        if chr(cp).isspace():
            table[cp] = " "
    for cp in (0x3000, 0x85, 0x2028, 0x2029, 0xFEFF):
        table[cp] = " "
    return table


SEPARATORS = _separator_table()


def _ascii_table() -> bytes:
    table = bytearray(range(256))
    for cp in range(128):
        table[cp] = ord(SEPARATORS.get(cp, chr(cp).lower()))
    return bytes(table)


ASCII_TABLE = _ascii_table()


def normalize_words(text: str) -> str:
    """Lower-case; punctuation and whitespace of any kind become single ASCII spaces (not collapsed)."""
    return text.lower().translate(SEPARATORS)


def normalize_words_utf8(text: str) -> bytes:
    """``normalize_words(text).encode()``, with a fast path (one bytes.translate) for ASCII text."""
    if text.isascii():
        return text.encode("ascii").translate(ASCII_TABLE)
    return normalize_words(text).encode("utf-8")


def words(text: str) -> list[str]:
    return [w for w in normalize_words(text).split(" ") if w]


def shingles(text: str, n: int) -> set[tuple[str, ...]]:
    """The set of word n-grams. A text with fewer than ``n`` (but at least one) words has one shingle: all
    of its words, so that short documents still compare equal to their copies."""
    ws = words(text)
    if not ws:
        return set()
    if len(ws) < n:
        return {tuple(ws)}
    return {tuple(ws[i : i + n]) for i in range(len(ws) - n + 1)}


def jaccard(a: str, b: str, n: int = 5) -> float:
    """Exact Jaccard similarity of the two texts' word n-gram sets (the reference for MinHash)."""
    sa, sb = shingles(a, n), shingles(b, n)
    if not sa and not sb:
        return 1.0
    return len(sa & sb) / len(sa | sb)


def normalize_exact(text: str) -> str:
    """What exact dedupe compares: lower-cased, whitespace runs collapsed, ends stripped. Punctuation is
    kept: two documents that differ in punctuation are different documents."""
    return " ".join(text.lower().split())


_PARAGRAPH_SPLIT_CACHE: dict[str, re.Pattern] = {}


def split_paragraphs(text: str, separator: str = "\n") -> list[tuple[int, int]]:
    """(start, end) character spans of the paragraphs: the pieces between runs of ``separator``, leaving
    out whitespace-only pieces. Spans let the caller cut paragraphs out without disturbing the rest."""
    pattern = _PARAGRAPH_SPLIT_CACHE.get(separator)
    if pattern is None:
        pattern = _PARAGRAPH_SPLIT_CACHE[separator] = re.compile(f"(?:{re.escape(separator)})+")
    spans, start = [], 0
    for m in pattern.finditer(text):
        if text[start : m.start()].strip():
            spans.append((start, m.start()))
        start = m.end()
    if text[start:].strip():
        spans.append((start, len(text)))
    return spans


def normalize_paragraph(paragraph: str) -> str:
    """Paragraphs compare equal when they differ only in case and whitespace."""
    return " ".join(paragraph.lower().split())


def remove_spans(text: str, spans: list[tuple[int, int]], separator: str = "\n") -> str:
    """``text`` without the given paragraph spans; the kept paragraphs are joined with the separators
    that followed them in the original."""
    if not spans:
        return text
    drop = sorted(spans)
    keep = [s for s in split_paragraphs(text, separator) if s not in set(drop)]
    if not keep:
        return ""
    pieces = []
    for i, (s, e) in enumerate(keep):
        pieces.append(text[s:e])
        if i + 1 < len(keep):
            # Reuse the separator run that followed this paragraph in the original text.
            m = _PARAGRAPH_SPLIT_CACHE[separator].match(text, e)
            pieces.append(m.group(0) if m else separator)
    return "".join(pieces)
