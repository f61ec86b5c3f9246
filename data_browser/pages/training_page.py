"""One training (or evaluation, or samples) step (``/training``, JSON at ``/api/metrics``): every numeric series
of its ``metrics.jsonl`` as charts, its ``results.json`` as a table, and text sampled from it (its own
``samples.jsonl``, or the samples steps that sampled this run)."""

from __future__ import annotations

import dataclasses

from fastapi import APIRouter

from data_browser import experiments as exp
from data_browser import samples, training
from data_browser.step_files import METRICS_FILE, RESULTS_FILE, SAMPLES_FILE
from data_browser.web import BrowserState, State, page
from marin.storage import exists, join

router = APIRouter()


def _training_page(state: BrowserState, data: dict) -> dict:
    return {
        "order": training.chart_order(list(data["metrics"])),
        "table": training.results_table(data["results"]),
        "wandb": exp.wandb_url(data["path"], state.allowed, state.config.max_json_bytes),
    }


@page(router, html="/training", template="training.html", api="/api/metrics", context=_training_page)
def training_data(state: State, path: str) -> dict:
    path, config = state.resolve(path), state.config
    metrics = training.load_metrics(
        state.resolve(join(path, METRICS_FILE)), config.max_metrics_bytes, config.max_metric_points
    )
    results, error = training.load_results(state.resolve(join(path, RESULTS_FILE)), config.max_json_bytes)
    table = training.results_table(results)
    if exists(join(path, SAMPLES_FILE)):
        sampled = [samples.read_samples(path, config.max_line_bytes)]
    else:
        sampled = samples.samples_for(path, state.allowed, config.max_json_bytes, config.max_line_bytes)
    return {
        "path": path,
        "metrics": metrics.columns,
        "metrics_notes": metrics.notes,
        "results": results,
        "results_error": error,
        "results_table": table.rows if table else None,
        "samples": [dataclasses.asdict(s) for s in sampled],
    }
