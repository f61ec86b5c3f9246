"""The last two stages of the dedupe step: paragraph dedupe over surviving documents, then writing.

Paragraph dedupe runs after the document-level decisions (``marin.dedupe.stages.cluster``) so that only
surviving documents take part: a paragraph is removed only when an earlier copy of it stays in the
output. Each hash partition keeps its own Bloom filter and walks its paragraphs in key order.

The writer mirrors the input: ``documents/<rel>`` has the kept documents, in the input's format and
order, with any repeated paragraphs cut out; ``attributes/<rel>.jsonl.gz`` has one row per input
document, kept or not::

    {"id": "stories-0000042", "kept": false, "reason": "fuzzy", "duplicate_of": "stories-0000007"}
    {"id": "stories-0000043", "kept": true, "removed_paragraphs": [7], "paragraphs": 8}
    {"id": "stories-0000044", "kept": false, "reason": "contaminated", "eval_item": "opposites-0012",
     "eval_ngrams": 9}
"""

from __future__ import annotations

import json
import re

import numpy as np

from marin.dedupe.bloom import BloomFilter
from marin.dedupe.config import DedupeConfig
from marin.dedupe.stages import (
    EXACT,
    FUZZY,
    KEEP,
    PARAGRAPH,
    REASONS,
    Shard,
    load_decisions,
    load_npy,
    read_shard,
    save_npy,
    shard_dir,
)
from marin.dedupe.text import remove_spans, split_paragraphs
from marin.storage import exists, join, read_text, write_atomic
from marin.storage.records import RecordWriter

ATTRIBUTES_DIR = "attributes"
DOCUMENTS_DIR = "documents"


def reduce_paragraphs(config: DedupeConfig, work: str, num_shards: int, partition: int) -> dict:
    """Mark repeated paragraphs of one hash partition; returns {"paragraphs", "removed", "bloom_bits"}."""
    out = join(work, "paragraph-out", f"{partition:03d}.npy")
    stats_url = join(work, "paragraph-out", f"{partition:03d}.json")
    if exists(stats_url):
        return json.loads(read_text(stats_url))
    pc = config.paragraph
    tables = []
    for s in range(num_shards):
        table = load_npy(join(shard_dir(work, s), f"paragraphs-{partition:03d}.npy"))
        alive = load_decisions(work, s)["reason"] == KEEP
        tables.append(table[alive[table["key"] & 0xFFFFFFFF]])
    table = np.concatenate(tables) if tables else np.zeros(0, np.dtype([("hash", "<u8")]))
    expected = max(1, -(-pc.expected_items // pc.num_partitions) if pc.expected_items else len(table))
    bloom = BloomFilter(expected, pc.false_positive_rate)
    seen = np.zeros(len(table), dtype=bool)
    for lo in range(0, len(table), pc.batch_size):
        seen[lo : lo + pc.batch_size] = bloom.add_new(table["hash"][lo : lo + pc.batch_size])
    removed = table[seen]
    save_npy(out, np.column_stack((removed["key"], removed["para"].astype(np.int64))).reshape(-1, 2))
    stats = {
        "paragraphs": int(len(table)),
        "removed": int(seen.sum()),
        "bloom_bits": bloom.num_bits,
        "bloom_hashes": bloom.num_hashes,
    }
    write_atomic(stats_url, json.dumps(stats))
    return stats


def attributes_rel(rel: str) -> str:
    stem = re.sub(r"\.(jsonl|json)(\.gz|\.zst)?$|\.parquet$", "", rel)
    return f"{stem}.jsonl.gz"


def write_shard(config: DedupeConfig, shard: Shard, work: str, eval_ids: list[str]) -> dict:
    """Write one shard's kept documents and its attributes; returns this shard's counts."""
    marker = join(work, "written", f"{shard.index:05d}.json")
    if exists(marker):
        return json.loads(read_text(marker))
    docs, _ = read_shard(config, shard)
    decisions = load_decisions(work, shard.index)
    ngram_counts = None
    if config.decontaminate:
        ngram_counts = load_npy(join(shard_dir(work, shard.index), "contamination.npy"))[:, 0]
    cut = _paragraph_cuts(config, work, shard.index) if config.paragraph else {}
    ids = _IdLookup(work)
    counts = {
        "documents_in": len(docs),
        "documents_out": 0,
        "chars_in": 0,
        "chars_out": 0,
        "paragraphs_removed": 0,
        **{f"removed_{name}": 0 for name in REASONS.values()},
    }
    with (
        RecordWriter(join(config.output_path, DOCUMENTS_DIR, shard.rel)) as docs_out,
        RecordWriter(join(config.output_path, ATTRIBUTES_DIR, attributes_rel(shard.rel))) as attrs_out,
    ):
        for row, doc in enumerate(docs):
            text = doc["text"]
            counts["chars_in"] += len(text)
            reason = int(decisions["reason"][row])
            attrs: dict = {"id": doc.get("id")}
            if reason == KEEP and row in cut:
                spans = split_paragraphs(text, config.paragraph.separator)
                drop = sorted(cut[row])
                attrs["removed_paragraphs"], attrs["paragraphs"] = drop, len(spans)
                counts["paragraphs_removed"] += len(drop)
                text = remove_spans(text, [spans[i] for i in drop], config.paragraph.separator)
                if len(drop) == len(spans):
                    reason = PARAGRAPH
            attrs["kept"] = reason == KEEP
            if reason != KEEP:
                attrs["reason"] = REASONS[reason]
                counts[f"removed_{REASONS[reason]}"] += 1
                if decisions["dup_of"][row] >= 0 and reason in (EXACT, FUZZY):
                    attrs["duplicate_of"] = ids.lookup(int(decisions["dup_of"][row]))
                if decisions["eval_item"][row] >= 0:
                    attrs["eval_item"] = eval_ids[int(decisions["eval_item"][row])]
                    attrs["eval_ngrams"] = int(ngram_counts[row])
            else:
                counts["documents_out"] += 1
                counts["chars_out"] += len(text)
                docs_out.write(doc if text is doc["text"] else {**doc, "text": text})
            attrs_out.write(attrs)
    write_atomic(marker, json.dumps(counts))
    return counts


def _paragraph_cuts(config: DedupeConfig, work: str, shard: int) -> dict[int, list[int]]:
    cut: dict[int, list[int]] = {}
    for p in range(config.paragraph.num_partitions):
        removed = load_npy(join(work, "paragraph-out", f"{p:03d}.npy"))
        mine = removed[(removed[:, 0] >> 32) == shard]
        for key, para in mine.tolist():
            cut.setdefault(key & 0xFFFFFFFF, []).append(para)
    return cut


class _IdLookup:
    """Document ids by global key, loading a shard's id list the first time it is needed."""

    def __init__(self, work: str):
        self.work = work
        self.cache: dict[int, list] = {}

    def lookup(self, key: int):
        shard, row = key >> 32, key & 0xFFFFFFFF
        if shard not in self.cache:
            self.cache[shard] = json.loads(read_text(join(shard_dir(self.work, shard), "ids.json")))
        return self.cache[shard][row]
