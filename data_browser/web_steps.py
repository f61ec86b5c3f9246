"""Data for the web-data step pages (``data_browser.pages.web_steps_page``): an extract or filter step's
counts and documents, and one document before and after.

    /webstep?path=<step output>                 pass/drop counts by reason, a page of documents to open
    /webstep/doc?path=<step output>&id=<doc id>  extract: the raw HTML beside the extracted text;
                                                 filter: the text, each rule's score against its threshold,
                                                 and the verdict

A step is recognised by its ``summary.json`` (extract: ``pages_in``; filter: ``rules``). Everything is read
from the files the steps write (``.executor_info`` names the inputs); the browser imports no step code, so
the page's raw HTML is shown as its bytes decoded as UTF-8 (undecodable bytes replaced), which is what the
extract step saw before charset detection.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

from data_browser.readers import ReadFailure, find_by_ids, read_bounded
from marin.execution.status import INFO_FILE
from marin.storage import exists, join, read_bytes
from marin.storage.records import RECORD_SUFFIXES, read_records
from marin.storage.shards import list_shards, with_suffix
from marin.storage.warc import WARC_SUFFIXES, read_warc

SUMMARY = "summary.json"
MAX_HTML_CHARS = 200_000
_PAGE_SUFFIXES = WARC_SUFFIXES + RECORD_SUFFIXES + (".html", ".htm")


def read_json(url: str, max_bytes: int) -> dict:
    try:
        return json.loads(read_bounded(url, max_bytes))
    except (ValueError, UnicodeDecodeError) as e:
        raise ReadFailure(f"{url}: not readable JSON ({e})") from e


def step_kind(path: str, max_bytes: int) -> str | None:
    """``"extract"`` or ``"filter"`` for the output directory of such a step, else None."""
    url = join(path, SUMMARY)
    if not exists(url):
        return None
    try:
        summary = read_json(url, max_bytes)
    except ReadFailure:
        return None
    if "pages_in" in summary and "skipped" in summary:
        return "extract"
    if "rules" in summary and "dropped" in summary:
        return "filter"
    return None


def _config(path: str, max_bytes: int) -> dict:
    info = read_json(join(path, INFO_FILE), max_bytes)
    config = info.get("config")
    if not isinstance(config, dict):
        raise ReadFailure(f"{join(path, INFO_FILE)}: no resolved config")
    return config


def _find_doc(files: list[str], doc_id: str, max_scan: int, max_line: int) -> tuple[str, dict] | None:
    for url in files:
        found, _ = find_by_ids(url, {doc_id}, max_scan, max_line)
        if doc_id in found:
            return url, found[doc_id].data
    return None


def record_files(root: str) -> list[str]:
    if not exists(root):
        return []
    return [s.url for s in list_shards(root, suffixes=RECORD_SUFFIXES, field=root)]


def _raw_page(input_path: str, rel: str, record: int, html_field: str) -> str:
    """The raw page ``record`` (1-based) of input file ``rel``, decoded for display."""
    shard = next(
        (s for s in list_shards(input_path, suffixes=_PAGE_SUFFIXES, field="input_path") if s.rel == rel), None
    )
    if shard is None:
        raise FileNotFoundError(f"{rel} under {input_path}")
    if shard.url.lower().endswith(WARC_SUFFIXES):
        pages: Iterator = (p.payload for p in read_warc(shard.url))
    elif shard.url.lower().endswith((".html", ".htm")):
        pages = iter([read_bytes(shard.url)])
    else:
        pages = (r.get(html_field, "") for r in read_records(shard.url))
    for n, content in enumerate(pages, 1):
        if n == record:
            text = content.decode("utf-8", errors="replace") if isinstance(content, bytes) else str(content)
            return text[:MAX_HTML_CHARS]
    raise FileNotFoundError(f"record {record} of {shard.url}")


def extract_doc(path: str, doc_id: str, config, check: Callable[[str], str]) -> dict:
    step = _config(path, config.max_json_bytes)
    found = _find_doc(record_files(join(path, "documents")), doc_id, config.max_search_records, config.max_line_bytes)
    kept = found is not None
    if not kept:
        found = _find_doc(record_files(join(path, "skipped")), doc_id, config.max_search_records, config.max_line_bytes)
    if found is None:
        raise FileNotFoundError(f"document {doc_id!r} in {path}")
    _, row = found
    provenance = row.get("provenance") or {}
    input_path = check(step["input_path"])
    html = _raw_page(
        input_path, provenance.get("file", ""), int(provenance.get("record", 0)), step.get("html_field", "html")
    )
    return {
        "kind": "extract",
        "id": doc_id,
        "row": row,
        "kept": kept,
        "html": html,
        "text": row.get("text", ""),
        "reason": row.get("reason"),
        "detail": row.get("detail"),
    }


def filter_doc(path: str, doc_id: str, config, check: Callable[[str], str]) -> dict:
    step = _config(path, config.max_json_bytes)
    summary = read_json(join(path, SUMMARY), config.max_json_bytes)
    found = _find_doc(record_files(join(path, "decisions")), doc_id, config.max_search_records, config.max_line_bytes)
    if found is None:
        raise FileNotFoundError(f"document {doc_id!r} in {path}/decisions")
    decision_url, decision = found
    rel = decision_url.split("/decisions/", 1)[1]
    attrs: dict = {}
    for attr_path in step.get("attribute_paths", []):
        url = check(join(attr_path, "attributes", rel))
        hit = _find_doc([url], doc_id, config.max_search_records, config.max_line_bytes)
        if hit:
            attrs.update({k: v for k, v in hit[1].items() if k != "id"})
    documents = [
        s.url
        for s in list_shards(check(step["input_path"]), suffixes=RECORD_SUFFIXES, field="input_path")
        if with_suffix(s.rel, ".jsonl.gz") == rel
    ]
    doc = _find_doc(documents, doc_id, config.max_search_records, config.max_line_bytes)
    rules = []
    for rule in summary.get("rules", []):
        score = (attrs.get(rule["attribute"]) or {}).get(rule["label"])
        threshold = rule.get("threshold") if rule.get("threshold") is not None else rule.get("min_score")
        passed = (
            score is not None
            and (threshold is None or score >= threshold)
            and (rule.get("max_score") is None or score <= rule["max_score"])
        )
        rules.append({**rule, "score": score, "cut": threshold, "passed": passed})
    return {
        "kind": "filter",
        "id": doc_id,
        "kept": decision.get("kept"),
        "reason": decision.get("reason"),
        "text": doc[1].get("text", "") if doc else "",
        "rules": rules,
        "attributes": attrs,
    }
