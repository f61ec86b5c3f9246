"""Plain-text files -> documents, split into train and validation: the step between a download of real text
and the tokenizer.

    split_text_documents(TextDocumentsConfig(input_path="local_store/raw/gutenberg-1a2b",
        output_path="local_store/documents/gutenberg-3c4d", transform="gutenberg", split="hash"))

writes ``train/documents.jsonl.gz`` and ``validation/documents.jsonl.gz`` (records ``{"id", "text",
"source"}``), then ``summary.json`` (counts per split, the transform and the licence from the download's
``provenance.json``). Each file is one document, read as strict UTF-8 (``.txt``, or ``.txt.xz`` as the
bundled slices ship; the document is named by its path without ``.xz``).

Splits, both deterministic and never reshuffled by adding files:

- ``"prefix"``: every document's first ``1 - validation_fraction`` of characters train, the rest validation
  (nanoGPT's ``prepare.py`` on TinyShakespeare: ``data[:int(n * 0.9)]`` / ``data[int(n * 0.9):]``);
- ``"hash"``: a whole document goes to validation when the SHA-256 of its name, read as a fraction of
  2^64, falls below ``validation_fraction``: never split mid-document, and a book lands in the same
  split whether it came from the bundled slice or the full download.

Transforms (``TRANSFORMS``; the name is part of the step's identity, so a changed rule gets a new name):

- ``"none"``: the text as it is;
- ``"gutenberg-v1"``: Project Gutenberg's licence header and footer removed: line endings made ``\\n``,
  the lines strictly between ``*** START OF THE/THIS PROJECT GUTENBERG EBOOK ...`` and ``*** END OF ...``
  kept, then leading transcriber credits (paragraphs opening with "Produced by", "E-text prepared by",
  "Transcribed from", ...), a closing "End of the Project Gutenberg EBook of ..." paragraph and surrounding
  blank lines dropped. A file without both markers is an error.

Bad input is an error naming the file: an empty file, a truncated or corrupt ``.xz`` stream, bytes that are
not UTF-8 (with their offset), a text whose SHA-256 differs from its pin, a document left empty by the
transform, and a split that leaves train or validation without text.
"""

from __future__ import annotations

import dataclasses
import datetime
import fnmatch
import hashlib
import json
import logging
import lzma
import re
from collections.abc import Iterator, Mapping

from marin.storage import exists, filesystem, join, read_bytes, read_text, write_atomic
from marin.storage.records import RecordWriter
from marin.validation import check

logger = logging.getLogger(__name__)

SPLITS = ("prefix", "hash")
TRANSFORMS = ("none", "gutenberg-v1")
DOCUMENTS_FILE = "documents.jsonl.gz"

_START = re.compile(r"^\*\*\* ?START OF (THE|THIS) PROJECT GUTENBERG E(BOOK|TEXT)\b.*$", re.IGNORECASE | re.MULTILINE)
_END = re.compile(r"^\*\*\* ?END OF (THE|THIS) PROJECT GUTENBERG E(BOOK|TEXT)\b.*$", re.IGNORECASE | re.MULTILINE)
_CREDIT = re.compile(
    r"^(produced by|e-?text prepared by|this e-?text was (produced|prepared)|transcribed from|"
    r"etext (scanned|prepared) by|scanned and proofed by)",
    re.IGNORECASE,
)
_TRAILER = re.compile(r"^end of (the |this )?project gutenberg", re.IGNORECASE)


