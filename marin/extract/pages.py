"""Raw pages in, decoded HTML out: the three input forms of the extract step, and charset handling.

    for page in read_pages(url, html_field="html"):      # a WARC, a record file, or one .html file
        html, problem = decode_html(page.content, page.content_type)

- WARC (``.warc``, ``.warc.gz``): every response record; id = WARC-Record-ID, url = WARC-Target-URI.
- Record files (JSONL plain/.gz/.zst, Parquet) with an ``html_field``: id = the record's ``id`` (else
  ``<file>:<line>``), url = its ``url``; every other field is kept as provenance.
- ``.html``/``.htm`` files: one page each; id = the path relative to the input root.

Decoding follows what the bytes say more than what the headers claim, because on the web the declared
charset is often wrong: binary payloads (NUL bytes, image/archive signatures) are refused, then strict
UTF-8 is tried (bytes that decode as UTF-8 and contain non-ASCII are almost never anything else), then
the declared charset (HTTP header, then ``<meta>``), then Windows-1252 (what browsers use for "latin-1").
"""

from __future__ import annotations

import codecs
import dataclasses
import re
from collections.abc import Iterator

from marin.storage import read_bytes
from marin.storage.records import RECORD_SUFFIXES, read_records
from marin.storage.warc import WARC_SUFFIXES, read_warc

HTML_SUFFIXES = (".html", ".htm")
PAGE_SUFFIXES = WARC_SUFFIXES + RECORD_SUFFIXES + HTML_SUFFIXES
_MAGIC = (b"\x89PNG", b"GIF8", b"\xff\xd8\xff", b"%PDF", b"\x1f\x8b", b"PK\x03\x04", b"\x00\x00\x01\x00")
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_\-:.]+)""", re.IGNORECASE)
_HEADER_CHARSET = re.compile(r"charset\s*=\s*[\"']?\s*([A-Za-z0-9_\-:.]+)", re.IGNORECASE)


@dataclasses.dataclass(frozen=True)
class RawPage:
    id: str
    url: str | None
    content: bytes | str
    """Bytes as fetched (WARC, .html files) or text already decoded (record files)."""
    content_type: str
    provenance: dict
    """Where the page came from: {"record": n} plus WARC date or the input record's other fields."""


def read_pages(
    url: str, rel: str, *, html_field: str = "html", on_error: str = "raise", stats=None
) -> Iterator[RawPage]:
    """The pages of one input file (``rel``: its path relative to the input root, used for ids)."""
    lower = url.lower()
    if lower.endswith(WARC_SUFFIXES):
        for n, r in enumerate(read_warc(url), 1):
            yield RawPage(
                id=r.record_id or f"{rel}:{n}",
                url=r.url,
                content=r.payload,
                content_type=r.content_type,
                provenance={"record": n, "date": r.date},
            )
    elif lower.endswith(HTML_SUFFIXES):
        yield RawPage(id=rel, url=None, content=read_bytes(url), content_type="", provenance={"record": 1})
    else:
        rows = read_records(
            url,
            required=(html_field,),
            on_error=on_error,
            stats=stats,
            validate=lambda r: (
                None if isinstance(r[html_field], str) else f"field {html_field!r} must be a string of HTML"
            ),
        )
        for n, record in enumerate(rows, 1):
            extra = {k: v for k, v in record.items() if k not in (html_field, "id", "url", "text")}
            yield RawPage(
                id=str(record.get("id") or f"{rel}:{n}"),
                url=record.get("url"),
                content=record[html_field],
                content_type="",
                provenance={"record": n, **extra},
            )


def declared_charset(data: bytes, content_type: str) -> str | None:
    """The charset the HTTP header (first) or a ``<meta>`` tag in the first 4 KiB names, if Python knows it."""
    match = _HEADER_CHARSET.search(content_type or "")
    name = match.group(1) if match else None
    if name is None:
        meta = _META_CHARSET.search(data[:4096])
        name = meta.group(1).decode("ascii", "replace") if meta else None
    if name is None:
        return None
    try:
        return codecs.lookup(name).name
    except LookupError:
        return None


def decode_html(content: bytes | str, content_type: str = "") -> tuple[str | None, str]:
    """(html, encoding used) or (None, skip reason: ``"binary"`` or ``"undecodable"``)."""
    if isinstance(content, str):
        return content, "text"
    head = content[:4096]
    if content.startswith(_MAGIC) or b"\x00" in head:
        return None, "binary"
    try:
        return content.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        pass
    declared = declared_charset(content, content_type)
    if declared and declared != "utf-8":
        try:
            return content.decode(declared), declared
        except UnicodeDecodeError:
            pass
    text = content.decode("cp1252", errors="replace")
    if text.count("\ufffd") > max(8, len(text) // 100):
        return None, "undecodable"
    return text, "cp1252"
