"""WARC files (what Common Crawl ships): HTTP responses with their headers, read and written via ``warcio``.

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
    """The response records of one WARC file (plain or gzip-compressed per record), in file order."""
    from warcio.archiveiterator import ArchiveIterator
    from warcio.exceptions import ArchiveLoadFailed

    number = 0
    with open_url(url, "rb") as raw:
        try:
            for number, record in enumerate(ArchiveIterator(raw), 1):  # noqa: B007 (named in the error)
                if record.rec_type != "response":
                    continue
                headers = record.rec_headers
                content_type = record.http_headers.get_header("Content-Type", "") if record.http_headers else ""
                payload = record.content_stream().read()
                # warcio hands out a cut last record as if it were whole; its block reader knows what is missing.
                missing = getattr(record.raw_stream, "limit", 0)
                if missing:
                    raise EOFError(f"the file ends {missing} bytes before the end of this record")
                yield WarcResponse(
                    record_id=(headers.get_header("WARC-Record-ID") or "").strip("<>"),
                    url=headers.get_header("WARC-Target-URI") or "",
                    date=headers.get_header("WARC-Date") or "",
                    content_type=content_type,
                    payload=payload,
                )
        except (ArchiveLoadFailed, EOFError, OSError, ValueError) as e:
            raise WarcError(f"{url}: record {number + 1}: not a readable WARC record ({e})") from e


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
