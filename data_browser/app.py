"""The data browser's web app: server-rendered pages (and the same data as JSON under /api).

FastAPI was chosen over Flask for its typed query parameters (offsets and limits are validated before
any handler runs), its test client, and uvicorn; pages are plain Jinja2 templates, the only script is the
vendored uPlot for training curves, so it works with no network and no build step.

Every handler is a GET; every path parameter goes through ``access.resolve`` before any I/O.
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

from fastapi import FastAPI, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment, FileSystemLoader, select_autoescape

from data_browser import experiments as exp
from data_browser.access import Forbidden, resolve
from data_browser.config import BrowserConfig
from data_browser.readers import ReadFailure, find_by_ids, is_record_file, page, preview_text, search
from marin.execution.status import STATUS_FILE
from marin.storage import filesystem, join

HERE = Path(__file__).parent


def create_app(config: BrowserConfig) -> FastAPI:
    roots = config.normalized_roots()
    app = FastAPI(title="Marin data browser", docs_url=None, redoc_url=None, openapi_url=None)
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    templates = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape())
    templates.filters["q"] = lambda s: quote(str(s), safe="")
    templates.filters["pretty"] = lambda v: json.dumps(v, indent=2, ensure_ascii=False, default=str)

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

    @app.exception_handler(FileNotFoundError)
    async def missing(request: Request, e: FileNotFoundError):
        if wants_json(request):
            return JSONResponse({"error": f"not found: {e}"}, status_code=404)
        return render("error.html", 404, title="Not found", message=str(e))

    @app.get("/", response_class=HTMLResponse)
    def index():
        listing = [{"root": r, "experiments": _safe(lambda r=r: exp.list_experiments(r), [])} for r in roots]
        return render("index.html", listing=listing)

    def listing(path: str) -> list[dict]:
        fs, p = filesystem(path)
        if not fs.isdir(p):
            raise FileNotFoundError(path)
        entries = []
        for info in sorted(fs.ls(p, detail=True), key=lambda i: i["name"]):
            name = info["name"].rstrip("/").rsplit("/", 1)[-1]
            full = join(path, name)
            is_dir = info.get("type") == "directory"
            state = exp.step_state(full)[0] if is_dir and fs.exists(join(p, name, STATUS_FILE)) else None
            entries.append({"name": name, "path": full, "dir": is_dir, "size": info.get("size"), "state": state})
        return entries

    @app.get("/browse", response_class=HTMLResponse)
    def browse(path: str):
        path = resolve(path, roots)
        fs, p = filesystem(path)
        if fs.isdir(p):
            state = exp.step_state(path)[0] if fs.exists(join(p, STATUS_FILE)) else None
            return render("listing.html", path=path, entries=listing(path), state=state,
                          parent=_parent(path, roots))
        if not fs.exists(p):
            raise FileNotFoundError(path)
        if is_record_file(path):
            return RedirectResponse(f"/records?path={quote(path, safe='')}", status_code=302)
        text, cut = preview_text(path, config.max_view_bytes)
        return render("text.html", path=path, text=text, cut=cut, parent=_parent(path, roots))

    @app.get("/api/list")
    def api_list(path: str):
        return {"path": resolve(path, roots), "entries": listing(resolve(path, roots))}

    def records_data(path: str, offset: int, q: str | None) -> dict:
        path = resolve(path, roots)
        if not is_record_file(path):
            raise ReadFailure(f"{path}: not a record file (.jsonl[.gz|.zst] or .parquet)")
        if q:
            hits, scanned, stopped = search(path, q, config.records_per_page, config.max_search_records,
                                            config.max_line_bytes)
            return {"path": path, "query": q, "records": hits, "scanned": scanned, "stopped_early": stopped,
                    "offset": 0, "more": False}
        records, more = page(path, offset, config.records_per_page, config.max_line_bytes)
        return {"path": path, "records": records, "offset": offset, "more": more, "query": None}

    @app.get("/records", response_class=HTMLResponse)
    def records(path: str, offset: int = Query(0, ge=0), q: str | None = None):
        data = records_data(path, offset, q)
        return render("records.html", **data, page_size=config.records_per_page,
                      collapse_chars=config.collapse_chars, parent=_parent(data["path"], roots))

    @app.get("/api/records")
    def api_records(path: str, offset: int = Query(0, ge=0), q: str | None = None):
        data = records_data(path, offset, q)
        data["records"] = [r.__dict__ for r in data["records"]]
        return data

    @app.get("/compare", response_class=HTMLResponse)
    def compare(left: str, right: str, offset: int = Query(0, ge=0)):
        left, right = resolve(left, roots), resolve(right, roots)
        rows, more = page(left, offset, config.records_per_page, config.max_line_bytes)
        ids = {str(r.data.get("id")) for r in rows if isinstance(r.data, dict) and "id" in r.data}
        matches = find_by_ids(right, ids, config.max_search_records, config.max_line_bytes) if ids else {}
        pairs = [(r, matches.get(str(r.data.get("id"))) if isinstance(r.data, dict) else None) for r in rows]
        return render("compare.html", left=left, right=right, pairs=pairs, offset=offset, more=more,
                      page_size=config.records_per_page, collapse_chars=config.collapse_chars)

    def experiment_data(path: str) -> dict:
        path = resolve(path, roots)
        record = exp.load_record(path)
        steps = exp.step_views(record)
        for s in steps:  # links only to outputs the browser may show
            s.browsable = _safe(lambda s=s: bool(resolve(s.output_path, roots)), False)
        return {"path": path, "record": record, "steps": steps,
                "github": exp.github_url(record, config.github_repo_url),
                "wandb": {s.identity: exp.wandb_url(s.output_path) for s in steps if s.browsable}}

    @app.get("/experiment", response_class=HTMLResponse)
    def experiment(path: str):
        data = experiment_data(path)
        return render("experiment.html", **data, svg=exp.dag_svg(data["steps"]))

    @app.get("/api/experiment")
    def api_experiment(path: str):
        data = experiment_data(path)
        return {**data, "steps": [{**s.__dict__, "duration": s.duration} for s in data["steps"]]}

    @app.get("/training", response_class=HTMLResponse)
    def training(path: str):
        path = resolve(path, roots)
        return render("training.html", path=path, metrics=exp.load_metrics(path), results=exp.load_results(path),
                      wandb=exp.wandb_url(path))

    @app.get("/api/metrics")
    def api_metrics(path: str):
        path = resolve(path, roots)
        return {"path": path, "metrics": exp.load_metrics(path), "results": exp.load_results(path)}

    return app


def _parent(path: str, roots: list[str]) -> str | None:
    if path in roots:
        return None
    parent = path.rstrip("/").rsplit("/", 1)[0]
    try:
        return resolve(parent, roots)
    except Forbidden:
        return None


def _safe(fn, default):
    try:
        return fn()
    except (Forbidden, OSError, ValueError):
        return default


