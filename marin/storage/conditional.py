"""Create-only writes and compare-and-swap on small files: the primitives behind executor leases.

A lease must be taken by exactly one of many racing executors, refreshed only by its holder, and taken
over by exactly one executor once stale. All three reduce to two operations:

    blob = create_only(url, data)                  # None if something is already there
    blob = replace_if_version(url, data, version)  # None if the file changed since `version` was read

``version`` is an opaque token: locally a digest of the content read under ``flock`` on the directory;
the object-store backends (GCS generation preconditions, S3 conditional puts) plug in here and use the
store's own token. Where a filesystem offers no conditional write (``memory://``, or a store without
preconditions) the fallback serializes callers inside this process only and warns once: safe for one
executor, not for several processes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import hashlib
import logging
import os
import threading
import uuid

from marin.storage.paths import filesystem, is_local, local_path

logger = logging.getLogger(__name__)


class ConditionalWriteUnsupported(RuntimeError):
    """The backend cannot make a write conditional; raised only where a caller demands a real guarantee."""


@dataclasses.dataclass(frozen=True)
class VersionedBlob:
    """The content of a small file together with the token that identifies this exact version of it."""

    data: bytes
    version: str


def create_only(url: str, data: bytes) -> VersionedBlob | None:
    """Write ``data`` at ``url`` only if no file exists there. Returns the new blob or None if one did."""
    return _backend(url).create_only(url, data)


def read_versioned(url: str) -> VersionedBlob | None:
    """The current content and version of ``url``, or None if it does not exist."""
    return _backend(url).read(url)


def replace_if_version(url: str, data: bytes, version: str) -> VersionedBlob | None:
    """Overwrite ``url`` only if it is still at ``version``. Returns the new blob or None on conflict."""
    return _backend(url).replace(url, data, version)


def delete_if_version(url: str, version: str) -> bool:
    """Delete ``url`` only if it is still at ``version``. True if it was deleted by this call."""
    return _backend(url).delete(url, version)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class _LocalBackend:
    """POSIX: ``link(2)`` publishes a fully written temp file only if the name is free (create-only);
    compare-and-swap runs under an exclusive ``flock`` on the parent directory, so racing processes
    on one machine (or on a filesystem with working flock) serialize."""

    def create_only(self, url: str, data: bytes) -> VersionedBlob | None:
        path = local_path(url)
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        tmp = self._write_temp(path, data)
        try:
            os.link(tmp, path)
        except FileExistsError:
            return None
        finally:
            os.unlink(tmp)
        return VersionedBlob(data, _digest(data))

    def read(self, url: str) -> VersionedBlob | None:
        try:
            with open(local_path(url), "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return None
        return VersionedBlob(data, _digest(data))

    def replace(self, url: str, data: bytes, version: str) -> VersionedBlob | None:
        path = local_path(url)
        with self._dir_lock(path):
            current = self.read(url)
            if current is None or current.version != version:
                return None
            tmp = self._write_temp(path, data)
            os.replace(tmp, path)
        return VersionedBlob(data, _digest(data))

    def delete(self, url: str, version: str) -> bool:
        path = local_path(url)
        with self._dir_lock(path):
            current = self.read(url)
            if current is None or current.version != version:
                return False
            os.unlink(path)
        return True

    @staticmethod
    def _write_temp(path: str, data: bytes) -> str:
        tmp = f"{path}.tmp-{uuid.uuid4().hex}"
        with open(tmp, "wb") as f:
            f.write(data)
        return tmp

    @staticmethod
    @contextlib.contextmanager
    def _dir_lock(path: str):
        fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the flock


class _ProcessLocalBackend:
    """Best effort for filesystems without conditional writes: a check-then-write under a lock that
    only this process honours. Warns once per protocol, because two processes can both 'win'."""

    _lock = threading.Lock()
    _warned: set[str] = set()

    def __init__(self, protocol: str):
        self.protocol = protocol

    def _warn(self) -> None:
        if self.protocol not in self._warned:
            self._warned.add(self.protocol)
            logger.warning(
                "%s:// has no conditional writes in marin.storage; leases are exclusive only within "
                "this process. Do not run several executors on one %s:// prefix.",
                self.protocol,
                self.protocol,
            )

    def create_only(self, url: str, data: bytes) -> VersionedBlob | None:
        self._warn()
        fs, path = filesystem(url)
        with self._lock:
            if fs.exists(path):
                return None
            fs.pipe_file(path, data)
        return VersionedBlob(data, _digest(data))

    def read(self, url: str) -> VersionedBlob | None:
        fs, path = filesystem(url)
        try:
            data = fs.cat_file(path)
        except FileNotFoundError:
            return None
        return VersionedBlob(data, _digest(data))

    def replace(self, url: str, data: bytes, version: str) -> VersionedBlob | None:
        self._warn()
        fs, path = filesystem(url)
        with self._lock:
            current = self.read(url)
            if current is None or current.version != version:
                return None
            fs.pipe_file(path, data)
        return VersionedBlob(data, _digest(data))

    def delete(self, url: str, version: str) -> bool:
        fs, path = filesystem(url)
        with self._lock:
            current = self.read(url)
            if current is None or current.version != version:
                return False
            try:
                fs.rm(path)
            except OSError as e:  # pragma: no cover - racing delete
                if e.errno != errno.ENOENT:
                    raise
        return True


_LOCAL = _LocalBackend()


def _backend(url: str):
    if is_local(url):
        return _LOCAL
    return _ProcessLocalBackend(url.split("://", 1)[0])

