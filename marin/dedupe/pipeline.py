"""The dedupe step: ``dedupe_documents(DedupeConfig)`` runs the stages of ``marin.dedupe.stages`` in order.

    map -> (exact partitions + band groups) -> cluster -> paragraph partitions -> write -> summary.json

Each stage is a list of independent tasks run by ``marin.parallel.run_tasks`` (Ray, or in-process), and
every task skips itself when its outputs already exist, so rerunning the step after a crash (the executor
reruns it in the same output directory) resumes where it stopped. ``_work/config.json`` records the
config the intermediate files were made with; a different config starts the work over.

Output layout::

    <output_path>/documents/<rel>              kept documents, same sharding and format as the input
    <output_path>/attributes/<rel>.jsonl.gz    per input document: kept?, reason, duplicate_of, ...
    <output_path>/summary.json                 counts in/out per reason, Bloom sizes, timings
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time

from marin.dedupe.config import DedupeConfig
from marin.dedupe.output import reduce_paragraphs, write_shard
from marin.dedupe.stages import BAND_GROUPS, Shard, cluster, map_shard, reduce_bands, reduce_exact, shard_dir
from marin.parallel import run_tasks
from marin.storage import delete, exists, filesystem, join, read_text, write_atomic
from marin.storage.records import find_record_files

logger = logging.getLogger(__name__)
SUMMARY = "summary.json"


def list_shards(input_path: str) -> list[Shard]:
    files = find_record_files(input_path)
    if not files:
        raise FileNotFoundError(
            f"DedupeConfig.input_path: no record files (.jsonl[.gz|.zst], .parquet) under {input_path}"
        )
    _, root = filesystem(input_path)
    root = root.rstrip("/")
    if any(ch in root for ch in "*?["):
        root = root[: min(root.find(ch) for ch in "*?[" if ch in root)].rpartition("/")[0]
    elif len(files) == 1 and not filesystem(input_path)[0].isdir(root):
        root = root.rpartition("/")[0]
    shards = []
    for i, url in enumerate(files):
        path = filesystem(url)[1]
        shards.append(Shard(index=i, url=url, rel=path[len(root) :].lstrip("/")))
    return shards


def _stage(fn, args, config: DedupeConfig, label: str) -> list:
    return run_tasks(fn, args, use_ray=config.use_ray, max_workers=config.max_workers, label=f"dedupe/{label}")


def _reduce(kind: str, *args) -> None:
    """One entry point for the parallel reduce stage, so exact partitions and band groups share a pool."""
    (reduce_exact if kind == "exact" else reduce_bands)(*args)


def _prepare_work(config: DedupeConfig, work: str) -> None:
    fingerprint = json.dumps(
        dataclasses.asdict(dataclasses.replace(config, max_workers=None, use_ray=True, keep_work=False, batch_docs=1)),
        sort_keys=True,
        default=str,
    )
    marker = join(work, "config.json")
    if exists(marker) and read_text(marker) != fingerprint:
        logger.warning("dedupe: %s holds work for a different config; starting over", work)
        delete(work, recursive=True)
    if not exists(marker):
        write_atomic(marker, fingerprint)


def dedupe_documents(config: DedupeConfig) -> dict:
    """Deduplicate (and decontaminate) the documents under ``config.input_path``; returns the summary."""
    start = time.monotonic()
    timings: dict[str, float] = {}
    shards = list_shards(config.input_path)
    n = len(shards)
    work = join(config.output_path, "_work")
    _prepare_work(config, work)
    eval_ids: list[str] = []
    eval_summary = {}
    if config.decontaminate:
        from marin.dedupe.decontaminate import EvalNgrams, build_eval_ngrams

        url = join(work, "eval_ngrams.npz")
        if not exists(url):
            build_eval_ngrams(config.decontaminate).save(url)
        ngrams = EvalNgrams.load(url)
        eval_ids = ngrams.ids
        eval_summary = {
            "eval_items": len(ngrams.ids),
            "eval_items_too_short": ngrams.too_short,
            "eval_ngrams": int(len(ngrams.hashes)),
        }

    def timed(name, fn, args):
        t = time.monotonic()
        out = _stage(fn, args, config, name)
        timings[name] = round(time.monotonic() - t, 3)
        return out

    logger.info("dedupe: %d shards under %s", n, config.input_path)
    timed("map", map_shard, [(config, s, work) for s in shards])
    reduce_args = []
    if config.exact:
        reduce_args += [("exact", work, n, p) for p in range(config.exact.num_partitions)]
    if config.fuzzy:
        reduce_args += [("bands", work, n, g) for g in range(BAND_GROUPS)]
    timed("reduce", _reduce, reduce_args)
    cluster_stats = timed("cluster", cluster, [(config, work, n)])[0]
    paragraph_stats = []
    if config.paragraph:
        paragraph_stats = timed(
            "paragraphs", reduce_paragraphs, [(config, work, n, p) for p in range(config.paragraph.num_partitions)]
        )
    shard_counts = timed("write", write_shard, [(config, s, work, eval_ids) for s in shards])
    summary = _summarize(config, shards, work, shard_counts, cluster_stats, paragraph_stats, eval_summary)
    summary["seconds"] = {**timings, "total": round(time.monotonic() - start, 3)}
    write_atomic(join(config.output_path, SUMMARY), json.dumps(summary, indent=2))
    if not config.keep_work:
        delete(work, recursive=True)
    logger.info(
        "dedupe: %d -> %d documents (%s)",
        summary["documents_in"],
        summary["documents_out"],
        ", ".join(f"{k}={v}" for k, v in summary["removed"].items()),
    )
    return summary


def _summarize(config, shards, work, shard_counts, cluster_stats, paragraph_stats, eval_summary) -> dict:
    total: dict[str, int] = {}
    for counts in shard_counts:
        for k, v in counts.items():
            total[k] = total.get(k, 0) + v
    skipped = sum(json.loads(read_text(join(shard_dir(work, s.index), "meta.json")))["skipped"] for s in shards)
    summary = {
        "input_path": config.input_path,
        "shards": len(shards),
        "documents_in": total["documents_in"],
        "documents_out": total["documents_out"],
        "removed": {k[len("removed_") :]: v for k, v in total.items() if k.startswith("removed_")},
        "chars_in": total["chars_in"],
        "chars_out": total["chars_out"],
        "skipped_malformed": skipped,
        "methods": {
            k: v
            for k, v in dataclasses.asdict(config).items()
            if k in ("exact", "fuzzy", "paragraph", "decontaminate") and v is not None
        },
    }
    if config.fuzzy:
        summary["fuzzy"] = cluster_stats
    if config.paragraph:
        summary["paragraphs"] = {
            "checked": sum(p["paragraphs"] for p in paragraph_stats),
            "removed": total["paragraphs_removed"],
            "bloom_bits": sum(p["bloom_bits"] for p in paragraph_stats),
            "bloom_hashes": paragraph_stats[0]["bloom_hashes"] if paragraph_stats else 0,
        }
    if config.decontaminate:
        summary["decontaminate"] = eval_summary
    return summary
