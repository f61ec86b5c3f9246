"""benchmarks/books_ladder_refit.py on the books ladder's 14 runs: the lab's own fit reproduces the ladder's
prediction, and no surface form or way of counting N brings the target within the issue's 3%."""

import json

import pytest

from benchmarks.books_ladder_refit import RUNS, refit


def test_every_form_refits_the_ladder_and_misses_its_target_by_more_than_9_percent():
    data = json.loads(RUNS.read_text())
    assert len(data["runs"]) == 14 and data["target"]["width"] == 96
    rows = refit(data)
    assert {(r["fit"], r["params"]) for r in rows} == {
        (f, n) for f in ("lab", "chinchilla_ls", "kaplan") for n in ("flops/6", "without the head")
    }
    [lab] = [r for r in rows if r["fit"] == "lab" and r["params"] == "flops/6"]
    assert lab["predicted"] == pytest.approx(data["target"]["predicted_by_the_ladder"], abs=2e-3)
    for r in rows:
        assert r["error"] < -0.09, r  # every fit predicts the target worse than it did
        assert r["rms"] is None or r["rms"] < 0.05, r  # while fitting the ladder's own runs closely
