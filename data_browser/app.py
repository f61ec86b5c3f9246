"""The data browser's web app: server-rendered pages (and the same data as JSON under /api).

FastAPI was chosen over Flask for its typed query parameters (offsets and limits are validated before
any handler runs), its test client, and uvicorn; pages are plain Jinja2 templates, the only script is the
vendored uPlot for training curves, so it works with no network and no build step.

Every handler is a GET; every path parameter goes through ``access.resolve`` before any I/O, and so does
every file a page opens on its own (a step's ``metrics.jsonl``, the outputs an experiment record names).
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

from fastapi import FastAPI, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment, FileSystemLoader, select_autoescape

from data_browser import experiments as exp
from data_browser import training, web_steps
from data_browser.access import Forbidden, resolve
from data_browser.config import BrowserConfig
from data_browser.readers import (ReadFailure, Record, find_by_ids, first_record, is_record_file, page, preview_text,
                                  search)
from marin.execution.status import STATUS_FILE
from marin.storage import exists, filesystem, join
from marin.storage.records import RECORD_SUFFIXES

HERE = Path(__file__).parent


def create_app(config: BrowserConfig) -> FastAPI:
    roots = config.normalized_roots()
    app = FastAPI(title="Marin data browser", docs_url=None, redoc_url=None, openapi_url=None,
                  default_response_class=FiniteJSONResponse)
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    templates = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape())
    templates.filters["q"] = lambda s: quote(str(s), safe="")
    templates.filters["pretty"] = lambda v: json.dumps(v, indent=2, ensure_ascii=False, default=str)
    templates.filters["num"] = training.format_number

    def allowed(url: str) -> bool:
        return _safe(lambda: bool(resolve(url, roots)), False)

    def render(name: str, status: int = 200, **context) -> HTMLResponse:
        return HTMLResponse(templates.get_template(name).render(roots=roots, **context), status_code=status)

    def wants_json(request: Request) -> bool:
        return request.url.path.startswith("/api/")

    @app.exception_handler(Forbidden)
    async def forbidden(request: Request, e: Forbidden):
        if wants_json(request):
            return JSONResponse({"error": str(e)}, status_code=403)
        return render("error.html", 403, title="Forbidden", message=str(e))

    @app.exception_handler(ReadFailure)
    async def unreadable(request: Request, e: ReadFailure):
        if wants_json(request):
            return JSONResponse({"error": str(e)}, status_code=422)
        return render("error.html", 422, title="Cannot read this file", message=str(e))

    @app.exception_handler(OSError)
    async def io_error(request: Request, e: OSError):  # a directory where a file belongs, no permission, ...
        message = f"{type(e).__name__}: {e}"
        if wants_json(request):
            return JSONResponse({"error": message}, status_code=422)
        return render("error.html", 422, title="Cannot read this file", message=message)

    @app.exception_handler(FileNotFoundError)
    async def missing(request: Request, e: FileNotFoundError):
        if wants_json(request):
            return JSONResponse({"error": f"not found: {e}"}, status_code=404)
        return render("error.html", 404, title="Not found", message=str(e))

    @app.get("/", response_class=HTMLResponse)
    def index():
        listing = [{"root": r, "experiments": _safe(lambda r=r: exp.list_experiments(r), [])} for r in roots]
        return render("index.html", listing=listing)

    def dir_state(path: str) -> str | None:
        status = join(path, STATUS_FILE)
        return exp.step_state(path)[0] if allowed(status) and exists(status) else None

    def listing(path: str) -> list[dict]:
        fs, p = filesystem(path)
        if not fs.isdir(p):
            raise FileNotFoundError(path)
        entries = []
        for info in sorted(fs.ls(p, detail=True), key=lambda i: i["name"]):
            name = info["name"].rstrip("/").rsplit("/", 1)[-1]
            full = join(path, name)
            is_dir = info.get("type") == "directory"
            state = dir_state(full) if is_dir else None
            entries.append({"name": name, "path": full, "dir": is_dir, "size": info.get("size"), "state": state})
        return entries

    @app.get("/browse", response_class=HTMLResponse)
    def browse(path: str):
        path = resolve(path, roots)
        fs, p = filesystem(path)
        if fs.isdir(p):
            state = dir_state(path)
            return render("listing.html", path=path, entries=listing(path), state=state,
                          parent=_parent(path, roots), web_step=web_steps.step_kind(path, config.max_json_bytes))
        if not fs.exists(p):
            raise FileNotFoundError(path)
        if is_record_file(path):
            return RedirectResponse(f"/records?path={quote(path, safe='')}", status_code=302)
        text, cut = preview_text(path, config.max_view_bytes)
        return render("text.html", path=path, text=text, cut=cut, parent=_parent(path, roots))

    @app.get("/api/list")
    def api_list(path: str):
        return {"path": resolve(path, roots), "entries": listing(resolve(path, roots))}

    def record_file(path: str) -> str:
        path = resolve(path, roots)
        if not is_record_file(path):
            raise ReadFailure(f"{path}: not a record file (.jsonl[.gz|.zst] or .parquet)")
        return path

    def records_data(path: str, offset: int, q: str | None) -> dict:
        path = record_file(path)
        if q:
            hits, scanned, stopped = search(path, q, config.records_per_page, config.max_search_records,
                                            config.max_line_bytes)
            return {"path": path, "query": q, "records": hits, "scanned": scanned, "stopped_early": stopped,
                    "offset": 0, "more": False}
        records, more = page(path, offset, config.records_per_page, config.max_line_bytes)
        return {"path": path, "records": records, "offset": offset, "more": more, "query": None}

    def siblings(path: str, limit: int = 50) -> list[str]:
        """Other record files in the same directory: quick 'compare with' targets."""
        parent = _parent(path, roots)
        if parent is None:
            return []
        entries = _safe(lambda: listing(parent), [])
        return [e["path"] for e in entries if not e["dir"] and e["path"] != path and e["path"].endswith(RECORD_SUFFIXES)
                ][:limit]

    @app.get("/records", response_class=HTMLResponse)
    def records(path: str, offset: int = Query(0, ge=0), q: str | None = None):
        data = records_data(path, offset, q)
        return render("records.html", **data, page_size=config.records_per_page, siblings=siblings(data["path"]),
                      collapse_chars=config.collapse_chars, parent=_parent(data["path"], roots))

    @app.get("/api/records")
    def api_records(path: str, offset: int = Query(0, ge=0), q: str | None = None):
        data = records_data(path, offset, q)
        data["records"] = [r.__dict__ for r in data["records"]]
        return data

    def compare_data(left: str, right: str, offset: int, align: str | None) -> dict:
        """A page of ``left`` beside the matching records of ``right``: the record with the same ``id``
        (default when both files have ids; ``right`` is scanned up to ``max_search_records``) or the
        record at the same index."""
        left, right = record_file(left), record_file(right)
        size, max_line = config.records_per_page, config.max_line_bytes
        rows, more = page(left, offset, size, max_line)
        if align is None:
            first = first_record(right, max_line)
            both_have_ids = bool(rows) and all(map(_has_id, rows)) and first is not None and _has_id(first)
            align = "id" if both_have_ids else "index"
        cut = False
        if align == "id":
            ids = {str(r.data["id"]) for r in rows if _has_id(r)}
            matches, cut = find_by_ids(right, ids, config.max_search_records, max_line) if ids else ({}, False)
            pairs = [(r, matches.get(str(r.data["id"])) if _has_id(r) else None) for r in rows]
        else:
            right_rows, more_right = page(right, offset, size, max_line)
            pairs = list(itertools.zip_longest(rows, right_rows))
            more = more or more_right
        return {"left": left, "right": right, "align": align, "offset": offset, "more": more, "pairs": pairs,
                "scan_cut": cut}

    @app.get("/compare", response_class=HTMLResponse)
    def compare(left: str, right: str, offset: int = Query(0, ge=0), align: Literal["id", "index"] | None = None):
        data = compare_data(left, right, offset, align)
        return render("compare.html", **data, page_size=config.records_per_page,
                      max_scan=config.max_search_records, collapse_chars=config.collapse_chars)

    @app.get("/api/compare")
    def api_compare(left: str, right: str, offset: int = Query(0, ge=0),
                    align: Literal["id", "index"] | None = None):
        data = compare_data(left, right, offset, align)
        data["pairs"] = [[r.__dict__ if r else None for r in pair] for pair in data["pairs"]]
        return data

    def experiment_data(path: str) -> dict:
        path = resolve(path, roots)
        record = exp.load_record(path, config.max_json_bytes)
        steps = exp.step_views(record, allowed, config.max_json_bytes)  # files read only under the roots
        return {"path": path, "record": record, "steps": steps,
                "github": exp.github_url(record, config.github_repo_url),
                "wandb": {s.identity: exp.wandb_url(s.output_path, allowed, config.max_json_bytes) for s in steps}}

    @app.get("/experiment", response_class=HTMLResponse)
    def experiment(path: str):
        data = experiment_data(path)
        return render("experiment.html", **data, svg=exp.dag_svg(data["steps"]))

    @app.get("/api/experiment")
    def api_experiment(path: str):
        data = experiment_data(path)
        return {**data, "steps": [{**s.__dict__, "duration": s.duration} for s in data["steps"]]}

    def training_data(path: str) -> dict:
        path = resolve(path, roots)
        metrics = training.load_metrics(resolve(join(path, training.METRICS_FILE), roots), config.max_metrics_bytes,
                                        config.max_metric_points)
        results, error = training.load_results(resolve(join(path, training.RESULTS_FILE), roots),
                                               config.max_json_bytes)
        return {"path": path, "metrics": metrics.columns, "metrics_notes": metrics.notes, "results": results,
                "results_error": error}

    @app.get("/training", response_class=HTMLResponse)
    def training_page(path: str):
        data = training_data(path)
        return render("training.html", **data, table=training.results_table(data["results"]),
                      wandb=exp.wandb_url(data["path"], allowed, config.max_json_bytes))

    @app.get("/api/metrics")
    def api_metrics(path: str):
        data = training_data(path)
        table = training.results_table(data["results"])
        return {**data, "results_table": [r.__dict__ for r in table.rows] if table else None}

    web_steps.register(app, roots=roots, render=render, config=config)  # extract/filter step views (issue 16)
    return app


def _parent(path: str, roots: list[str]) -> str | None:
    if path in roots:
        return None
    parent = path.rstrip("/").rsplit("/", 1)[0]
    try:
        return resolve(parent, roots)
    except Forbidden:
        return None


def _has_id(record: Record) -> bool:
    return isinstance(record.data, dict) and record.data.get("id") is not None


class FiniteJSONResponse(JSONResponse):
    """JSON with NaN and infinities as strings ("NaN", "Infinity"): records and metrics may hold them,
    and Starlette's JSONResponse refuses them with a 500 while JSON.parse refuses them in the page."""

    def render(self, content: Any) -> bytes:
        return json.dumps(_finite(content), ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value).replace("inf", "Infinity").replace("nan", "NaN")
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _safe(fn, default):
    try:
        return fn()
    except (Forbidden, OSError, ValueError):
        return default


