"""Which record files a tokenizer or token cache reads, and the texts inside them, in a stable order."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from marin.storage.records import OnError, ReadStats, find_record_files, read_records


def expand_record_paths(paths: Sequence[str] | str) -> list[str]:
    """Files, directories and globs to a sorted, duplicate-free list of record files."""
    if isinstance(paths, str):
        paths = [paths]
    files: list[str] = []
    for path in paths:
        files.extend(find_record_files(path))
    if not files:
        raise FileNotFoundError(f"no record files (.jsonl[.gz|.zst], .parquet; .json when named) under {list(paths)}")
    return sorted(set(files))


def iter_texts(
    files: Sequence[str],
    text_key: str = "text",
    *,
    limit: int | None = None,
    on_error: OnError = "raise",
    stats: ReadStats | None = None,
) -> Iterator[str]:
    """The ``text_key`` field of every record, file by file; errors name the file and line."""
    count = 0
    for url in files:
        for record in read_records(
            url, required=(text_key,), on_error=on_error, stats=stats, validate=lambda r: _string_field(r, text_key)
        ):
            if limit is not None and count >= limit:
                return
            count += 1
            yield record[text_key]


def _string_field(record: dict, key: str) -> str | None:
    if not isinstance(record[key], str):
        return f"field {key!r} must be a string, got {type(record[key]).__name__}"
    return None
