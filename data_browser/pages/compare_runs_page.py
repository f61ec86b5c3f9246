"""Training runs overlaid (``/compare/runs?step=<path>&step=<path>&x=tokens``, JSON at ``/api/compare/runs``):
loss and eval bits-per-byte curves of any number of steps against step, tokens or FLOPs, each labelled by
the config fields that set it apart (``runs.py``). The URL is the whole state: share it as it is. A step
that does not exist is named under ``missing`` (never counted as overlaid); if none exists, a 404."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query

from data_browser import runs, training
from data_browser.experiments import read_json
from data_browser.web import BrowserState, State, page
from marin.storage import exists

router = APIRouter()


def _compare_runs_page(state: BrowserState, data: dict) -> dict:
    return {"x_axes": runs.X_AXES, "charts": runs.chart_keys(data["runs"])}


@page(router, html="/compare/runs", template="compare_runs.html", api="/api/compare/runs", context=_compare_runs_page)
def compare_runs_data(
    state: State,
    step: Annotated[list[str], Query()] = [],  # noqa: B006 (FastAPI copies a default; a repeated query parameter)
    x: Literal["step", "tokens", "flops"] = "step",
) -> dict:
    config = state.config
    paths = {state.resolve(p): p for p in step}  # every path under the roots, before anything is read
    present = [path for path in paths if exists(path)]
    missing = [given for path, given in paths.items() if path not in present]
    if paths and not present:
        raise FileNotFoundError(f"no such run: {', '.join(missing)}")
    loaded = runs.load_runs(
        present,
        x,
        lambda url: read_json(state.resolve(url), config.max_json_bytes),
        lambda url: training.load_metrics(state.resolve(url), config.max_metrics_bytes, config.max_metric_points),
    )
    return {"x": x, "runs": loaded, "missing": missing}
