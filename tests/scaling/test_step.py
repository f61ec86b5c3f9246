"""The analysis step end to end on evals as they are written: what it writes is what the record reads, a
noise-free ladder plots, and a run whose loss is NaN is named (or left out and listed)."""

import dataclasses
import json
import math
import re
from pathlib import Path

import pytest

from marin.scaling.fit import FitError
from marin.scaling.heldout import HeldoutError
from marin.scaling.plots import plot_fit
from marin.scaling.record import FitRecord
from marin.scaling.step import LadderRunRef, fit_ladder_step
from marin.scaling.surface import compute_optimal, surface
from tests.scaling.ladder_store import FIT_V1, TRUE, ladder_config, write_results


def test_a_noise_free_ladder_writes_fit_json_the_record_reads_and_both_plots(tmp_path):
    """With no scatter the bootstrap interval collapses onto the prediction; plotting it used to fail on a
    bound 1e-15 past the point ('yerr' must not contain negative values)."""
    n_t, d_t, _ = compute_optimal(TRUE, 1.2e17)
    target = LadderRunRef(
        "checkpoints/target", str(tmp_path / "target"), str(tmp_path / "target-eval"), 1.2e17, n_t, d_t
    )
    config = ladder_config(tmp_path, budgets=(1e15, 3e15, 1e16, 3e16), target=target)  # failed before: 1e-15 past
    fit_ladder_step(config)
    out = Path(config.output_path)
    document = json.loads((out / "fit.json").read_text())
    record = FitRecord.from_json(document)  # strict: any field off the schema raises
    assert record.to_json() == document and record.plots == ["isoflop.png", "laws.png"]
    assert all((out / name).read_bytes()[:4] == b"\x89PNG" for name in record.plots)
    p = record.prediction
    assert p.loss == pytest.approx(float(surface(TRUE, n_t, d_t)), rel=1e-6)
    assert p.interval[0] <= p.loss <= p.interval[1] and p.eval_path == target.eval_path
    assert (p.budget, p.flops) == (1.2e17, pytest.approx(6 * n_t * d_t)) and record.heldout == "stories"
    assert [r.eval_path for r in record.runs] == [r.eval_path for r in config.runs]


def test_a_nan_loss_names_the_run_and_skip_invalid_runs_leaves_it_out_listed(tmp_path):
    config = ladder_config(
        tmp_path, loss=lambda name, n, d: math.nan if name.endswith("1e+15-x1") else surface(TRUE, n, d)
    )
    with pytest.raises(FitError, match=re.escape("run 'checkpoints/ladder-1e+15-x1' (budget 1e+15")):
        fit_ladder_step(config)
    fit_ladder_step(dataclasses.replace(config, skip_invalid_runs=True))
    record = FitRecord.from_json(json.loads((Path(config.output_path) / "fit.json").read_text()))
    assert [(s.run, s.reason) for s in record.skipped] == [("checkpoints/ladder-1e+15-x1", "loss is nan")]
    assert len(record.runs) == len(config.runs) - 1


def test_a_missing_heldout_set_names_the_file_and_the_sets_it_has(tmp_path):
    config = ladder_config(tmp_path)
    write_results(Path(config.runs[2].eval_path), "web", 1.0)
    with pytest.raises(HeldoutError, match=r"ladder-1e\+15-x1/results.json: validation\['stories'\].*\['web'\]"):
        fit_ladder_step(config)


def test_plots_take_an_interval_that_misses_the_point_by_a_rounding_error(tmp_path):
    """A format-1 file's bootstrap interval could land 1e-15 past its point estimate; matplotlib refuses a
    negative error bar."""
    record = FitRecord.from_json(json.loads(FIT_V1.read_text()))
    p = record.prediction
    record = dataclasses.replace(
        record, prediction=dataclasses.replace(p, bootstrap_interval=(p.loss + 1e-15, p.loss + 0.1))
    )
    assert plot_fit(record, str(tmp_path)) == ["isoflop.png", "laws.png"]
