"""An RL run's reward curves per environment and sample rollouts per iteration: ``/rollouts``, ``/api/rollouts``."""

from __future__ import annotations

from fastapi import APIRouter, Query

from data_browser import rollouts, training
from data_browser.step_files import METRICS_FILE
from data_browser.web import BrowserState, State, page
from marin.storage import join

router = APIRouter()


def _rollouts_page(state: BrowserState, data: dict) -> dict:
    return {"parent": state.parent(data["path"])}


@page(router, html="/rollouts", template="rollouts.html", api="/api/rollouts", context=_rollouts_page)
def rollouts_data(state: State, path: str, iteration: int | None = Query(None, ge=1)) -> dict:
    path = state.resolve(path)
    if not rollouts.is_rl_run(path):
        raise FileNotFoundError(f"{path}: not an RL run (no rollouts/ directory)")
    available = rollouts.iterations(path)
    if not available:
        raise FileNotFoundError(f"{path}: no sample rollouts written yet")
    chosen = iteration if iteration is not None else available[-1]
    if chosen not in available:
        raise FileNotFoundError(f"{path}: no sample rollouts for iteration {chosen}")
    config = state.config
    metrics = training.load_metrics(
        state.resolve(join(path, METRICS_FILE)), config.max_metrics_bytes, config.max_metric_points
    )
    return {
        "path": path,
        "iteration": chosen,
        "iterations": available,
        "steps": metrics.columns.get("step", []),
        "curves": rollouts.reward_curves(metrics.columns),
        "rollouts": rollouts.samples(path, chosen, config.max_line_bytes, config.records_per_page * 4),
    }
