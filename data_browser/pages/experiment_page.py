"""One experiment record (``/experiment``): its step DAG colored by state, each step's config, duration,
output and W&B link, and the experiment file on GitHub."""

from __future__ import annotations

from fastapi import APIRouter

from data_browser import experiments as exp
from data_browser.web import BrowserState, State, page

router = APIRouter()


def _experiment_page(state: BrowserState, data: dict) -> dict:
    return {"svg": exp.dag_svg(data["steps"])}


@page(router, html="/experiment", template="experiment.html", api="/api/experiment", context=_experiment_page)
def experiment_data(state: State, path: str) -> dict:
    path, config = state.resolve(path), state.config
    record = exp.load_record(path, config.max_json_bytes)
    steps = exp.step_views(record, state.allowed, config.max_json_bytes)  # files read only under the roots
    return {
        "path": path,
        "record": record,
        "steps": steps,
        "github": exp.github_url(record, config.github_repo_url),
        "wandb": {s.identity: exp.wandb_url(s.output_path, state.allowed, config.max_json_bytes) for s in steps},
    }
