"""Rates and paired differences of per-item hits, the statistics every accuracy in ``results.json`` carries.

    rate([True, True, False, True])
    # {"value": 0.75, "stderr": 0.25, "ci95": [0.30, 0.95], "n": 4}
    paired_difference(before=sft_hits, after=rl_hits)
    # {"difference": 0.06, "ci95": [0.020, 0.099], "gained": 14, "lost": 2, "n": 200}

Two evaluations of one model family on the same items are paired: what decides whether a phase moved a
score is how many items it turned right (``gained``) against how many it turned wrong (``lost``), not the two
rates' own intervals, which overlap long after a difference is certain. ``paired_difference``'s interval is
Agresti and Min's adjusted Wald interval for matched proportions (Biometrics 61, 2005: add one half to each cell
of the 2x2 table), which keeps its coverage when a phase changed few items or none (the plain Wald interval
collapses to a point there).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

Z95 = 1.959964


def rate(hits: Sequence[bool]) -> dict[str, float]:
    """Mean, standard error (lm-eval's: ``n - 1`` in the denominator), 95% Wilson interval and count of a
    list of hits; an empty list has ``nan`` for all but ``n``."""
    n = len(hits)
    if n == 0:
        return {"value": math.nan, "stderr": math.nan, "ci95": [math.nan, math.nan], "n": 0}
    p = sum(bool(h) for h in hits) / n
    center = (p + Z95 * Z95 / (2 * n)) / (1 + Z95 * Z95 / n)
    half = Z95 * math.sqrt(p * (1 - p) / n + Z95 * Z95 / (4 * n * n)) / (1 + Z95 * Z95 / n)
    stderr = math.sqrt(p * (1 - p) / max(n - 1, 1))
    return {"value": p, "stderr": stderr, "ci95": [max(0.0, center - half), min(1.0, center + half)], "n": n}


def paired_difference(before: Sequence[bool], after: Sequence[bool]) -> dict[str, float]:
    """``rate(after) - rate(before)`` over the same items, with its 95% interval (Agresti-Min) and the counts
    of items the change turned right and wrong."""
    if len(before) != len(after) or not before:
        raise ValueError(
            f"paired_difference needs the same non-empty items before and after, got {len(before)} and {len(after)}"
        )
    n = len(before)
    gained = sum(1 for b, a in zip(before, after) if a and not b)
    lost = sum(1 for b, a in zip(before, after) if b and not a)
    # Agresti-Min: half an item added to each of the four cells, so n grows by 2 and each discordant count by 0.5.
    g, lo, m = gained + 0.5, lost + 0.5, n + 2
    centre = (g - lo) / m
    half = Z95 * math.sqrt(max(g + lo - (g - lo) ** 2 / m, 0.0)) / m
    return {
        "difference": (gained - lost) / n,
        "ci95": [max(-1.0, centre - half), min(1.0, centre + half)],
        "gained": gained,
        "lost": lost,
        "n": n,
    }
