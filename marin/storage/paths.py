"""Plain fsspec helpers: resolve a URL to a filesystem, read, list, and write whole files atomically.

Atomicity differs by backend and is handled here once: a local write goes to a temporary file in the same
directory and is renamed into place; an object-store PUT is already all-or-nothing, so it is written
directly. Readers therefore never see half of a small metadata file.
"""

from __future__ import annotations

import os
import uuid
from typing import IO, Any

import fsspec

from marin.storage.fence import check_fence
from marin.storage.urls import OBJECT_STORE_FOR_SCHEME, like_url, scheme_of

_LOCAL_PROTOCOLS = ("file", "local")

# gcsfs >= 2026 probes every bucket's type over gRPC, which GCS emulators cannot answer (with
# gcp-storage-emulator each call then stalls 60 s). Emulators have no such buckets: switch the probe off
# when one is configured, before fsspec first imports gcsfs.
if os.environ.get("STORAGE_EMULATOR_HOST"):
    os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")


class MissingBackend(ImportError):
    """The URL's scheme needs a filesystem package that is not installed."""


def filesystem(url: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """The fsspec filesystem serving ``url`` and the path within it."""
    try:
        return fsspec.core.url_to_fs(url)
    except (ImportError, ValueError) as e:
        if isinstance(e, ValueError) and "Protocol not known" not in str(e):
            raise
        scheme = scheme_of(url)
        extra = OBJECT_STORE_FOR_SCHEME.get(scheme)
        hint = f"install the '{extra}' extra: pip install -e '.[{extra}]'" if extra else str(e)
        raise MissingBackend(f"{url}: no filesystem for {scheme}:// ({hint})") from None


def is_local(url: str) -> bool:
    """True for plain paths and ``file://`` URLs (where POSIX rename, link and flock exist)."""
    return scheme_of(url) in ("", *_LOCAL_PROTOCOLS)


def join(base: str, *parts: str) -> str:
    """Join path parts with ``/`` without collapsing the ``scheme://`` of a URL."""
    out = base.rstrip("/") if base not in ("/", "") else base
    for part in parts:
        part = str(part).strip("/")
        if part:
            out = f"{out}/{part}" if out else part
    return out


def exists(url: str) -> bool:
    fs, path = filesystem(url)
    return fs.exists(path)


def open_url(url: str, mode: str = "rb", **kwargs: Any) -> IO:
    """Open any URL; in write mode local parent directories are created first (and fences checked)."""
    if any(c in mode for c in "wax"):
        check_fence(url)
    if "w" in mode and is_local(url):
        os.makedirs(os.path.dirname(local_path(url)) or ".", exist_ok=True)
    return fsspec.open(url, mode, **kwargs).open()


def read_bytes(url: str) -> bytes:
    fs, path = filesystem(url)
    return fs.cat_file(path)


def read_text(url: str) -> str:
    return read_bytes(url).decode("utf-8")


def write_atomic(url: str, data: bytes | str) -> None:
    """Replace the whole file at ``url`` so readers see the old or the new content, never a mix."""
    check_fence(url)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    if is_local(url):
        path = local_path(url)
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        tmp = f"{path}.tmp-{uuid.uuid4().hex}"
        try:
            with open(tmp, "wb") as f:
                f.write(payload)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return
    fs, path = filesystem(url)
    fs.pipe_file(path, payload)


def makedirs(url: str) -> None:
    check_fence(url)
    fs, path = filesystem(url)
    fs.makedirs(path, exist_ok=True)


def list_dir(url: str) -> list[str]:
    """Full URLs of the entries directly under ``url`` (empty if it does not exist)."""
    fs, path = filesystem(url)
    try:
        names = fs.ls(path, detail=False)
    except FileNotFoundError:
        return []
    return sorted(like_url(url, name) for name in names)


def glob(pattern: str) -> list[str]:
    fs, path = filesystem(pattern)
    return sorted(like_url(pattern, name) for name in fs.glob(path))


def delete(url: str, recursive: bool = False) -> None:
    check_fence(url)
    fs, path = filesystem(url)
    if fs.exists(path):
        fs.rm(path, recursive=recursive)


def local_path(url: str) -> str:
    return url[len("file://") :] if url.startswith("file://") else url
