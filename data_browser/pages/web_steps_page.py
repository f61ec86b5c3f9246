"""An extract or filter step (``/webstep``, JSON at ``/api/webstep``): pass/drop counts by reason and a page of
its documents; one document before and after (``/webstep/doc``, JSON at ``/api/webstep/doc``): the raw HTML
beside the extracted text, or the filter's scores against each rule's threshold with the verdict."""

from __future__ import annotations

from fastapi import APIRouter, Query

from data_browser.readers import ReadFailure
from data_browser.readers import page as read_page
from data_browser.web import State, page
from data_browser.web_steps import SUMMARY, extract_doc, filter_doc, read_json, record_files, step_kind
from marin.storage import join

router = APIRouter()


def _kind(state, path: str) -> str:
    kind = step_kind(path, state.config.max_json_bytes)
    if kind is None:
        raise ReadFailure(f"{path}: not the output of an extract or filter step (no summary.json of one)")
    return kind


def _page_size(state, data: dict) -> dict:
    return {"page_size": state.config.records_per_page}


@page(router, html="/webstep", template="webstep.html", api="/api/webstep", context=_page_size)
def webstep_data(state: State, path: str, offset: int = Query(0, ge=0)) -> dict:
    path, config = state.resolve(path), state.config
    kind = _kind(state, path)
    summary = read_json(join(path, SUMMARY), config.max_json_bytes)
    files = record_files(join(path, "documents" if kind == "extract" else "decisions"))
    rows, more = read_page(files[0], offset, config.records_per_page, config.max_line_bytes) if files else ([], False)
    skipped_files = record_files(join(path, "skipped")) if kind == "extract" else []
    skipped = read_page(skipped_files[0], 0, config.records_per_page, config.max_line_bytes)[0] if skipped_files else []
    return {
        "path": path,
        "kind": kind,
        "summary": summary,
        "rows": [r.data for r in rows],
        "skipped": [r.data for r in skipped],
        "offset": offset,
        "more": more,
        "file": files[0] if files else None,
    }


@page(router, html="/webstep/doc", template="webdoc.html", api="/api/webstep/doc")
def webstep_doc_data(state: State, path: str, id: str) -> dict:  # noqa: A002 (the query parameter's name)
    path = state.resolve(path)
    doc = extract_doc if _kind(state, path) == "extract" else filter_doc
    return {"path": path, **doc(path, id, state.config, state.resolve)}
