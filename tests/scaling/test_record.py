"""``fit.json``'s one schema: what the fit writes reads back equal, each key means one thing, files written by
format 1 still read, damaged parts are named; the held-out loss has one reader."""

import json
import math
import subprocess
import sys

import pytest

from marin.scaling.fit import Run, Target, fit_ladder
from marin.scaling.heldout import HeldoutError, bits_per_byte, heldout_bpb
from marin.scaling.record import FORMAT_VERSION, FitRecord, RecordError
from marin.scaling.surface import compute_optimal, surface
from tests.scaling.ladder_store import FIT_V1, TRUE, write_results


@pytest.fixture(scope="module")
def record():
    runs = []
    for budget in (1e15, 3e15, 1e16):
        n_opt, _, _ = compute_optimal(TRUE, budget)
        for i, f in enumerate((1 / 4, 1 / 2, 1, 2, 4)):
            n, d = n_opt * f, budget / (6 * n_opt * f)
            runs.append(Run(budget, n, d, float(surface(TRUE, n, d)) * (1 + 0.002 * (-1) ** i), f"r-{budget:g}-{f:g}"))
    n_t, d_t, _ = compute_optimal(TRUE, 4e16)
    return fit_ladder(runs, Target("target", n_t, d_t, budget=4e16), samples=30)


def test_what_the_fit_writes_reads_back_equal_and_each_key_means_one_thing(record):
    document = json.loads(json.dumps(record.to_json()))
    assert FitRecord.from_json(document) == record and document["format_version"] == FORMAT_VERSION
    loss, shape = document["laws"]["loss"], document["laws"]["surface"]
    assert "alpha" not in loss and loss["gamma"] == pytest.approx(
        shape["alpha"] * shape["beta"] / (shape["alpha"] + shape["beta"])
    )
    assert shape["objective"] == "huber-log-0.001"  # a string the browser used to refuse as "not a finite number"
    prediction = document["prediction"]
    assert prediction["budget"] == 4e16 and prediction["flops"] == pytest.approx(
        6 * prediction["params"] * prediction["tokens"]
    )
    assert all(r["budget"] in (1e15, 3e15, 1e16) for r in document["runs"])  # nominal, like the prediction's


def test_a_format_1_file_reads_with_its_keys_renamed():
    """A store written before format 2: ``laws.loss.alpha`` held gamma, ``prediction.budget`` held 6·N·D, and
    every interval was the bootstrap's alone."""
    old = json.loads(FIT_V1.read_text())
    record = FitRecord.from_json(old)
    assert record.laws.loss.gamma == old["laws"]["loss"]["alpha"] and record.laws.loss.interval["gamma"]
    assert record.laws.surface.alpha == old["laws"]["surface"]["alpha"]
    assert record.prediction.flops == old["prediction"]["budget"] and record.prediction.budget is None
    assert (
        record.prediction.interval is None
        and list(record.prediction.bootstrap_interval) == old["prediction"]["interval"]
    )
    assert record.backtest.held_out_budgets == [old["backtest"]["budget"]]
    assert record.backtest.inside_bootstrap == old["backtest"]["inside"]
    assert [list(r.bootstrap_interval) for r in record.backtest.runs] == [
        r["interval"] for r in old["backtest"]["runs"]
    ]
    assert len(record.runs) == 15 and record.runs[0].eval_path.startswith("/old/store/")
    del old["laws"]["surface"]["objective"]  # written before the objective was recorded: least squares then
    assert FitRecord.from_json(old).laws.surface.objective == "least-squares"


def test_damaged_parts_are_named_and_the_rest_is_read(record):
    document = record.to_json()
    document["budgets"][1]["quadratic"] = [1, 2]
    document["laws"]["loss"]["gamma"] = "fast"
    document["prediction"]["interval"] = [2.0, 1.0]
    errors = {}
    read = FitRecord.from_json(document, errors)
    assert errors == {
        "budgets": "budgets[1].quadratic must be a list of 3 numbers, got [1, 2]",
        "laws.loss": "laws.loss.gamma must be a finite number, got 'fast'",
        "prediction": "prediction.interval must be [low, high] with low <= high, got [2.0, 1.0]",
    }
    assert read.budgets == [] and read.laws.loss is None and read.laws.surface == record.laws.surface
    assert read.runs == record.runs and read.prediction is None
    with pytest.raises(RecordError, match="laws.loss.gamma must be a finite number"):  # strict: the first found
        FitRecord.from_json(document)
    for document, problem in (
        ({"kind": "other"}, "not an isoFLOP fit"),
        ({"kind": "isoflop_fit", "format_version": 3}, "format_version 3"),
    ):
        errors = {}
        assert FitRecord.from_json(document, errors) == FitRecord() and problem in errors["file"]


def test_the_record_and_the_heldout_reader_import_no_numerics():
    code = (
        "import sys, marin.scaling.record, marin.scaling.heldout; print({'numpy', 'scipy', 'jax'} & set(sys.modules))"
    )
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
        == "set()"
    )


def test_one_heldout_reader_names_the_file_field_and_sets(tmp_path):
    write_results(tmp_path / "eval", "stories", math.nan)
    assert math.isnan(heldout_bpb(str(tmp_path / "eval"), "stories"))  # there, not finite: the caller names the run
    expected = r"eval/results.json: validation\['web'\].bits_per_byte must be a number, got no such field"
    with pytest.raises(HeldoutError, match=expected + r" \(sets there: \['stories'\]\)"):
        heldout_bpb(str(tmp_path / "eval"), "web")
    with pytest.raises(FileNotFoundError):
        heldout_bpb(str(tmp_path / "not-yet"), "stories")
    assert bits_per_byte({"validation": {"s": {"bits_per_byte": 1}}}, "s") == 1.0
    with pytest.raises(HeldoutError, match="got 'x'"):
        bits_per_byte({"validation": {"s": {"bits_per_byte": "x"}}}, "s")
