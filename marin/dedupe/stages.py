"""The tasks of the dedupe step. Each reads and writes files under ``<output>/_work`` and is idempotent.

Documents are named by a global key ``shard_index << 32 | row``; "first" always means smallest key, i.e.
input order (files sorted by path, rows in file order). Every decision below is a function of keys and
hashes only, so the output does not depend on how many workers ran the tasks or in which order.

    map (per shard)         -> exact-<p>.npy, bands.npy, shingles, paragraphs-<p>.npy, contamination, ids
    exact (per partition)   -> exact-out/<p>.npy   (removed key, kept key)
    bands (per band group)  -> edges/<g>.npy       (candidate pairs sharing a band hash)
    cluster (one task)      -> decisions/<shard>.npz (reason, duplicate-of key, eval item) per document
    paragraphs (per part.)  -> paragraph-out/<p>.npy (key, paragraph index) of repeated paragraphs
    write (per shard)       -> documents/<rel>, attributes/<rel>.jsonl.gz

Each task writes its outputs atomically and, when it has several, its marker last, so a rerun after a
crash redoes only unfinished tasks.
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging

import numpy as np

from marin.dedupe.config import DedupeConfig
from marin.dedupe.hashing import (
    band_hashes,
    content_hash,
    hash64,
    minhash_params,
    minhash_signatures,
    shingle_hashes,
    word_hashes,
)
from marin.dedupe.text import normalize_exact, normalize_paragraph, split_paragraphs
from marin.storage import exists, join, read_bytes, read_text, write_atomic
from marin.storage.records import ReadStats, read_documents

logger = logging.getLogger(__name__)

KEEP, CONTAMINATED, EXACT, FUZZY, PARAGRAPH = 0, 1, 2, 3, 4
REASONS = {CONTAMINATED: "contaminated", EXACT: "exact", FUZZY: "fuzzy", PARAGRAPH: "paragraph"}
PARA_DTYPE = np.dtype([("hash", "<u8"), ("key", "<i8"), ("para", "<u4")])
BAND_GROUPS = 8


@dataclasses.dataclass(frozen=True)
class Shard:
    index: int
    url: str
    rel: str
    """Path relative to the input root; outputs mirror it."""


def key_of(shard: int, rows: np.ndarray) -> np.ndarray:
    return (np.int64(shard) << np.int64(32)) | rows.astype(np.int64)


def save_npy(url: str, array: np.ndarray) -> None:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    write_atomic(url, buf.getvalue())


def load_npy(url: str) -> np.ndarray:
    return np.load(io.BytesIO(read_bytes(url)), allow_pickle=False)


def shard_dir(work: str, shard: int) -> str:
    return join(work, "map", f"{shard:05d}")


def read_shard(config: DedupeConfig, shard: Shard) -> tuple[list[dict], ReadStats]:
    stats = ReadStats()
    return list(read_documents(shard.url, on_error=config.on_error, stats=stats)), stats


# ----------------------------------------------------------------------------------------------- map


def map_shard(config: DedupeConfig, shard: Shard, work: str) -> None:
    """Hash everything a later stage needs from one shard; ``meta.json`` (written last) marks it done."""
    out = shard_dir(work, shard.index)
    if exists(join(out, "meta.json")):
        return
    docs, stats = read_shard(config, shard)
    texts = [d["text"] for d in docs]
    rows = np.arange(len(docs), dtype=np.int64)
    keys = key_of(shard.index, rows)
    if config.exact:
        hashes = np.array([content_hash(normalize_exact(t)) for t in texts], dtype=np.uint64).reshape(-1, 2)
        table = np.column_stack((hashes, keys.astype(np.uint64)))
        part = hashes[:, 0] % np.uint64(config.exact.num_partitions)
        for p in range(config.exact.num_partitions):
            save_npy(join(out, f"exact-{p:03d}.npy"), table[part == p])
    if config.fuzzy:
        _map_minhash(config, texts, out)
    if config.decontaminate:
        from marin.dedupe.decontaminate import EvalNgrams

        ngrams = EvalNgrams.load(join(work, "eval_ngrams.npz"))
        counts, first = np.zeros(len(texts), np.int64), np.full(len(texts), -1, np.int32)
        for lo in range(0, len(texts), config.batch_docs):
            c, f = ngrams.match(texts[lo : lo + config.batch_docs], config.decontaminate.ngram)
            counts[lo : lo + len(c)], first[lo : lo + len(f)] = c, f
        first[counts < config.decontaminate.min_matches] = -1
        save_npy(join(out, "contamination.npy"), np.column_stack((counts, first.astype(np.int64))))
    if config.paragraph:
        _map_paragraphs(config, shard.index, texts, out)
    write_atomic(join(out, "ids.json"), json.dumps([d.get("id") for d in docs]))
    meta = {
        "rel": shard.rel,
        "docs": len(docs),
        "chars": sum(map(len, texts)),
        "skipped": stats.skipped,
        "first_errors": stats.first_errors,
    }
    write_atomic(join(out, "meta.json"), json.dumps(meta))


def _map_minhash(config: DedupeConfig, texts: list[str], out: str) -> None:
    fz = config.fuzzy
    a, b = minhash_params(fz.num_perm, fz.seed)
    bands, has_shingles, kept, kept_offsets = [], [], [], [0]
    for lo in range(0, len(texts), config.batch_docs):
        words, offsets = word_hashes(texts[lo : lo + config.batch_docs])
        shingles, soff = shingle_hashes(words, offsets, fz.shingle_size, fz.seed)
        sig = minhash_signatures(shingles, soff, a, b)
        bands.append(band_hashes(sig, fz.bands, fz.rows, fz.seed))
        has_shingles.append(np.diff(soff) > 0)
        if fz.verify:
            uniq, counts = _unique_per_doc((shingles >> np.uint64(32)).astype(np.uint32), soff)
            kept.append(uniq)
            kept_offsets.extend((kept_offsets[-1] + np.cumsum(counts)).tolist())
    empty_bands = np.zeros((fz.bands, 0), np.uint64)
    save_npy(join(out, "bands.npy"), np.concatenate(bands, axis=1) if bands else empty_bands)
    save_npy(join(out, "has_shingles.npy"), np.concatenate(has_shingles) if has_shingles else np.zeros(0, bool))
    if fz.verify:
        save_npy(join(out, "shingles.npy"), np.concatenate(kept) if kept else np.zeros(0, np.uint32))
        save_npy(join(out, "shingle_offsets.npy"), np.array(kept_offsets, dtype=np.int64))


def _unique_per_doc(values: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique values within each document's segment, and how many each document kept."""
    doc = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
    order = np.lexsort((values, doc))
    v, d = values[order], doc[order]
    first = np.ones(len(v), dtype=bool)
    first[1:] = (v[1:] != v[:-1]) | (d[1:] != d[:-1])
    return v[first], np.bincount(d[first], minlength=len(offsets) - 1)


