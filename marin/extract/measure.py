"""Score an extraction against a page's known main text and boilerplate, word by word.

    recovered, leaked = word_scores(extracted, main_text, boilerplate_text)

Words are runs of letters (any script), lower-cased, counted as multisets. ``recovered`` is the share of
the main text's words found in the extraction; ``leaked`` the share of the boilerplate's words found in
it, counting only boilerplate words that the main text does not also contain (a word in both says
nothing about leaks). Markdown marks (``#``, ``-``, fences) are not letters, so they do not count.
"""

from __future__ import annotations

import re
from collections import Counter

_WORD = re.compile(r"[^\W\d_]+", re.UNICODE)


def words(text: str) -> Counter:
    return Counter(w.lower() for w in _WORD.findall(text))


def word_counts(extracted: str, main_text: str, boilerplate_text: str) -> tuple[int, int, int, int]:
    """(main words recovered, main words, boilerplate words leaked, boilerplate words)."""
    got, main, boiler = words(extracted), words(main_text), words(boilerplate_text)
    boiler = Counter({w: n for w, n in boiler.items() if w not in main})
    recovered = sum((main & got).values())
    leaked = sum((boiler & got).values())
    return recovered, sum(main.values()), leaked, sum(boiler.values())


def word_scores(extracted: str, main_text: str, boilerplate_text: str) -> tuple[float, float]:
    """(share of main-text words recovered, share of boilerplate words leaked); 1.0 / 0.0 when empty."""
    rec, main, leak, boiler = word_counts(extracted, main_text, boilerplate_text)
    return (rec / main if main else 1.0), (leak / boiler if boiler else 0.0)