class TextInputError(ValueError):
    """A text file that cannot become a document (empty, corrupt, not UTF-8, wrong checksum, no markers)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class TextDocumentsConfig:
    input_path: str
    """A directory of text files (a download step's output)."""
    output_path: str
    patterns: tuple[str, ...] = ("*.txt", "*.txt.xz")
    """fnmatch globs over relative paths: the files that are documents."""
    transform: str = "none"
    """One of ``TRANSFORMS`` (module docstring)."""
    split: str = "hash"
    """"prefix" (the last fraction of every document's characters) or "hash" (whole documents)."""
    validation_fraction: float = 0.1
    text_sha256: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Document name -> SHA-256 its text (decompressed, before the transform) must have."""

    def __post_init__(self):
        name = "TextDocumentsConfig"
        check(name, "transform", self.transform, lambda v: v in TRANSFORMS, f"one of {list(TRANSFORMS)}")
        check(name, "split", self.split, lambda v: v in SPLITS, f"one of {list(SPLITS)}")
        check(name, "validation_fraction", self.validation_fraction, lambda v: 0 < v < 1, "in (0, 1)")
        check(name, "patterns", self.patterns, lambda v: len(v) > 0, "at least one glob")


def split_text_documents(config: TextDocumentsConfig) -> dict:
    """Step: every matching file of ``config.input_path`` as a document, split; returns the summary."""
    files = _text_files(config)
    counts = {split: {"documents": 0, "characters": 0, "bytes": 0} for split in ("train", "validation")}
    removed = 0
    writers = {split: RecordWriter(join(config.output_path, split, DOCUMENTS_FILE)) for split in counts}
    try:
        for rel in files:
            name = rel.removesuffix(".xz")
            raw = _read_text(join(config.input_path, rel), config.text_sha256.get(name))
            text = transform_text(raw, config.transform, where=join(config.input_path, rel))
            removed += len(raw) - len(text)
            for split, doc_id, part in _split(name, text, config):
                writers[split].write({"id": doc_id, "text": part, "source": name})
                counts[split]["documents"] += 1
                counts[split]["characters"] += len(part)
                counts[split]["bytes"] += len(part.encode("utf-8"))
        _check_split(config, counts, len(files))
    except BaseException:
        for writer in writers.values():
            writer.abort()
        raise
    for writer in writers.values():
        writer.close()
    summary = {
        "input_path": config.input_path,
        "files": len(files),
        "transform": config.transform,
        "split": config.split,
        "validation_fraction": config.validation_fraction,
        "characters_removed_by_transform": removed,
        **counts,
        "license": _license_of(config.input_path),
        "finished_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    write_atomic(join(config.output_path, "summary.json"), json.dumps(summary, indent=2))
    logger.info("documents: %s", {k: v for k, v in counts.items()})
    return summary


def _text_files(config: TextDocumentsConfig) -> list[str]:
    fs, root = filesystem(config.input_path)
    if not fs.isdir(root):
        raise FileNotFoundError(f"TextDocumentsConfig.input_path: no directory at {config.input_path}")
    base = root.rstrip("/")
    rels = sorted(p[len(base) :].lstrip("/") for p in fs.find(root))
    files = [r for r in rels if not r.startswith(".") and any(fnmatch.fnmatchcase(r, p) for p in config.patterns)]
    if not files:
        raise FileNotFoundError(
            f"TextDocumentsConfig: no files matching {list(config.patterns)} under {config.input_path}"
        )
    return files


def _read_text(url: str, want_sha256: str | None) -> str:
    """The file's text: decompressed (``.xz``), checked against its pin, decoded as strict UTF-8."""
    data = read_bytes(url)
    if not data:
        raise TextInputError(f"{url}: the file is empty (0 bytes); expected a text")
    if url.endswith(".xz"):
        try:
            data = lzma.decompress(data)
        except (lzma.LZMAError, EOFError) as e:
            raise TextInputError(f"{url}: truncated or corrupt xz stream ({e})") from e
    if want_sha256 is not None and hashlib.sha256(data).hexdigest() != want_sha256:
        raise TextInputError(
            f"{url}: text SHA-256 is {hashlib.sha256(data).hexdigest()}, expected {want_sha256} "
            f"({len(data)} bytes; a truncated or altered file)"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise TextInputError(
            f"{url}: bytes {data[e.start : e.end]!r} at offset {e.start} are not UTF-8 ({e.reason}); "
            "expected UTF-8 text"
        ) from e
    return text.removeprefix("\ufeff")


def transform_text(text: str, transform: str, *, where: str = "text") -> str:
    """``text`` under ``transform`` (one of ``TRANSFORMS``); ``where`` names the file in errors."""
    if transform == "none":
        return text
    return strip_gutenberg(text, where=where)


def strip_gutenberg(text: str, *, where: str = "text") -> str:
    """The book inside Project Gutenberg's header and footer (the ``gutenberg-v1`` transform)."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    start, end = _START.search(text), _END.search(text)
    if start is None or end is None or end.start() < start.end():
        raise TextInputError(
            f"{where}: expected Project Gutenberg's '*** START OF THE PROJECT GUTENBERG EBOOK ...' line and, after "
            "it, an '*** END OF ...' line (transform gutenberg-v1); use transform='none' for other texts"
        )
    body = text[start.end() : end.start()].strip("\n")
    paragraphs = body.split("\n\n")
    while paragraphs and (not paragraphs[0].strip() or _CREDIT.match(paragraphs[0].strip())):
        paragraphs.pop(0)
    while paragraphs and (not paragraphs[-1].strip() or _TRAILER.match(paragraphs[-1].strip())):
        paragraphs.pop()
    book = "\n\n".join(paragraphs).strip()
    if not book:
        raise TextInputError(f"{where}: no text left between the Gutenberg START and END lines")
    return book


def _split(name: str, text: str, config: TextDocumentsConfig) -> Iterator[tuple[str, str, str]]:
    """(split, id, text) of the document's parts."""
    if config.split == "hash":
        yield ("validation" if hash_fraction(name) < config.validation_fraction else "train"), name, text
        return
    cut = int(len(text) * (1 - config.validation_fraction))
    if cut == 0 or cut == len(text):
        raise TextInputError(
            f"{name}: {len(text)} characters are too few to hold out validation_fraction="
            f"{config.validation_fraction} with split='prefix' (a side would be empty)"
        )
    yield "train", f"{name}#train", text[:cut]
    yield "validation", f"{name}#validation", text[cut:]


def hash_fraction(name: str) -> float:
    """A document name's place in [0, 1): its SHA-256's first 8 bytes as a fraction of 2^64."""
    return int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:8], "big") / 2**64


def _check_split(config: TextDocumentsConfig, counts: dict, files: int) -> None:
    empty = [split for split, c in counts.items() if c["documents"] == 0]
    if empty:
        raise ValueError(
            f"TextDocumentsConfig.validation_fraction={config.validation_fraction} with split='{config.split}' "
            f"leaves {' and '.join(empty)} without documents ({files} files under {config.input_path}): the "
            "corpus is too small for the requested split; add documents or change the fraction"
        )


def _license_of(input_path: str) -> str | None:
    """The licence the download recorded (``provenance.json``), if it did."""
    provenance = join(input_path, "provenance.json")
    return json.loads(read_text(provenance)).get("license") if exists(provenance) else None
