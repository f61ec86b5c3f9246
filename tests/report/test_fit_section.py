"""The report's "Scaling fit" section reads ``fit.json`` as the analysis step writes it, through its record: the
target's actual loss once its eval exists, files of format 1, and damaged parts named instead of a crash."""

import json
import shutil

import numpy as np

from marin.report.collect import ExperimentReport, step_report
from marin.report.render import Links, fit_section
from marin.scaling.step import LadderRunRef, fit_ladder_step
from marin.scaling.surface import compute_optimal, surface
from tests.scaling.ladder_store import FIT_V1, TRUE, ladder_config, write_results


def section(path) -> str:
    step = step_report({"name": "analysis/ladder-fit", "identity": "analysis/ladder-fit-1", "output_path": str(path)})
    report = ExperimentReport(record_url="record.json", record={}, steps=[step], docstring=None)
    return "\n".join(fit_section(report, Links(browser_url=None)))


def test_the_section_shows_the_written_fit_and_the_target_once_measured(tmp_path):
    rng = np.random.default_rng(0)
    n_t, d_t, _ = compute_optimal(TRUE, 4e16)
    target = LadderRunRef("checkpoints/target", str(tmp_path / "t"), str(tmp_path / "t-eval"), 4e16, n_t, d_t)
    config = ladder_config(tmp_path, target=target, loss=lambda name, n, d: surface(TRUE, n, d) * rng.normal(1, 0.003))
    fit_ladder_step(config)
    written = json.loads((tmp_path / "analysis" / "ladder-fit" / "fit.json").read_text())
    prediction, loss = written["prediction"], written["laws"]["loss"]
    text = section(config.output_path)
    assert f"{loss['E']:.3f} + {loss['A']:.3g} · C^-{loss['gamma']:.3f}" in text and "⚠️" not in text
    lo, hi = prediction["interval"]
    assert f"| {prediction['loss']:.4f} | [{lo:.4f}, {hi:.4f}] | not run yet | – |" in text
    write_results(tmp_path / "t-eval", "stories", prediction["loss"] * 1.01)
    assert f"{prediction['loss'] * 1.01:.4f} (inside) | +0.99% |" in section(config.output_path)


def test_a_format_1_file_shows_its_uncalibrated_interval_and_a_damaged_part_is_named(tmp_path):
    shutil.copy(FIT_V1, tmp_path / "fit.json")
    old = json.loads(FIT_V1.read_text())
    text = section(tmp_path)
    lo, hi = old["prediction"]["interval"]
    assert (
        f"not calibrated (bootstrap [{lo:.4f}, {hi:.4f}])" in text and f"C^-{old['laws']['loss']['alpha']:.3f}" in text
    )
    old["laws"]["loss"]["alpha"] = "fast"
    (tmp_path / "fit.json").write_text(json.dumps(old))
    text = section(tmp_path)
    assert "⚠️ `fit.json` laws.loss: laws.loss.gamma must be a finite number, got 'fast'" in text
    assert "| N*(C) |" in text and "L*(C)" not in text  # the rest still reported
