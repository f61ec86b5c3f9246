"""One training (or evaluation) step (``/training``, JSON at ``/api/metrics``): every numeric series of
its ``metrics.jsonl`` as charts and its ``results.json`` as a table."""

from __future__ import annotations

from fastapi import APIRouter

from data_browser import experiments as exp
from data_browser import training
from data_browser.step_files import METRICS_FILE, RESULTS_FILE
from data_browser.web import BrowserState, State, page
from marin.storage import join

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
    return {
        "path": path,
        "metrics": metrics.columns,
        "metrics_notes": metrics.notes,
        "results": results,
        "results_error": error,
        "results_table": table.rows if table else None,
    }
