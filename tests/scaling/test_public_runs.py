"""The loss surface predicts public runs nobody here trained: Gadre et al.'s open_lm models (MIT license,
``tests/data/open_lm_scaling``), fitted on the four sizes below 1B, predicting the 1.4B and 6.9B runs."""

import numpy as np
import pytest

from benchmarks.scaling_public_fit import load, predictions

TRAIN_SETS = ("c4_original", "rpj", "rw_original")


@pytest.fixture(scope="module")
def c4_predictions():
    rows = load()
    assert len(rows) == 104 and {r["dataset"] for r in rows} == set(TRAIN_SETS)
    return {dataset: predictions(rows, dataset, "loss_c4_val") for dataset in TRAIN_SETS}


def test_large_runs_are_predicted_within_a_few_percent_and_better_than_least_squares(c4_predictions):
    """Thresholds from the measured fit (mean 2.5%, the 1.4B runs within 2.1%); plain least squares on the
    loss, this fit's objective before, misses by 5.8% on average and by 8-13% at 6.9B: it fails here."""
    every = [p for runs in c4_predictions.values() for p in runs]
    assert len(every) == 9 and {p["model"] for p in every} == {"open_lm_1b", "open_lm_7b"}
    errors = np.array([abs(p["error"]) for p in every])
    assert errors.mean() < 0.035, [(p["model"], p["multiplier"], p["error"]) for p in every]
    assert all(abs(p["error"]) < 0.025 for p in every if p["model"] == "open_lm_1b")
    assert errors.mean() < 0.6 * np.mean([abs(p["peer_error"]) for p in every])


def test_prediction_intervals_hold_most_real_runs(c4_predictions):
    every = [p for runs in c4_predictions.values() for p in runs]
    inside = sum(p["interval"][0] <= p["actual"] <= p["interval"][1] for p in every)
    assert inside >= 7, every  # 90% intervals: 8 of 9 measured
    assert all(p["interval"][0] < p["predicted"] < p["interval"][1] for p in every)
