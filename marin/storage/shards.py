"""Input shards of a per-file data step, and the work directory that makes it resumable.

Steps that map each input file to output files of the same relative name (extract, classify, filter)
share this plumbing::

    shards = list_shards(config.input_path, suffixes=RECORD_SUFFIXES, field="ClassifyConfig.input_path")
    # Shard(index=0, url=".../documents/stories/shard-00000.jsonl.gz", rel="stories/shard-00000.jsonl.gz")
    out = join(config.output_path, "attributes", with_suffix(shard.rel, ".jsonl.gz"))

A shard task writes its outputs atomically, then a small marker under ``<output>/_work/``; a rerun skips
every shard whose marker exists, so a step killed half-way resumes with the shards it had not finished.
``prepare_work`` records the config the markers were made with and clears them when it changes.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re

from marin.storage.paths import delete, exists, filesystem, join, read_text, write_atomic
from marin.storage.urls import like_url

logger = logging.getLogger(__name__)
_KNOWN_SUFFIX = re.compile(r"\.(jsonl|json|warc|html|htm)(\.gz|\.zst)?$|\.parquet$", re.IGNORECASE)


@dataclasses.dataclass(frozen=True)
class Shard:
    index: int
    """Position in the sorted list of input files."""
    url: str
    rel: str
    """Path relative to the input root; outputs keep it, so the output tree mirrors the input tree."""


def with_suffix(rel: str, suffix: str) -> str:
    """``rel`` with its data suffix (.jsonl.gz, .warc.gz, .parquet, .html, ...) replaced by ``suffix``."""
    return _KNOWN_SUFFIX.sub("", rel) + suffix


def list_shards(input_path: str, *, suffixes: tuple[str, ...], field: str) -> list[Shard]:
    """Every file under ``input_path`` (a file, a directory searched recursively, or a glob) whose name ends
    in one of ``suffixes``, sorted; names starting with ``.`` or ``_`` (metadata, work dirs) are skipped."""
    fs, path = filesystem(input_path)
    base = path.rstrip("/")
    if any(ch in path for ch in "*?["):
        found = fs.glob(path)
        base = path[: min(path.find(ch) for ch in "*?[" if ch in path)].rpartition("/")[0]
    elif fs.isdir(path):
        found = fs.find(path)
    elif fs.exists(path):
        found, base = [path], path.rpartition("/")[0]
    else:
        raise FileNotFoundError(f"{field}: {input_path}: no such file or directory")
    shards = []
    for p in sorted(found):
        rel = p[len(base) :].lstrip("/")
        if p.lower().endswith(suffixes) and not any(part.startswith((".", "_")) for part in rel.split("/")):
            shards.append(Shard(index=len(shards), url=like_url(input_path, p), rel=rel))
    if not shards:
        raise FileNotFoundError(f"{field}: no input files ({', '.join(suffixes)}) under {input_path}")
    return shards


def fingerprint_of(config) -> str:
    """A digest of a config dataclass without its output path and its runtime fields (those declared with
    ``marin.identity.runtime_field``: worker counts, batch sizes), which never change outputs."""
    import hashlib

    plain = {
        f.name: getattr(config, f.name)
        for f in dataclasses.fields(config)
        if f.name != "output_path" and not f.metadata.get("marin.runtime")
    }
    text = json.dumps(plain, sort_keys=True, default=_plain)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _plain(value):
    return dataclasses.asdict(value) if dataclasses.is_dataclass(value) else str(value)


def finished_summary(summary_url: str, fingerprint: str) -> dict | None:
    """The summary of a finished run of the same config (a rerun then does nothing), else None."""
    if not exists(summary_url):
        return None
    summary = json.loads(read_text(summary_url))
    return summary if summary.get("fingerprint") == fingerprint else None


def prepare_work(work: str, fingerprint: str) -> None:
    """Start ``work`` over when it holds markers made under another config (``fingerprint_of``)."""
    text = json.dumps({"fingerprint": fingerprint})
    marker = join(work, "config.json")
    if exists(marker) and read_text(marker) != text:
        logger.warning("%s holds work for a different config; starting over", work)
        delete(work, recursive=True)
    if not exists(marker):
        write_atomic(marker, text)


def done_marker(work: str, shard: Shard) -> str:
    return join(work, "done", f"{shard.index:06d}.json")


def read_done(work: str, shard: Shard) -> dict | None:
    """The counts a finished shard task recorded, or None when it has not finished."""
    url = done_marker(work, shard)
    return json.loads(read_text(url)) if exists(url) else None


def mark_done(work: str, shard: Shard, counts: dict) -> None:
    write_atomic(done_marker(work, shard), json.dumps({"rel": shard.rel, **counts}, sort_keys=True))
