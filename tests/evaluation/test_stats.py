"""Rates and paired differences: the counts, the intervals' published values, and their coverage by simulation."""

import math
import random

import pytest

from marin.evaluation.stats import paired_difference, rate


def test_paired_difference_counts_items_turned_right_and_wrong():
    before = [1, 1, 0, 0, 1, 0]
    after = [1, 0, 1, 1, 1, 0]
    d = paired_difference(before, after)
    assert (d["gained"], d["lost"], d["n"]) == (2, 1, 6)
    assert d["difference"] == pytest.approx(rate(after)["value"] - rate(before)["value"])


def test_agresti_min_interval_matches_its_formula_and_never_collapses():
    # 200 items, 14 turned right, 2 turned wrong: the adjusted Wald interval of Agresti and Min (2005).
    before = [1] * 150 + [0] * 14 + [1] * 2 + [0] * 34
    after = [1] * 150 + [1] * 14 + [0] * 2 + [0] * 34
    d = paired_difference(before, after)
    g, lo, m = 14.5, 2.5, 202
    half = 1.959964 * math.sqrt(g + lo - (g - lo) ** 2 / m) / m
    assert d["ci95"] == pytest.approx([(g - lo) / m - half, (g - lo) / m + half])
    assert d["ci95"][0] > 0  # a clear gain
    unchanged = paired_difference([1, 0] * 50, [1, 0] * 50)
    assert unchanged["difference"] == 0 and unchanged["ci95"][0] < 0 < unchanged["ci95"][1]


@pytest.mark.parametrize("p_before,p_after", [(0.8, 0.8), (0.5, 0.7), (0.95, 0.9)])
def test_paired_interval_covers_the_true_difference_95_percent_of_the_time(p_before, p_after):
    rng = random.Random(0)
    n, runs, covered = 200, 2000, 0
    for _ in range(runs):
        # correlated pairs: an item keeps its outcome unless a fresh draw moves it
        before = [rng.random() < p_before for _ in range(n)]
        after = [b if rng.random() < 0.6 else rng.random() < p_after for b in before]
        true = 0.4 * (p_after - p_before)
        lo, hi = paired_difference(before, after)["ci95"]
        covered += lo <= true <= hi
    assert 0.93 <= covered / runs <= 0.975, covered / runs


def test_wilson_interval_covers_and_stays_inside_zero_one():
    rng = random.Random(1)
    covered = sum(
        (lambda ci: ci[0] <= 0.97 <= ci[1])(rate([rng.random() < 0.97 for _ in range(200)])["ci95"])
        for _ in range(2000)
    )
    assert 0.93 <= covered / 2000 <= 0.975
    all_right = rate([True] * 10)["ci95"]
    assert all_right[1] == pytest.approx(1.0) and 0.6 < all_right[0] < 0.8


def test_bad_pairs_and_empty_lists_are_named():
    with pytest.raises(ValueError, match="same non-empty items before and after, got 3 and 2"):
        paired_difference([1, 0, 1], [1, 0])
    with pytest.raises(ValueError, match="got 0 and 0"):
        paired_difference([], [])
    assert rate([])["n"] == 0 and math.isnan(rate([])["value"])
