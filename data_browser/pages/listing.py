"""Where to start: the roots with their experiment records (``/``), and directories and text files
(``/browse``, with the directory listing as JSON at ``/api/list``)."""

from __future__ import annotations

from urllib.parse import quote

from fastapi import APIRouter
from fastapi.responses import HTMLResponse, RedirectResponse

from data_browser import experiments as exp
from data_browser import rollouts, sft
from data_browser.readers import is_record_file, preview_text
from data_browser.step_files import StepFiles, files_from_names, step_files
from data_browser.web import BrowserState, State, page, safe
from data_browser.web_steps import step_kind
from marin.execution.status import STATUS_FILE
from marin.storage import exists, filesystem, join

router = APIRouter()


@page(router, html="/", template="index.html")
def index_data(state: State) -> dict:
    return {"listing": [{"root": r, "experiments": safe(lambda r=r: exp.list_experiments(r), [])} for r in state.roots]}


def dir_state(state: BrowserState, path: str) -> str | None:
    """The executor state of a step directory (None for a plain directory, or one whose status is off-limits)."""
    status = join(path, STATUS_FILE)
    return exp.step_state(path)[0] if state.allowed(status) and exists(status) else None


def directory_entries(state: BrowserState, path: str) -> list[dict]:
    """The entries of a resolved directory, sorted by name; FileNotFoundError if it is not a directory.

    A step directory among them (one with a state) also says which views it has (``files``): a directory of
    training steps offers the ones with curves for comparison."""
    fs, p = filesystem(path)
    if not fs.isdir(p):
        raise FileNotFoundError(path)
    entries = []
    for info in sorted(fs.ls(p, detail=True), key=lambda i: i["name"]):
        name = info["name"].rstrip("/").rsplit("/", 1)[-1]
        full = join(path, name)
        is_dir = info.get("type") == "directory"
        step = dir_state(state, full) if is_dir else None
        entries.append(
            {
                "name": name,
                "path": full,
                "dir": is_dir,
                "size": info.get("size"),
                "state": step,
                "files": step_files(full) if step else StepFiles(),
            }
        )
    return entries


@page(router, api="/api/list")
def list_data(state: State, path: str) -> dict:
    path = state.resolve(path)
    return {"path": path, "entries": directory_entries(state, path)}


@router.get("/browse", response_class=HTMLResponse)
def browse(state: State, path: str):
    """A directory's listing, a text file's beginning, or a redirect to the record viewer: not one data
    function, so it has no ``/api`` twin (``/api/list`` and ``/api/records`` hold its data)."""
    path = state.resolve(path)
    fs, p = filesystem(path)
    if fs.isdir(p):
        entries = directory_entries(state, path)
        return state.render(
            "listing.html",
            path=path,
            entries=entries,
            state=dir_state(state, path),
            files=files_from_names({e["name"] for e in entries}),
            parent=state.parent(path),
            web_step=step_kind(path, state.config.max_json_bytes),  # extract/filter step pages (issue 16)
            sft_cache=safe(lambda: sft.is_sft_cache(path), False),
            rl_run=safe(lambda: rollouts.is_rl_run(path), False),
        )
    if not fs.exists(p):
        raise FileNotFoundError(path)
    if is_record_file(path):
        return RedirectResponse(f"/records?path={quote(path, safe='')}", status_code=302)
    text, cut = preview_text(path, state.config.max_view_bytes)
    return state.render("text.html", path=path, text=text, cut=cut, parent=state.parent(path))
