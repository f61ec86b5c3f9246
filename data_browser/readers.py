"""Bounded, streaming reads for the browser: a page of records, a search, a text preview.

The browser must stay responsive on a 50 GB shard with a 2 GB line in it, so nothing here reads a whole
file: JSONL is read line by line with a cap on each line's bytes (longer lines are cut and flagged),
Parquet in row batches, and searches stop after ``max_scan`` records. A corrupt stream becomes a
``ReadFailure`` with a message for the page, never an HTTP 500.
"""

from __future__ import annotations

import dataclasses
import json
import zlib
from collections.abc import Iterator
from typing import Any

from marin.storage import filesystem
from marin.storage.records import JSONL_SUFFIXES, decompressed


class ReadFailure(Exception):
    """The file cannot be read as records (corrupt, truncated, wrong format)."""


@dataclasses.dataclass
class Record:
    index: int
    data: Any
    truncated: bool = False
    error: str | None = None


def is_record_file(path: str) -> bool:
    return path.endswith(JSONL_SUFFIXES + (".parquet",))


def _open_decompressed(path: str):
    fs, p = filesystem(path)
    return decompressed(fs.open(p, "rb"), path)


def iter_records(path: str, max_line_bytes: int) -> Iterator[Record]:
    """Every record of a file with its 0-based index; lines over ``max_line_bytes`` are cut."""
    try:
        if path.endswith(".parquet"):
            yield from _parquet_records(path)
        else:
            yield from _jsonl_records(path, max_line_bytes)
    except (OSError, EOFError, zlib.error, ValueError) as e:
        raise ReadFailure(f"{path}: cannot be read ({type(e).__name__}: {e})") from None
    except Exception as e:  # zstd and pyarrow raise their own error types
        raise ReadFailure(f"{path}: cannot be read ({type(e).__name__}: {e})") from None


def _jsonl_records(path: str, max_line_bytes: int) -> Iterator[Record]:
    with _open_decompressed(path) as f:
        index = 0
        while True:
            line = f.readline(max_line_bytes + 1)
            if not line:
                return
            truncated = len(line) > max_line_bytes and not line.endswith(b"\n")
            if truncated:
                while True:  # skip the rest of the long line without holding it
                    rest = f.readline(1 << 20)
                    if not rest or rest.endswith(b"\n"):
                        break
            if not line.strip():
                continue
            yield _parse(index, line[:max_line_bytes], truncated)
            index += 1


def _parse(index: int, line: bytes, truncated: bool) -> Record:
    text = line.decode("utf-8", errors="replace")
    if truncated:
        return Record(index, text, truncated=True, error="line longer than the view limit; shown cut")
    try:
        return Record(index, json.loads(text))
    except ValueError as e:
        return Record(index, text, error=f"not valid JSON: {e}")


def _parquet_records(path: str) -> Iterator[Record]:
    import pyarrow.parquet as pq

    fs, p = filesystem(path)
    with fs.open(p, "rb") as f:
        index = 0
        for batch in pq.ParquetFile(f).iter_batches(batch_size=512):
            for row in batch.to_pylist():
                yield Record(index, row)
                index += 1


def page(path: str, offset: int, limit: int, max_line_bytes: int) -> tuple[list[Record], bool]:
    """Records ``[offset, offset + limit)`` and whether more follow."""
    out: list[Record] = []
    for record in iter_records(path, max_line_bytes):
        if record.index < offset:
            continue
        if len(out) == limit:
            return out, True
        out.append(record)
    return out, False


def search(path: str, query: str, limit: int, max_scan: int, max_line_bytes: int) -> tuple[list[Record], int, bool]:
    """Records whose JSON text contains ``query`` (case-insensitive): (hits, scanned, stopped_early)."""
    needle = query.lower()
    hits: list[Record] = []
    scanned = 0
    for record in iter_records(path, max_line_bytes):
        scanned += 1
        text = record.data if isinstance(record.data, str) else json.dumps(record.data, ensure_ascii=False)
        if needle in text.lower():
            hits.append(record)
            if len(hits) >= limit:
                return hits, scanned, True
        if scanned >= max_scan:
            return hits, scanned, True
    return hits, scanned, False


def find_by_ids(path: str, ids: set[str], max_scan: int, max_line_bytes: int) -> tuple[dict[str, Record], bool]:
    """Records of ``path`` whose ``id`` is in ``ids``, and whether the scan was cut short by ``max_scan``
    (then a missing id may lie further on). Stops as soon as every id is found."""
    found: dict[str, Record] = {}
    for record in iter_records(path, max_line_bytes):
        if len(found) == len(ids):
            break
        if record.index >= max_scan:
            return found, True
        if isinstance(record.data, dict) and str(record.data.get("id")) in ids:
            found[str(record.data["id"])] = record
    return found, False


def first_record(path: str, max_line_bytes: int) -> Record | None:
    return next(iter(iter_records(path, max_line_bytes)), None)


def read_bounded(path: str, max_bytes: int) -> bytes:
    """The whole file, or ``ReadFailure`` if it is larger than ``max_bytes`` (never reads more)."""
    fs, p = filesystem(path)
    with fs.open(p, "rb") as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ReadFailure(f"{path}: larger than the browser's limit of {max_bytes:,} bytes (max_json_bytes)")
    return data


def sample_lines(path: str, max_bytes: int, windows: int = 64) -> tuple[list[bytes], int]:
    """Complete lines of ``path`` and its size in bytes, reading at most about ``max_bytes``.

    A file up to ``max_bytes`` is read whole. A larger one is read in ``windows`` evenly spaced slices
    (the first at the start, the last at the end), keeping only lines wholly inside a slice: a training
    log of any length still shows its whole curve, at lower resolution.
    """
    fs, p = filesystem(path)
    size = fs.size(p)
    with fs.open(p, "rb") as f:
        if size <= max_bytes:
            return f.read().splitlines(), size
        width = max(max_bytes // windows, 1)
        lines: list[bytes] = []
        for i in range(windows):
            start = i * (size - width) // (windows - 1)
            f.seek(start)
            chunk = f.read(width)
            parts = chunk.split(b"\n")
            if start > 0:
                parts = parts[1:]  # begins mid-line (or exactly at a line start: then the slice is safe to drop)
            if start + len(chunk) < size:
                parts = parts[:-1]  # ends mid-line
            lines.extend(parts)
        return lines, size


def preview_text(path: str, max_bytes: int) -> tuple[str, bool]:
    """The first ``max_bytes`` of a file as text, and whether it was cut."""
    fs, p = filesystem(path)
    with fs.open(p, "rb") as f:
        data = f.read(max_bytes + 1)
    return data[:max_bytes].decode("utf-8", errors="replace"), len(data) > max_bytes
