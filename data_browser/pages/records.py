"""Record files (JSONL, plain/.gz/.zst, and Parquet): one file a page at a time (``/records``), and two
files side by side (``/compare``), aligned by ``id`` or by index."""

from __future__ import annotations

import itertools
from typing import Literal

from fastapi import APIRouter, Query

from data_browser import readers
from data_browser.pages.listing import directory_entries
from data_browser.readers import ReadFailure, Record, find_by_ids, first_record, is_record_file, search
from data_browser.web import BrowserState, State, page, safe
from marin.storage.records import RECORD_SUFFIXES

router = APIRouter()


def record_file(state: BrowserState, path: str) -> str:
    path = state.resolve(path)
    if not is_record_file(path):
        raise ReadFailure(f"{path}: not a record file (.jsonl[.gz|.zst] or .parquet)")
    return path


def siblings(state: BrowserState, path: str, limit: int = 50) -> list[str]:
    """Other record files in the same directory: quick 'compare with' targets."""
    parent = state.parent(path)
    if parent is None:
        return []
    entries = safe(lambda: directory_entries(state, parent), [])
    return [e["path"] for e in entries if not e["dir"] and e["path"] != path and e["path"].endswith(RECORD_SUFFIXES)][
        :limit
    ]


def _records_page(state: BrowserState, data: dict) -> dict:
    return {
        "page_size": state.config.records_per_page,
        "siblings": siblings(state, data["path"]),
        "collapse_chars": state.config.collapse_chars,
        "parent": state.parent(data["path"]),
    }


@page(router, html="/records", template="records.html", api="/api/records", context=_records_page)
def records_data(state: State, path: str, offset: int = Query(0, ge=0), q: str | None = None) -> dict:
    """A page of records from ``offset``, or with ``q`` the first matches of a bounded streaming search."""
    path, config = record_file(state, path), state.config
    if q:
        hits, scanned, stopped = search(
            path, q, config.records_per_page, config.max_search_records, config.max_line_bytes
        )
        return {
            "path": path,
            "query": q,
            "records": hits,
            "scanned": scanned,
            "stopped_early": stopped,
            "offset": 0,
            "more": False,
        }
    records, more = readers.page(path, offset, config.records_per_page, config.max_line_bytes)
    return {"path": path, "records": records, "offset": offset, "more": more, "query": None}


def _compare_page(state: BrowserState, data: dict) -> dict:
    return {
        "page_size": state.config.records_per_page,
        "max_scan": state.config.max_search_records,
        "collapse_chars": state.config.collapse_chars,
    }


@page(router, html="/compare", template="compare.html", api="/api/compare", context=_compare_page)
def compare_data(
    state: State, left: str, right: str, offset: int = Query(0, ge=0), align: Literal["id", "index"] | None = None
) -> dict:
    """A page of ``left`` beside the matching records of ``right``: the record with the same ``id``
    (default when both files have ids; ``right`` is scanned up to ``max_search_records``) or the
    record at the same index."""
    left, right = record_file(state, left), record_file(state, right)
    config = state.config
    size, max_line = config.records_per_page, config.max_line_bytes
    rows, more = readers.page(left, offset, size, max_line)
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
        right_rows, more_right = readers.page(right, offset, size, max_line)
        pairs = list(itertools.zip_longest(rows, right_rows))
        more = more or more_right
    return {
        "left": left,
        "right": right,
        "align": align,
        "offset": offset,
        "more": more,
        "pairs": pairs,
        "scan_cut": cut,
    }


def _has_id(record: Record) -> bool:
    return isinstance(record.data, dict) and record.data.get("id") is not None
