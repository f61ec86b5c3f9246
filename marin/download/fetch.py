"""Fetch one file: streamed in chunks, resumed after interruptions, verified, then moved into place.

Local destination (the usual case on a worker with a disk, and in tests)::

    <dir>/.<name>.partial      bytes received so far; a retry or a later run continues from its size
    <dir>/<name>               appears (rename) only after size and checksums matched
    <output>/.download/<path>.json   the marker a rerun trusts to skip the file

HTTP(S) and hub files are fetched with one streaming GET per attempt, resuming with ``Range:
bytes=<have>-``; a server that ignores the range (200 instead of 206) makes the fetch start over.
Other fsspec sources are read with ``seek`` + ``read``. For an object-store destination the bytes stream
into a temporary object that is moved into place when verified; there an interrupted attempt starts
over (objects cannot be appended to).

The SHA-256 of every file is computed while streaming (the partial prefix is re-hashed on resume) and
recorded in the marker; it is checked against the hub's LFS checksum or the configured one, and the git
blob SHA-1 is checked for non-LFS hub files.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Iterator

from marin.download.sources import RemoteFile
from marin.storage import check_fence, delete, exists, filesystem, is_local, join, read_text, write_atomic
from marin.storage.paths import local_path

logger = logging.getLogger(__name__)
_TIMEOUT_S = 60


class VerificationError(RuntimeError):
    """The downloaded bytes do not match the expected size or checksum."""


class IncompleteDownload(OSError):
    """The stream ended before the expected number of bytes arrived (retried, resuming)."""


def marker_url(output_path: str, path: str) -> str:
    return join(output_path, ".download", f"{path}.json")


def fetch_file(
    f: RemoteFile, output_path: str, chunk_bytes: int, max_retries: int, expected_sha256: str | None = None
) -> dict:
    """Download ``f`` to ``<output_path>/<f.path>`` unless already complete; returns its provenance row."""
    dest, marker = join(output_path, f.path), marker_url(output_path, f.path)
    want_sha = expected_sha256 or f.sha256
    if exists(marker) and exists(dest):
        done = json.loads(read_text(marker))
        size = filesystem(dest)[0].size(filesystem(dest)[1])
        if (
            done["url"] == f.url
            and done["size"] == size
            and (want_sha is None or done["sha256"] == want_sha)
            and (f.size is None or f.size == size)
        ):
            logger.info("%s: already downloaded and verified, skipping", f.path)
            return {**done, "skipped": True}
    for attempt in range(max_retries + 1):
        try:
            row = _download_local(f, dest, chunk_bytes) if is_local(dest) else _download_remote(f, dest, chunk_bytes)
            _verify(f, row, want_sha)
            break
        except VerificationError:
            _discard_partial(dest)
            if attempt == max_retries:
                raise
            logger.warning("%s: verification failed, downloading again", f.path)
        except Exception as e:
            if not _retryable(e) or attempt == max_retries:
                raise
            logger.warning("%s: attempt %d failed (%s: %s); retrying", f.path, attempt + 1, type(e).__name__, e)
            time.sleep(min(2**attempt * 0.5, 10))
    _finish(dest)
    row = {"path": f.path, "url": f.url, "size": row["size"], "sha256": row["sha256"]}
    if f.git_sha1:
        row["git_sha1"] = f.git_sha1
    write_atomic(marker, json.dumps(row))
    return {**row, "skipped": False}


def _retryable(e: Exception) -> bool:
    if isinstance(e, (OSError, ConnectionError, TimeoutError)) and not isinstance(e, FileNotFoundError):
        return True
    import httpx2

    if isinstance(e, httpx2.TransportError):
        return True
    return isinstance(e, httpx2.HTTPStatusError) and (e.response.status_code >= 500 or e.response.status_code == 429)


def _partial(dest: str) -> str:
    head, _, name = local_path(dest).rpartition("/")
    return f"{head}/.{name}.partial" if head else f".{name}.partial"


def _discard_partial(dest: str) -> None:
    if is_local(dest):
        if os.path.exists(_partial(dest)):
            os.unlink(_partial(dest))
    else:
        delete(_remote_tmp(dest))


def _remote_tmp(dest: str) -> str:
    head, _, name = dest.rpartition("/")
    return f"{head}/.{name}.partial"


def _finish(dest: str) -> None:
    check_fence(dest)  # a task whose lease was lost must not publish into the new holder's output
    if is_local(dest):
        os.replace(_partial(dest), local_path(dest))
    else:
        fs, src = filesystem(_remote_tmp(dest))
        fs.mv(src, filesystem(dest)[1])


def _download_local(f: RemoteFile, dest: str, chunk_bytes: int) -> dict:
    partial = _partial(dest)
    os.makedirs(os.path.dirname(partial) or ".", exist_ok=True)
    have = os.path.getsize(partial) if os.path.exists(partial) else 0
    if f.size is not None and have > f.size:
        have = 0
    start, total, chunks = _open_stream(f, have, chunk_bytes)
    if start == 0 and have:
        logger.info("%s: the server cannot resume; starting over", f.path)
    elif have:
        logger.info("%s: resuming at byte %d", f.path, have)
    sha = hashlib.sha256()
    if start:
        with open(partial, "rb") as existing:
            for block in iter(lambda: existing.read(1 << 20), b""):
                sha.update(block)
    size = start
    with open(partial, "r+b" if start else "wb") as out:
        out.seek(start)
        out.truncate()
        for chunk in chunks:
            out.write(chunk)
            sha.update(chunk)
            size += len(chunk)
    expected = total if total is not None else f.size
    if expected is not None and size < expected:
        raise IncompleteDownload(f"{f.url}: stream ended at byte {size} of {expected}")
    return {"size": size, "sha256": sha.hexdigest(), "partial": partial}


def _download_remote(f: RemoteFile, dest: str, chunk_bytes: int) -> dict:
    _, total, chunks = _open_stream(f, 0, chunk_bytes)
    sha, size = hashlib.sha256(), 0
    fs, tmp = filesystem(_remote_tmp(dest))
    out = fs.open(tmp, "wb")
    try:
        for chunk in chunks:
            out.write(chunk)
            sha.update(chunk)
            size += len(chunk)
        expected = total if total is not None else f.size
        if expected is not None and size < expected:
            raise IncompleteDownload(f"{f.url}: stream ended at byte {size} of {expected}")
    except BaseException:
        # Closing would commit the object (an upload completes on close): abandon it instead.
        if hasattr(out, "discard"):
            out.discard()
        else:
            out.close()
            delete(_remote_tmp(dest))
        raise
    out.close()
    return {"size": size, "sha256": sha.hexdigest(), "partial": _remote_tmp(dest)}


def _open_stream(f: RemoteFile, offset: int, chunk_bytes: int) -> tuple[int, int | None, Iterator[bytes]]:
    """(offset the stream really starts at, total file size if known, chunks)."""
    if f.kind in ("http", "hub"):
        return _http_stream(f, offset, chunk_bytes)
    fs, path = filesystem(f.url)

    def chunks() -> Iterator[bytes]:
        with fs.open(path, "rb") as src:
            src.seek(offset)
            yield from iter(lambda: src.read(chunk_bytes), b"")

    return offset, f.size, chunks()


def _http_stream(f: RemoteFile, offset: int, chunk_bytes: int) -> tuple[int, int | None, Iterator[bytes]]:
    from huggingface_hub import get_session
    from huggingface_hub.utils import build_hf_headers

    headers = build_hf_headers() if f.kind == "hub" else {}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    session = get_session()
    request = session.build_request("GET", f.url, headers=headers, timeout=_TIMEOUT_S)
    response = session.send(request, stream=True, follow_redirects=True)
    if response.status_code == 416 and offset and f.size == offset:  # nothing left to fetch
        response.close()
        return offset, offset, iter(())
    try:
        response.raise_for_status()
    except Exception:
        response.read()
        response.close()
        raise
    start = offset if response.status_code == 206 else 0
    total = None
    if "content-range" in response.headers:
        total = int(response.headers["content-range"].rsplit("/", 1)[-1])
    elif "content-length" in response.headers and "content-encoding" not in response.headers:
        total = start + int(response.headers["content-length"])

    def chunks() -> Iterator[bytes]:
        try:
            yield from response.iter_bytes(chunk_bytes)
        finally:
            response.close()

    return start, total, chunks()


def _verify(f: RemoteFile, row: dict, want_sha: str | None) -> None:
    if f.size is not None and row["size"] != f.size:
        raise VerificationError(f"{f.url}: got {row['size']} bytes, expected {f.size}")
    if want_sha and row["sha256"] != want_sha.lower():
        raise VerificationError(f"{f.url}: SHA-256 {row['sha256']} does not match the expected {want_sha}")
    if f.git_sha1:
        blob = hashlib.sha1(f"blob {row['size']}\0".encode())
        with filesystem(row["partial"])[0].open(filesystem(row["partial"])[1], "rb") as data:
            for block in iter(lambda: data.read(1 << 20), b""):
                blob.update(block)
        if blob.hexdigest() != f.git_sha1:
            raise VerificationError(f"{f.url}: git blob SHA-1 {blob.hexdigest()} does not match the hub's {f.git_sha1}")
