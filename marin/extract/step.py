"""The extract step: ``extract_pages(ExtractConfig)`` turns raw HTML pages into text documents.

One Ray task per input file (``marin.parallel.run_tasks``); each writes its outputs atomically, then a
done-marker, so a rerun after a crash redoes only unfinished files. Output layout (the documents are
what the dedupe and quality steps read)::

    <output_path>/documents/<rel>.jsonl.gz   {"id", "text", "url", "source", "provenance": {"file", "record", ...}}
    <output_path>/skipped/<rel>.jsonl.gz     {"id", "url", "reason", "detail", "provenance"}: pages with no text
    <output_path>/summary.json               pages in, documents out, skips by reason, encodings, pages/s

A page never disappears silently: it is a document, or a skipped row whose ``reason`` is one of
``binary`` / ``undecodable`` (bytes that are not text), ``no_text`` (the extractor found none),
``too_short`` (under ``min_chars``) or ``extractor_error`` (the extractor raised; ``detail`` says what).
Malformed input records (record-file inputs) follow ``on_error`` and are counted as ``malformed_records``.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import posixpath
import time
from collections.abc import Iterator

from marin.extract.config import ExtractConfig, ExtractorConfig
from marin.extract.extractors import extract_text, extractor_version
from marin.extract.pages import PAGE_SUFFIXES, RawPage, decode_html, read_pages
from marin.parallel import run_tasks
from marin.storage import delete, join, write_atomic
from marin.storage.records import ReadStats, RecordWriter
from marin.storage.shards import (
    Shard,
    fingerprint_of,
    finished_summary,
    list_shards,
    mark_done,
    prepare_work,
    read_done,
    with_suffix,
)

logger = logging.getLogger(__name__)
DOCUMENTS_DIR = "documents"
SKIPPED_DIR = "skipped"
SUMMARY = "summary.json"
SKIP_REASONS = ("binary", "undecodable", "no_text", "too_short", "extractor_error")
PAGES_PER_BATCH = 256


def extract_page(page: RawPage, extractor: ExtractorConfig, min_chars: int) -> tuple[str | None, str, str]:
    """(text, encoding, "") for a page that yields text, else (None, skip reason, detail)."""
    html, encoding = decode_html(page.content, page.content_type)
    if html is None:
        return None, encoding, f"{len(page.content)} bytes"
    try:
        text = extract_text(html, extractor)
    except Exception as e:  # noqa: BLE001 -- one bad page must not fail a crawl-sized shard; it is counted
        return None, "extractor_error", f"{type(e).__name__}: {e}"[:500]
    if not text:
        return None, "no_text", f"{len(html)} characters of HTML"
    if len(text) < min_chars:
        return None, "too_short", f"{len(text)} < min_chars={min_chars}"
    return text, encoding, ""


def _in_batches(pages: Iterator[RawPage]) -> Iterator[RawPage]:
    """The same pages, each batch of ``PAGES_PER_BATCH`` read before the first of them is extracted: reading
    a WARC page by page between extractions made both slower (the reader's and the parser's working memory
    evict each other); batched, the step's pages/s rose ~10% (docs/data_quality.md)."""
    while batch := list(itertools.islice(pages, PAGES_PER_BATCH)):
        yield from batch


def extract_shard(config: ExtractConfig, shard: Shard, work: str) -> dict:
    """Extract one input file; returns its counts (read back from the done-marker when already finished)."""
    done = read_done(work, shard)
    if done is not None:
        return done
    rel = with_suffix(shard.rel, ".jsonl.gz")
    source = config.source or posixpath.dirname(shard.rel) or "web"
    counts: dict = {"pages": 0, "documents": 0, "chars": 0, "skipped": {}, "encodings": {}}
    stats = ReadStats()
    with (
        RecordWriter(join(config.output_path, DOCUMENTS_DIR, rel)) as docs,
        RecordWriter(join(config.output_path, SKIPPED_DIR, rel)) as skipped,
    ):
        pages = read_pages(shard.url, shard.rel, html_field=config.html_field, on_error=config.on_error, stats=stats)
        for page in _in_batches(pages):
            counts["pages"] += 1
            text, info, detail = extract_page(page, config.extractor, config.min_chars)
            provenance = {"file": shard.rel, **page.provenance}
            if text is None:
                counts["skipped"][info] = counts["skipped"].get(info, 0) + 1
                skipped.write(
                    {"id": page.id, "url": page.url, "reason": info, "detail": detail, "provenance": provenance}
                )
                continue
            counts["documents"] += 1
            counts["chars"] += len(text)
            counts["encodings"][info] = counts["encodings"].get(info, 0) + 1
            docs.write(
                {
                    "id": page.id,
                    "text": text,
                    "url": page.url,
                    "source": source,
                    "provenance": {**provenance, "encoding": info},
                }
            )
    counts["malformed_records"] = stats.skipped
    mark_done(work, shard, counts)
    return counts


def _merge(rows: list[dict]) -> dict:
    total: dict = {"pages": 0, "documents": 0, "chars": 0, "skipped": {}, "encodings": {}, "malformed_records": 0}
    for row in rows:
        for key in ("pages", "documents", "chars", "malformed_records"):
            total[key] += row[key]
        for key in ("skipped", "encodings"):
            for name, n in row[key].items():
                total[key][name] = total[key].get(name, 0) + n
    total["skipped"] = dict(sorted(total["skipped"].items()))
    total["encodings"] = dict(sorted(total["encodings"].items()))
    return total


def extract_pages(config: ExtractConfig) -> dict:
    """Extract text from every page under ``config.input_path``; returns the summary (also summary.json)."""
    start = time.monotonic()
    fingerprint = fingerprint_of(config)
    done = finished_summary(join(config.output_path, SUMMARY), fingerprint)
    if done is not None:
        logger.info("extract: %s is complete for this config; nothing to do", config.output_path)
        return done
    shards = list_shards(config.input_path, suffixes=PAGE_SUFFIXES, field="ExtractConfig.input_path")
    work = join(config.output_path, "_work")
    prepare_work(work, fingerprint)
    logger.info("extract: %d input files under %s with %s", len(shards), config.input_path, config.extractor.name)
    rows = run_tasks(
        extract_shard,
        [(config, s, work) for s in shards],
        use_ray=config.use_ray,
        max_workers=config.max_workers,
        label="extract",
    )
    total = _merge(rows)
    seconds = time.monotonic() - start
    summary = {
        "input_path": config.input_path,
        "fingerprint": fingerprint,
        "extractor": {**dataclasses.asdict(config.extractor), "version": extractor_version(config.extractor.name)},
        "min_chars": config.min_chars,
        "files": len(shards),
        "pages_in": total["pages"],
        "documents_out": total["documents"],
        "skipped": total["skipped"],
        "malformed_records": total["malformed_records"],
        "chars_out": total["chars"],
        "encodings": total["encodings"],
        "per_file": {s.rel: {k: r[k] for k in ("pages", "documents", "skipped")} for s, r in zip(shards, rows)},
        "seconds": round(seconds, 3),
        "pages_per_second": round(total["pages"] / max(seconds, 1e-9), 1),
    }
    write_atomic(join(config.output_path, SUMMARY), json.dumps(summary, indent=2))
    delete(work, recursive=True)
    logger.info(
        "extract: %d pages -> %d documents; skipped %s",
        summary["pages_in"],
        summary["documents_out"],
        summary["skipped"] or "none",
    )
    return summary
