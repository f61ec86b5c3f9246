"""The inference step: ``classify_documents(ClassifyConfig)`` writes a score per label for every document.

One Ray task per document file; the attribute file mirrors it row for row, so row ``i`` of
``attributes/<rel>.jsonl.gz`` scores document ``i`` of ``<rel>``::

    {"id": "urn:uuid:...", "quality": {"hq": 0.9731, "web": 0.0269}}

Each task writes its file atomically and then a done-marker; a rerun after a kill redoes only the files
without one, and the rows always line up with their shard. Output::

    <output_path>/attributes/<rel>.jsonl.gz
    <output_path>/summary.json      documents scored, labels, mean score per label, documents/s
"""

from __future__ import annotations

import json
import logging
import time

from marin.parallel import run_tasks
from marin.quality.config import ClassifyConfig
from marin.quality.model import fasttext_line, load_model, model_labels, predict_scores
from marin.storage import delete, exists, join, write_atomic
from marin.storage.records import RECORD_SUFFIXES, RecordWriter, read_records
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
ATTRIBUTES_DIR = "attributes"
SUMMARY = "summary.json"


def model_file(model_path: str) -> str:
    """``model_path`` itself, or ``<model_path>/model.bin`` for a training step's output directory."""
    if model_path.endswith(".bin"):
        return model_path
    candidate = join(model_path, "model.bin")
    if not exists(candidate):
        raise FileNotFoundError(f"ClassifyConfig.model_path: no fastText model at {model_path} (nor {candidate})")
    return candidate


def attribute_rel(rel: str) -> str:
    return with_suffix(rel, ".jsonl.gz")


def classify_shard(config: ClassifyConfig, model_url: str, shard: Shard, work: str) -> dict:
    """Score one document file; returns {"documents", "sums": {label: sum of scores}}."""
    done = read_done(work, shard)
    if done is not None:
        return done
    model = load_model(model_url)
    sums: dict[str, float] = {}
    count = 0
    with RecordWriter(join(config.output_path, ATTRIBUTES_DIR, attribute_rel(shard.rel))) as out:
        batch_ids, batch_lines = [], []

        def flush():
            for doc_id, scores in zip(batch_ids, predict_scores(model, batch_lines), strict=True):
                out.write({"id": doc_id, config.attribute: scores})
                for label, score in scores.items():
                    sums[label] = sums.get(label, 0.0) + score
            batch_ids.clear(), batch_lines.clear()

        for doc in read_records(shard.url, required=(config.text_field,)):
            batch_ids.append(doc.get("id"))
            batch_lines.append(fasttext_line(str(doc[config.text_field]), config.max_chars))
            count += 1
            if len(batch_lines) >= config.batch_docs:
                flush()
        flush()
    counts = {"documents": count, "sums": {k: round(v, 6) for k, v in sorted(sums.items())}}
    mark_done(work, shard, counts)
    return counts


def classify_documents(config: ClassifyConfig) -> dict:
    """Write ``attributes/`` for every document under ``config.input_path``; returns the summary."""
    start = time.monotonic()
    fingerprint = fingerprint_of(config)
    done = finished_summary(join(config.output_path, SUMMARY), fingerprint)
    if done is not None:
        return done
    model_url = model_file(config.model_path)
    labels = model_labels(load_model(model_url))
    shards = list_shards(config.input_path, suffixes=RECORD_SUFFIXES, field="ClassifyConfig.input_path")
    work = join(config.output_path, "_work")
    prepare_work(work, fingerprint)
    rows = run_tasks(
        classify_shard,
        [(config, model_url, s, work) for s in shards],
        use_ray=config.use_ray,
        max_workers=config.max_workers,
        label=f"classify/{config.attribute}",
    )
    documents = sum(r["documents"] for r in rows)
    sums = {label: sum(r["sums"].get(label, 0.0) for r in rows) for label in sorted(labels)}
    seconds = time.monotonic() - start
    summary = {
        "fingerprint": fingerprint,
        "input_path": config.input_path,
        "model": model_url,
        "attribute": config.attribute,
        "labels": sorted(labels),
        "files": len(shards),
        "documents": documents,
        "mean_score": {label: round(s / max(documents, 1), 4) for label, s in sums.items()},
        "seconds": round(seconds, 3),
        "documents_per_second": round(documents / max(seconds, 1e-9), 1),
    }
    write_atomic(join(config.output_path, SUMMARY), json.dumps(summary, indent=2))
    delete(work, recursive=True)
    logger.info("classify/%s: %d documents in %d files", config.attribute, documents, len(shards))
    return summary
