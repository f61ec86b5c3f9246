"""The filter step: ``filter_documents(FilterConfig)`` keeps the documents whose attributes pass every rule.

Rules compare one score (``<attribute>[<label>]`` from a classify step's attribute files) with a fixed
threshold, or keep the top ``top_percent`` of the whole input by that score: a first parallel pass collects
the scores and turns the percentage into a threshold (the score of the document at that rank; ties at the
cut are kept), so the second pass is again a threshold test per document::

    rules=(AttributeRule(attribute="lang", label="en", min_score=0.5),
           AttributeRule(attribute="quality", label="hq", top_percent=30))

Documents and attribute rows are read in lockstep and their ids must match row by row (a mismatch is an
error naming both files). Output (documents in the input's format and file layout, for dedupe)::

    <output_path>/documents/<rel>                kept documents
    <output_path>/decisions/<rel>.jsonl.gz       per input document: {"id", "kept", "reason"?}
    <output_path>/summary.json                   in/out counts, drops by reason (the first rule failed),
                                                 each rule's resolved threshold
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from collections.abc import Iterator

import numpy as np

from marin.parallel import run_tasks
from marin.quality.classify import ATTRIBUTES_DIR, attribute_rel
from marin.quality.config import AttributeRule, FilterConfig
from marin.storage import delete, join, write_atomic
from marin.storage.records import RECORD_SUFFIXES, RecordWriter, read_documents, read_records
from marin.storage.shards import (
    Shard,
    fingerprint_of,
    finished_summary,
    list_shards,
    mark_done,
    prepare_work,
    read_done,
)

logger = logging.getLogger(__name__)
DOCUMENTS_DIR = "documents"
DECISIONS_DIR = "decisions"
SUMMARY = "summary.json"


def _rows(config: FilterConfig, shard: Shard) -> Iterator[tuple[dict, dict]]:
    """(document, merged attributes) pairs of one shard, checking that every attribute file lines up."""
    readers = [
        (url, read_records(url))
        for url in (join(p, ATTRIBUTES_DIR, attribute_rel(shard.rel)) for p in config.attribute_paths)
    ]
    for row, doc in enumerate(read_documents(shard.url), 1):
        merged: dict = {}
        for url, reader in readers:
            attrs = next(reader, None)
            if attrs is None or attrs.get("id") != doc.get("id"):
                got = "end of file" if attrs is None else f"id {attrs.get('id')!r}"
                raise ValueError(
                    f"{url}:{row}: attribute rows do not line up with {shard.url}: document id "
                    f"{doc.get('id')!r}, attribute {got} (rerun the classify step on these documents)"
                )
            merged.update({k: v for k, v in attrs.items() if k != "id"})
        yield doc, merged
    for url, reader in readers:
        if next(reader, None) is not None:
            raise ValueError(f"{url}: more attribute rows than documents in {shard.url}")


def score_of(attrs: dict, rule: AttributeRule, where: str) -> float:
    try:
        return float(attrs[rule.attribute][rule.label])
    except (KeyError, TypeError):
        raise ValueError(
            f"{where}: no score {rule.attribute}[{rule.label!r}] in the attribute files "
            f"(attributes present: {sorted(attrs)})"
        ) from None


def collect_scores(config: FilterConfig, shard: Shard, rules: tuple[AttributeRule, ...]) -> list[list[float]]:
    """The scores each top-percent rule ranks, for one shard."""
    out: list[list[float]] = [[] for _ in rules]
    for _doc, attrs in _rows(config, shard):
        for i, rule in enumerate(rules):
            out[i].append(score_of(attrs, rule, shard.url))
    return out


def top_percent_threshold(scores: np.ndarray, percent: float) -> float:
    """The lowest score among the top ``percent`` of ``scores`` (keep ``>=`` it)."""
    if len(scores) == 0:
        return math.inf
    k = max(1, math.ceil(len(scores) * percent / 100))
    return float(np.sort(scores)[::-1][k - 1])


def verdict(attrs: dict, rules: tuple[AttributeRule, ...], thresholds: dict[int, float], where: str) -> str | None:
    """None when every rule passes, else the name of the first rule that fails."""
    for i, rule in enumerate(rules):
        score = score_of(attrs, rule, where)
        if (
            (rule.min_score is not None and score < rule.min_score)
            or (rule.max_score is not None and score > rule.max_score)
            or (i in thresholds and score < thresholds[i])
        ):
            return rule.name
    return None


def filter_shard(config: FilterConfig, shard: Shard, thresholds: dict[int, float], work: str) -> dict:
    done = read_done(work, shard)
    if done is not None:
        return done
    counts: dict = {"documents_in": 0, "documents_out": 0, "dropped": {}}
    with (
        RecordWriter(join(config.output_path, DOCUMENTS_DIR, shard.rel)) as docs,
        RecordWriter(join(config.output_path, DECISIONS_DIR, attribute_rel(shard.rel))) as decisions,
    ):
        for doc, attrs in _rows(config, shard):
            counts["documents_in"] += 1
            reason = verdict(attrs, config.rules, thresholds, shard.url)
            if reason is None:
                counts["documents_out"] += 1
                docs.write(doc)
                decisions.write({"id": doc.get("id"), "kept": True})
            else:
                counts["dropped"][reason] = counts["dropped"].get(reason, 0) + 1
                decisions.write({"id": doc.get("id"), "kept": False, "reason": reason})
    mark_done(work, shard, counts)
    return counts


def filter_documents(config: FilterConfig) -> dict:
    """Filter the documents under ``config.input_path`` by their attributes; returns the summary."""
    start = time.monotonic()
    fingerprint = fingerprint_of(config)
    done = finished_summary(join(config.output_path, SUMMARY), fingerprint)
    if done is not None:
        return done
    shards = list_shards(config.input_path, suffixes=RECORD_SUFFIXES, field="FilterConfig.input_path")
    work = join(config.output_path, "_work")
    prepare_work(work, fingerprint)
    run = {"use_ray": config.use_ray, "max_workers": config.max_workers}
    ranked = [i for i, r in enumerate(config.rules) if r.top_percent is not None]
    thresholds: dict[int, float] = {}
    if ranked:
        per_shard = run_tasks(
            collect_scores,
            [(config, s, tuple(config.rules[i] for i in ranked)) for s in shards],
            label="filter/rank",
            **run,
        )
        for j, i in enumerate(ranked):
            scores = np.array([x for shard_scores in per_shard for x in shard_scores[j]], dtype=np.float64)
            thresholds[i] = top_percent_threshold(scores, config.rules[i].top_percent)
    rows = run_tasks(filter_shard, [(config, s, thresholds, work) for s in shards], label="filter", **run)
    dropped: dict[str, int] = {}
    for r in rows:
        for reason, n in r["dropped"].items():
            dropped[reason] = dropped.get(reason, 0) + n
    documents_in = sum(r["documents_in"] for r in rows)
    documents_out = sum(r["documents_out"] for r in rows)
    summary = {
        "fingerprint": fingerprint,
        "input_path": config.input_path,
        "documents_in": documents_in,
        "documents_out": documents_out,
        "kept_fraction": round(documents_out / max(documents_in, 1), 4),
        "dropped": dict(sorted(dropped.items())),
        "rules": [
            {**dataclasses.asdict(rule), "name": rule.name, "threshold": thresholds.get(i)}
            for i, rule in enumerate(config.rules)
        ],
        "seconds": round(time.monotonic() - start, 3),
    }
    write_atomic(join(config.output_path, SUMMARY), json.dumps(summary, indent=2))
    delete(work, recursive=True)
    logger.info("filter: %d -> %d documents (%s)", documents_in, documents_out, summary["dropped"] or "none dropped")
    return summary
