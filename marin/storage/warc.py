"""WARC files (what Common Crawl ships): HTTP responses with their headers, read with FastWARC, written with warcio.

    for page in read_warc("gs://bucket/crawl/CC-MAIN-...-00000.warc.gz"):
        page.record_id, page.url, page.content_type, page.payload     # payload: the raw body bytes

Only ``response`` records are yielded (``warcinfo``, ``request`` and ``metadata`` records are not pages).
A file that ends inside a record or is not a WARC raises ``WarcError`` naming the file and the record
number: there is no next record to skip to. Written files are byte-for-byte deterministic when every
record carries its own ``WARC-Date`` and ``WARC-Record-ID`` (``write_warc`` requires both).
"""

from __future__ import annotations

import dataclasses
import io
import zlib
from collections.abc import Iterable, Iterator

from marin.storage.paths import open_url, write_atomic

WARC_SUFFIXES = (".warc", ".warc.gz")


class WarcError(ValueError):
    """A WARC file that cannot be read; the message starts with ``<file>: record <n>:``."""


@dataclasses.dataclass(frozen=True)
class WarcResponse:
    record_id: str
    """WARC-Record-ID without its angle brackets, e.g. ``urn:uuid:...``."""
    url: str
    """WARC-Target-URI."""
    date: str
    """WARC-Date (ISO 8601)."""
    content_type: str
    """The HTTP Content-Type header ("" when absent); its charset may be wrong, as on the real web."""
    payload: bytes
    """The HTTP body, with any Content-Encoding/Transfer-Encoding undone."""


def is_warc_file(url: str) -> bool:
    return url.lower().endswith(WARC_SUFFIXES)


def read_warc(url: str) -> Iterator[WarcResponse]:
    """The response records of one WARC file (plain or gzip-compressed per record), in file order.

    Read with FastWARC (C++, installed with resiliparse; ~25x faster than warcio here). Each record's block is
    read whole and checked against its Content-Length (FastWARC hands out a cut last record as if it were
    whole), then split into HTTP headers and body here, undoing chunked transfer and gzip/deflate encoding."""
    from fastwarc.warc import ArchiveIterator, WarcRecordType

    number, seen = 0, 0
    with open_url(url, "rb") as raw:
        try:
            for record in ArchiveIterator(raw, parse_http=False):
                seen += 1
                if record.record_type != WarcRecordType.response:
                    continue
                number += 1
                block = record.reader.read()
                if len(block) < record.content_length:
                    raise EOFError(
                        f"the file ends {record.content_length - len(block)} bytes before the end of this record"
                    )
                content_type, payload = http_body(block)
                headers = record.headers
                yield WarcResponse(
                    record_id=(headers.get("WARC-Record-ID") or "").strip("<>"),
                    url=headers.get("WARC-Target-URI") or "",
                    date=headers.get("WARC-Date") or "",
                    content_type=content_type,
                    payload=payload,
                )
        except (EOFError, OSError, ValueError, zlib.error) as e:
            raise WarcError(f"{url}: response record {number}: not a readable WARC record ({e})") from e
    if seen == 0 and _size(url) > 0:
        raise WarcError(f"{url}: no WARC records in a non-empty file (not a WARC?)")


def http_body(block: bytes) -> tuple[str, bytes]:
    """(Content-Type, body) of an HTTP response as stored in a WARC block, transfer and content encodings undone."""
    head, sep, body = block.partition(b"\r\n\r\n")
    if not sep:
        head, sep, body = block.partition(b"\n\n")
    headers: dict[str, str] = {}
    for line in head.decode("latin-1").splitlines()[1:]:
        name, colon, value = line.partition(":")
        if colon:
            headers[name.strip().lower()] = value.strip()
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = _dechunk(body)
    encoding = headers.get("content-encoding", "").lower()
    if encoding in ("gzip", "x-gzip", "deflate"):
        try:
            body = zlib.decompress(body, 47 if "gzip" in encoding else 15)
        except zlib.error:  # mislabelled (often: already decoded by the crawler); keep the bytes as stored
            pass
    return headers.get("content-type", ""), body


def _dechunk(body: bytes) -> bytes:
    out, pos = [], 0
    while pos < len(body):
        line_end = body.find(b"\r\n", pos)
        if line_end < 0:
            break
        size = int(body[pos:line_end].split(b";")[0].strip() or b"0", 16)
        if size == 0:
            break
        out.append(body[line_end + 2 : line_end + 2 + size])
        pos = line_end + 2 + size + 2
    return b"".join(out)


def _size(url: str) -> int:
    from marin.storage.paths import filesystem

    fs, path = filesystem(url)
    return fs.size(path)


def write_warc(url: str, pages: Iterable[WarcResponse], *, gzip: bool | None = None) -> int:
    """Write ``pages`` as response records (gzip per record when the name ends in .gz); returns the count.

    The file is built in memory and written atomically, which suits test and sample files; a crawl-sized
    writer would stream instead."""
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    buffer = io.BytesIO()
    writer = WARCWriter(buffer, gzip=url.endswith(".gz") if gzip is None else gzip)
    count = 0
    for page in pages:
        if not page.record_id or not page.date:
            raise ValueError(f"{url}: every record needs a record_id and a date (deterministic output)")
        http_headers = StatusAndHeaders(
            "200 OK",
            [("Content-Type", page.content_type), ("Content-Length", str(len(page.payload)))],
            protocol="HTTP/1.1",
        )
        record = writer.create_warc_record(
            page.url,
            "response",
            payload=io.BytesIO(page.payload),
            http_headers=http_headers,
            warc_headers_dict={"WARC-Record-ID": f"<{page.record_id}>", "WARC-Date": page.date},
        )
        writer.write_record(record)
        count += 1
    write_atomic(url, buffer.getvalue())
    return count
