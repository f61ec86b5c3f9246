"""Create-only writes and compare-and-swap on small files: the primitives behind executor leases.

A lease must be taken by exactly one of many racing executors, refreshed only by its holder, and taken
over by exactly one executor once stale. All three reduce to two operations:

    blob = create_only(url, data)                  # None if something is already there
    blob = replace_if_version(url, data, version)  # None if the file changed since `version` was read

``version`` is an opaque token: locally a digest of the content, checked and swapped under a per-file
lock that a frozen holder cannot keep (``marin.storage.local_lock``);
on GCS the object's generation (``ifGenerationMatch``), on S3 its ETag (``If-None-Match: *`` /
``If-Match``); the object-store backends live in ``marin.storage.object_stores``. Where a filesystem
offers no conditional write (``memory://``, or a bucket whose store ignores or rejects preconditions, as
found by ``marin.storage.preflight``) the fallback serializes callers inside this process only and warns:
safe for one executor, not for several processes. docs/storage.md tabulates what each backend guarantees.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import threading
import uuid

from marin.storage import local_lock
from marin.storage.blob import ConditionalWriteUnsupported, VersionedBlob
from marin.storage.fence import check_fence
from marin.storage.paths import filesystem, is_local, local_path
from marin.storage.urls import OBJECT_STORE_FOR_SCHEME, scheme_of, split_url

logger = logging.getLogger(__name__)


def create_only(url: str, data: bytes) -> VersionedBlob | None:
    """Write ``data`` at ``url`` only if no file exists there. Returns the new blob or None if one did."""
    return _dispatch(url, "create_only", data)


def read_versioned(url: str) -> VersionedBlob | None:
    """The current content and version of ``url``, or None if it does not exist."""
    return _dispatch(url, "read")


def replace_if_version(url: str, data: bytes, version: str) -> VersionedBlob | None:
    """Overwrite ``url`` only if it is still at ``version``. Returns the new blob or None on conflict."""
    return _dispatch(url, "replace", data, version)


def delete_if_version(url: str, version: str) -> bool:
    """Delete ``url`` only if it is still at ``version``. True if it was deleted by this call."""
    return _dispatch(url, "delete", version)


def backend_name(url: str) -> str:
    """Which implementation serves ``url`` right now: "local", "gcs", "s3" or "process-local"."""
    return _backend(url).name


def mark_unconditional(url: str, reason: str) -> None:
    """Serve ``url``'s bucket with the process-local fallback from now on, because its store does not
    honour preconditions (``reason`` says how we found out). Warns once per bucket."""
    key = _bucket_key(url)
    if key not in _UNCONDITIONAL:
        _UNCONDITIONAL[key] = reason
        logger.warning(
            "%s://%s does not honour conditional writes (%s); leases there are exclusive only within this "
            "process. Do not run several executors on this bucket.",
            scheme_of(url),
            key[1],
            reason,
        )


def _dispatch(url: str, op: str, *args):
    if op != "read":
        check_fence(url)
    backend = _backend(url)
    try:
        return getattr(backend, op)(url, *args)
    except ConditionalWriteUnsupported as e:
        if backend.name == "process-local":
            raise
        mark_unconditional(url, str(e))
        return getattr(_backend(url), op)(url, *args)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class _LocalBackend:
    """POSIX: ``link(2)`` publishes a fully written temp file only if the name is free (create-only);
    compare-and-swap commits under ``marin.storage.local_lock``, a per-file lock that a waiter breaks when
    its holder is frozen or dead, voiding the holder's pending write, so racing processes on one machine
    (or on a filesystem with atomic ``rename``) serialize and a stopped process blocks no one for long."""

    name = "local"

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
        return VersionedBlob(data, _digest(data)) if self._swap(url, data, version) else None

    def delete(self, url: str, version: str) -> bool:
        return self._swap(url, None, version)

    def _swap(self, url: str, data: bytes | None, version: str) -> bool:
        """Replace (``data``) or delete (None) ``url`` if it is at ``version``; True if this call did. A lock
        broken under us (we were frozen or slow) voided our write: look at the file again."""
        path = local_path(url)
        while True:
            current = self.read(url)  # outside the lock first: a stale version needs no lock
            if current is None or current.version != version:
                return False
            with local_lock.acquire(path, data) as held:
                current = self.read(url)
                if current is None or current.version != version:
                    return False
                try:
                    if data is None:
                        held.commit_delete()
                    else:
                        held.commit_replace()
                    return True
                except local_lock.LockBroken:
                    logger.info("the lock on %s was broken before we wrote; trying again", path)

    @staticmethod
    def _write_temp(path: str, data: bytes) -> str:
        tmp = f"{path}.tmp-{uuid.uuid4().hex}"
        with open(tmp, "wb") as f:
            f.write(data)
        return tmp


class _ProcessLocalBackend:
    """Best effort for filesystems without conditional writes: a check-then-write under a lock that
    only this process honours. Warns once per protocol, because two processes can both 'win'."""

    name = "process-local"
    _lock = threading.Lock()
    _warned: set[str] = set()

    def __init__(self, protocol: str):
        self.protocol = protocol

    def _warn(self) -> None:
        if self.protocol in OBJECT_STORE_FOR_SCHEME:  # mark_unconditional already warned, naming the bucket
            return
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
_UNCONDITIONAL: dict[tuple[str, str], str] = {}
"""(store, bucket) pairs found not to honour preconditions, with the reason."""


def _bucket_key(url: str) -> tuple[str, str]:
    scheme, rest = split_url(url)
    return OBJECT_STORE_FOR_SCHEME.get(scheme, scheme), rest.split("/", 1)[0]


def _backend(url: str):
    if is_local(url):
        return _LOCAL
    scheme = scheme_of(url)
    store = OBJECT_STORE_FOR_SCHEME.get(scheme)
    if store is None or _bucket_key(url) in _UNCONDITIONAL:
        return _ProcessLocalBackend(scheme)
    from marin.storage import object_stores  # google / botocore are imported only once a bucket is used

    return object_stores.GCS if store == "gcs" else object_stores.S3