def _map_paragraphs(config: DedupeConfig, shard: int, texts: list[str], out: str) -> None:
    pc = config.paragraph
    hashes, keys, paras, counts = [], [], [], np.zeros(len(texts), np.int64)
    for row, text in enumerate(texts):
        spans = split_paragraphs(text, pc.separator)
        counts[row] = len(spans)
        for i, (s, e) in enumerate(spans):
            if len(text[s:e].strip()) >= pc.min_chars:
                hashes.append(hash64(normalize_paragraph(text[s:e])))
                keys.append((shard << 32) | row)
                paras.append(i)
    table = np.zeros(len(hashes), dtype=PARA_DTYPE)
    table["hash"], table["key"], table["para"] = hashes, keys, paras
    part = table["hash"] % np.uint64(pc.num_partitions)
    for p in range(pc.num_partitions):
        save_npy(join(out, f"paragraphs-{p:03d}.npy"), table[part == p])
    save_npy(join(out, "paragraph_counts.npy"), counts)


# ------------------------------------------------------------------------------------ document-level


def reduce_exact(work: str, num_shards: int, partition: int) -> None:
    """Within one hash partition: every document whose hash was seen at a smaller key is removed."""
    out = join(work, "exact-out", f"{partition:03d}.npy")
    if exists(out):
        return
    parts = [load_npy(join(shard_dir(work, s), f"exact-{partition:03d}.npy")) for s in range(num_shards)]
    table = np.concatenate(parts) if parts else np.zeros((0, 3), np.uint64)
    order = np.lexsort((table[:, 2], table[:, 1], table[:, 0]))
    table = table[order]
    same = np.zeros(len(table), dtype=bool)
    same[1:] = (table[1:, 0] == table[:-1, 0]) & (table[1:, 1] == table[:-1, 1])
    group_start = np.maximum.accumulate(np.where(~same, np.arange(len(table)), 0)) if len(table) else same
    removed = np.column_stack((table[same, 2], table[group_start[same], 2])).astype(np.int64)
    save_npy(out, removed.reshape(-1, 2))


def reduce_bands(work: str, num_shards: int, group: int) -> None:
    """Candidate pairs from the bands ``group, group + BAND_GROUPS, ...``: every document sharing a band
    hash with others is paired with the smallest key among them (a star per bucket suffices for
    connected components)."""
    out = join(work, "edges", f"{group:03d}.npy")
    if exists(out):
        return
    per_shard = [
        (load_npy(join(shard_dir(work, s), "bands.npy")), load_npy(join(shard_dir(work, s), "has_shingles.npy")))
        for s in range(num_shards)
    ]
    keys = np.concatenate(
        [key_of(s, np.flatnonzero(m)) for s, (_, m) in enumerate(per_shard)] or [np.zeros(0, np.int64)]
    )
    num_bands = per_shard[0][0].shape[0] if per_shard else 0
    edges = []
    for band in range(group, num_bands, BAND_GROUPS):
        values = np.concatenate([b[band][m] for b, m in per_shard])
        order = np.lexsort((keys, values))
        v, k = values[order], keys[order]
        same = np.zeros(len(v), dtype=bool)
        same[1:] = v[1:] == v[:-1]
        group_start = np.maximum.accumulate(np.where(~same, np.arange(len(v)), 0)) if len(v) else same
        edges.append(np.column_stack((k[group_start[same]], k[same])))
    found = np.unique(np.concatenate(edges), axis=0) if edges else np.zeros((0, 2), np.int64)
    save_npy(out, found.astype(np.int64).reshape(-1, 2))


