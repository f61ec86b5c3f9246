"""The chat data step: conversation files of any common shape in, one normalized schema out.

    normalize_chat(ChatDataConfig(input_paths=["raw/alpaca-1a2b/data"], output_path="chat/alpaca-3c4d",
                                  validation_fraction=0.01))
    # chat/alpaca-3c4d/train/00000.jsonl.gz        {"id": "00000-17", "messages": [{"role", "content"}, ...]}
    # chat/alpaca-3c4d/validation/00000.jsonl.gz   held-out conversations (by a hash of their content)
    # chat/alpaca-3c4d/summary.json                conversations, skips by reason, per split

Input is JSONL (plain, .gz, .zst) or Parquet over any fsspec URL, e.g. the output of a download step
pinned to a hub revision. Output file ``k`` comes from input file ``k`` (sorted), so the result never
depends on the number of workers. A malformed row stops the step with ``<file>:<line>: <field>: <what was
expected>``; with ``on_error="skip"`` it is counted by reason in ``summary.json`` instead.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import hashlib
import json
import logging
from collections.abc import Callable, Sequence

from marin.chat.schema import MalformedConversation, normalize_record
from marin.parallel import run_tasks
from marin.storage import join, write_atomic
from marin.storage.records import OnError, ReadStats, RecordWriter, read_parsed
from marin.tokenize.inputs import expand_record_paths
from marin.validation import check

logger = logging.getLogger(__name__)
SPLITS = ("train", "validation")


@dataclasses.dataclass(frozen=True, kw_only=True)
class SplitDataConfig:
    """What ``split_files`` reads: record files of any shape its parser takes, split into ``train/`` and
    ``validation/`` under ``output_path``."""

    input_paths: Sequence[str]
    """Record files, directories or globs."""
    output_path: str
    validation_paths: Sequence[str] = ()
    """Files of an explicit held-out split (everything in them goes to ``validation/``)."""
    validation_fraction: float = 0.0
    """Share of ``input_paths``' records held out, chosen by a hash of their content (stable)."""
    on_error: OnError = "raise"
    """'raise': a malformed row stops the step naming file, line and field; 'skip': count it and go on."""
    num_workers: int = 1
    """Files normalized at once (Ray tasks when > 1); the output does not depend on it."""

    def __post_init__(self):
        name = type(self).__name__
        check(name, "input_paths", self.input_paths, lambda v: len(v) > 0, "at least one path")
        check(name, "validation_fraction", self.validation_fraction, lambda v: 0 <= v < 1, "in [0, 1)")
        check(name, "on_error", self.on_error, lambda v: v in ("raise", "skip"), "'raise' or 'skip'")
        check(name, "num_workers", self.num_workers, lambda v: v >= 1, ">= 1")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ChatDataConfig(SplitDataConfig):
    """Conversations (messages, ShareGPT or Alpaca rows), held out by a hash of their messages."""


def is_held_out(messages: list[dict], fraction: float) -> bool:
    """Deterministic split: the conversation's content hash, read as a number in [0, 1), below ``fraction``."""
    if fraction <= 0:
        return False
    digest = hashlib.sha256(json.dumps(messages, sort_keys=True).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def split_file(
    index: int,
    source: str,
    output_path: str,
    split: str | None,
    fraction: float,
    on_error: OnError,
    *,
    parse: Callable[[dict], dict | list[dict]],
    errors: type[Exception],
    held_out_by: str,
    noun: str,
) -> dict:
    """Normalize one input file into ``<split>/<index>.jsonl.gz`` (both splits when ``split`` is None).

    ``parse`` turns a row into one record (id ``<index>-<row>``) or a list of them (ids ``<index>-<row>-<k>``);
    a record is held out by a hash of its ``held_out_by`` field. The chat and preference steps share this;
    ``noun`` names what they count (``conversations``, ``pairs``)."""
    stats, reasons, counts, rows = ReadStats(), collections.Counter(), collections.Counter(), 0
    splits = (split,) if split else SPLITS
    writers = {s: RecordWriter(join(output_path, s, f"{index:05d}.jsonl.gz")) for s in splits}
    try:
        parsed = read_parsed(source, parse, errors, on_error=on_error, stats=stats, reasons=reasons)
        for ordinal, records in enumerate(parsed):
            rows += 1
            single = isinstance(records, dict)
            for k, record in enumerate([records] if single else records):
                target = split or ("validation" if is_held_out(record[held_out_by], fraction) else "train")
                record_id = f"{index:05d}-{ordinal}" if single else f"{index:05d}-{ordinal}-{k}"
                writers[target].write({"id": record_id, **record})
                counts[target] += 1
    except BaseException:
        for writer in writers.values():
            writer.abort()
        raise
    for writer in writers.values():
        writer.close()
    return {"source": source, "rows": rows, noun: dict(counts), "skipped": stats.skipped, "skip_reasons": dict(reasons)}


def split_files(config: SplitDataConfig, *, noun: str, **how) -> dict:
    """``split_file`` over ``config``'s input and validation files (``how``: its ``parse``, ``errors`` and
    ``held_out_by``), then write and return ``summary.json``: ``noun`` per split, rows read, rows skipped by
    reason, and each file's counts."""
    fn = functools.partial(split_file, noun=noun, **how)
    jobs = [(f, None) for f in expand_record_paths(list(config.input_paths))]
    if config.validation_paths:
        jobs += [(f, "validation") for f in expand_record_paths(list(config.validation_paths))]
    args = [
        (i, f, config.output_path, split, config.validation_fraction, config.on_error)
        for i, (f, split) in enumerate(jobs)
    ]
    files = run_tasks(fn, args, use_ray=config.num_workers > 1, max_workers=config.num_workers, label=noun)
    reasons = collections.Counter()
    for f in files:
        reasons.update(f["skip_reasons"])
    summary = {
        noun: {s: sum(f[noun].get(s, 0) for f in files) for s in SPLITS},
        "rows": sum(f["rows"] for f in files),
        "skipped": sum(f["skipped"] for f in files),
        "skip_reasons": dict(sorted(reasons.items())),
        "files": files,
    }
    write_atomic(join(config.output_path, "summary.json"), json.dumps(summary, indent=2))
    logger.info(
        "normalized %s %s (%d rows skipped) into %s", summary[noun], noun, summary["skipped"], config.output_path
    )
    return summary


def _conversation(record: dict) -> dict:
    return {"messages": normalize_record(record)}


def normalize_chat(config: ChatDataConfig) -> None:
    split_files(config, noun="conversations", parse=_conversation, errors=MalformedConversation, held_out_by="messages")
