"""Final answers out of free text, as math data and models write them.

    final_answer("She makes 9 * 2 = $18 every day.\\n#### 18")     # "18"      (GSM8K's marker)
    final_answer("so the total is \\\\boxed{\\\\frac{3}{4}}")           # "\\\\frac{3}{4}"  (the last box)
    final_answer("3 + 4 = 7")                                      # "7"       (the trailing number)
    parse_number("$1,234.50")                                      # Fraction(2469, 2)
    numbers_equal("18.0", "18")                                    # True

Three conventions, tried in this order: GSM8K's ``#### <answer>`` line (its reference solutions end with
one; GSM8K's own ``extract_answer`` reads the first), LaTeX ``\\boxed{...}`` (MATH-style answers; braces
nest, the last box wins), and otherwise the last number in the text (models that answer in prose, and
OpenAI's published GSM8K model solutions, which end ``A: 18``). Numbers are compared exactly as
fractions: commas, currency signs, a trailing period and ``\\frac{a}{b}`` are understood, so ``1,000``,
``$1000`` and ``1000.00`` are one answer and ``0.1 + 0.2`` style float noise never enters.
"""

from __future__ import annotations

import re
from fractions import Fraction

GSM8K_MARKER = re.compile(r"####\s*([^\n]*)")
NUMBER = re.compile(r"-?\$?\d[\d,]*(?:\.\d+)?|-?\$?\.\d+")
_FRAC = re.compile(r"^\\[dt]?frac\{(-?[\d.]+)\}\{(-?[\d.]+)\}$")
_SIMPLE_FRAC = re.compile(r"^(-?\d+)\s*/\s*(\d+)$")


def boxed(text: str) -> str | None:
    """The contents of the last ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``, braces balanced; None if
    there is none or it is never closed."""
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    i = text.index("{", start) + 1
    depth, begin = 1, i
    while i < len(text):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[begin:i].strip()
        i += 1
    return None


def marked_answer(text: str) -> str | None:
    """The answer the text marks explicitly: the first ``#### ...`` line, else the last ``\\boxed{}``."""
    match = GSM8K_MARKER.search(text)
    if match and match.group(1).strip():
        return match.group(1).strip()
    return boxed(text)


def last_number(text: str) -> str | None:
    """The last number written in ``text`` (``$1,200.50`` counts as one), as written; None if none."""
    found = NUMBER.findall(text)
    return found[-1] if found else None


def final_answer(text: str) -> str | None:
    """The marked answer if the text marks one, else its last number; None when there is neither."""
    return marked_answer(text) or last_number(text)


def parse_number(text: str | None) -> Fraction | None:
    """``text`` as an exact number (integers, decimals, ``a/b``, ``\\frac{a}{b}``, with commas, ``$``, ``%``,
    spaces and a final period tolerated); None if it is not one number."""
    if text is None:
        return None
    s = text.strip().rstrip(".").replace(",", "").replace("$", "").replace("\\$", "").replace(" ", "")
    s = s.removesuffix("%").removesuffix("\\%")
    match = _FRAC.match(s) or _SIMPLE_FRAC.match(s)
    try:
        if match:
            return Fraction(match.group(1)) / Fraction(match.group(2))
        return Fraction(s)
    except (ValueError, ZeroDivisionError):
        return None


def numbers_equal(a: str | None, b: str | None) -> bool:
    """Both parse as numbers and are equal exactly."""
    x, y = parse_number(a), parse_number(b)
    return x is not None and y is not None and x == y