def _load_shingles(work: str, shard: int, cache: dict) -> tuple[np.ndarray, np.ndarray]:
    if shard not in cache:
        d = shard_dir(work, shard)
        cache[shard] = (load_npy(join(d, "shingles.npy")), load_npy(join(d, "shingle_offsets.npy")))
    return cache[shard]


def exact_jaccard(work: str, edges: np.ndarray) -> np.ndarray:
    """Exact Jaccard of each candidate pair, from the per-document unique shingle sets."""
    cache: dict = {}
    out = np.empty(len(edges), dtype=np.float64)
    for i, (a, b) in enumerate(edges.tolist()):
        sets = []
        for key in (a, b):
            values, offsets = _load_shingles(work, key >> 32, cache)
            row = key & 0xFFFFFFFF
            sets.append(values[offsets[row] : offsets[row + 1]])
        inter = len(np.intersect1d(sets[0], sets[1], assume_unique=True))
        union = len(sets[0]) + len(sets[1]) - inter
        out[i] = inter / union if union else 1.0
    return out


def connected_min_labels(edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(nodes, smallest node of each node's connected component), by min-label propagation."""
    nodes = np.unique(edges)
    if len(nodes) == 0:
        return nodes, nodes
    ia, ib = np.searchsorted(nodes, edges[:, 0]), np.searchsorted(nodes, edges[:, 1])
    label = np.arange(len(nodes))
    while True:
        before = label.copy()
        low = np.minimum(label[ia], label[ib])
        np.minimum.at(label, ia, low)
        np.minimum.at(label, ib, low)
        label = label[label]  # pointer jumping: halves chain lengths
        if np.array_equal(label, before):
            return nodes, nodes[label]


def cluster(config: DedupeConfig, work: str, num_shards: int) -> dict:
    """Decide every document's fate (document level); returns counts for the summary."""
    stats = {"candidate_pairs": 0, "verified_pairs": 0}
    metas = [json.loads(read_text(join(shard_dir(work, s), "meta.json"))) for s in range(num_shards)]
    reason = [np.zeros(m["docs"], np.int8) for m in metas]
    dup_of = [np.full(m["docs"], -1, np.int64) for m in metas]
    eval_item = [np.full(m["docs"], -1, np.int64) for m in metas]
    if config.fuzzy:
        edges = np.concatenate([load_npy(join(work, "edges", f"{g:03d}.npy")) for g in range(BAND_GROUPS)])
        edges = np.unique(edges, axis=0) if len(edges) else edges.reshape(0, 2)
        stats["candidate_pairs"] = len(edges)
        if config.fuzzy.verify and len(edges):
            edges = edges[exact_jaccard(work, edges) >= config.fuzzy.threshold]
        stats["verified_pairs"] = len(edges)
        nodes, root = connected_min_labels(edges)
        for key, rep in zip(nodes[nodes != root].tolist(), root[nodes != root].tolist()):
            reason[key >> 32][key & 0xFFFFFFFF], dup_of[key >> 32][key & 0xFFFFFFFF] = FUZZY, rep
    if config.exact:
        for p in range(config.exact.num_partitions):
            for key, keeper in load_npy(join(work, "exact-out", f"{p:03d}.npy")).tolist():
                reason[key >> 32][key & 0xFFFFFFFF], dup_of[key >> 32][key & 0xFFFFFFFF] = EXACT, keeper
    if config.decontaminate:
        for s in range(num_shards):
            counts_first = load_npy(join(shard_dir(work, s), "contamination.npy"))
            hit = counts_first[:, 1] >= 0
            reason[s][hit], eval_item[s][hit] = CONTAMINATED, counts_first[hit, 1]
    for s in range(num_shards):
        buf = io.BytesIO()
        np.savez(buf, reason=reason[s], dup_of=dup_of[s], eval_item=eval_item[s])
        write_atomic(join(work, "decisions", f"{s:05d}.npz"), buf.getvalue())
    return stats


def load_decisions(work: str, shard: int) -> dict[str, np.ndarray]:
    with np.load(io.BytesIO(read_bytes(join(work, "decisions", f"{shard:05d}.npz")))) as z:
        return {k: z[k] for k in z.files}
