"""The loss surface predicts public runs nobody here trained: Gadre et al.'s open_lm models (MIT license,
``tests/data/open_lm_scaling``), fitted on the smaller runs, predicting the larger ones."""

import numpy as np
import pytest

from benchmarks.scaling_public_fit import inside, load, predictions

TRAIN_SETS = ("c4_original", "rpj", "rw_original")


@pytest.fixture(scope="module")
def rows():
    rows = load()
    assert len(rows) == 104 and {r["dataset"] for r in rows} == set(TRAIN_SETS)
    return rows


@pytest.fixture(scope="module")
def c4_predictions(rows):
    """Fitted on the four sizes below 1B, predicting the 1.4B and 6.9B runs (Gadre et al.'s split)."""
    return [p for dataset in TRAIN_SETS for p in predictions(rows, dataset, "loss_c4_val", "size:1e9", samples=100)]


def test_large_runs_are_predicted_within_a_few_percent_and_better_than_least_squares(c4_predictions):
    """Thresholds from the measured fit (mean 2.5%, the 1.4B runs within 2.1%); plain least squares on the
    loss, this fit's objective before, misses by 5.8% on average and by 8-13% at 6.9B: it fails here."""
    every = c4_predictions
    assert len(every) == 9 and {p["model"] for p in every} == {"open_lm_1b", "open_lm_7b"}
    errors = np.array([abs(p["error"]) for p in every])
    assert errors.mean() < 0.035, [(p["model"], p["multiplier"], p["error"]) for p in every]
    assert all(abs(p["error"]) < 0.025 for p in every if p["model"] == "open_lm_1b")
    assert errors.mean() < 0.6 * np.mean([abs(p["peer_error"]) for p in every])


def test_prediction_intervals_hold_most_real_runs(c4_predictions):
    assert sum(inside(p) for p in c4_predictions) >= 8, c4_predictions  # 9 of 9 measured
    assert all(p["interval"][0] < p["predicted"] < p["interval"][1] for p in c4_predictions)


def test_calibrated_intervals_hold_the_next_budgets_runs_where_the_bootstrap_alone_does_not(rows):
    """Fitted on every run under 1e19 FLOPs, predicting the 47 above it (up to 5.7e21: larger models and more
    tokens per parameter, as a ladder's next budgets are): the bootstrap's 90% intervals held 11 of 47, the
    calibrated ones 44 (docs/scaling.md has every split and held-out loss)."""
    every = [p for dataset in TRAIN_SETS for p in predictions(rows, dataset, "loss_c4_val", "compute:1e19", samples=50)]
    assert len(every) == 47 and all(p["interval"] is not None for p in every)
    held = sum(inside(p) for p in every)
    assert held >= 0.8 * len(every), held
    assert sum(inside(p, "bootstrap_interval") for p in every) < 0.5 * len(every)
