"""Check a prefix before any step runs, so bad storage input fails in one line instead of mid-DAG.

    check_prefix("gs://my-bucket/lab", write=True)
    # StoreUnavailable: gs://my-bucket/lab: bucket gs://my-bucket does not exist

Four questions, cheapest first; each failure names the URL and what failed:

1. Is the endpoint reachable? A plain TCP connect with a short timeout. Without it, an unreachable
   endpoint would surface only after the client libraries' retries (gcsfs backs off for ~30 s) as a
   traceback from deep inside aiohttp.
2. Does the bucket exist, and may we list it? One list call of at most one key under the prefix.
3. (``write=True``) May we write? A create-only write of a probe object under the prefix.
4. (``write=True``) Does the store honour preconditions? A second create-only write of the same probe and
   a replace against a version that never existed must both be refused. A store that accepts either
   (``gcp-storage-emulator``, some S3-compatible servers) would let two executors both "win" a lease, so
   its bucket is switched to the process-local fallback with a warning (``mark_unconditional``).

The probe object (``<prefix>/.marin-probe-<random>``) is deleted again. Each bucket is checked once per
process. Local prefixes only get a writability check of the nearest existing directory.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from urllib.parse import urlparse

from marin.storage.conditional import (
    backend_name,
    create_only,
    delete_if_version,
    mark_unconditional,
    replace_if_version,
)
from marin.storage.paths import filesystem, is_local, join, local_path
from marin.storage.urls import is_url, object_store, split_bucket

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 5.0
_DEFAULT_ENDPOINTS = {"gcs": "https://storage.googleapis.com", "s3": "https://s3.amazonaws.com"}
_ENDPOINT_HINTS = {"gcs": "network access, or STORAGE_EMULATOR_HOST", "s3": "network access, or AWS_ENDPOINT_URL"}
_checked: set[tuple[str, str, bool]] = set()


class StoreUnavailable(OSError):
    """The prefix cannot be used: unreachable endpoint, missing bucket, permission denied, bad path."""


def check_prefix(prefix: str, *, write: bool) -> None:
    """Raise ``StoreUnavailable`` (one line, naming ``prefix``) unless steps can run under ``prefix``.

    ``write=False`` (a dry run) only reads. Results are cached per bucket and mode for the process.
    """
    if is_local(prefix):
        if write:
            _check_local(prefix)
        return
    store = object_store(prefix)
    if store is None:  # memory:// and friends: nothing remote to check
        return
    try:
        _, bucket, _ = split_bucket(prefix)
    except ValueError as e:
        raise StoreUnavailable(str(e)) from None
    if (store, bucket, write) in _checked:
        return
    filesystem(prefix)  # MissingBackend (one line) if the extra is not installed
    _check_reachable(prefix, store)
    _check_bucket(prefix, store, bucket)
    if write:
        _probe_writes(prefix, store)
    _checked.add((store, bucket, write))


def _check_local(prefix: str) -> None:
    path = os.path.abspath(local_path(prefix))
    existing = path
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise StoreUnavailable(f"{prefix}: {existing} is a file, expected a directory (or nothing) there")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise StoreUnavailable(f"{prefix}: permission denied: cannot create or write in {existing}")


def endpoint(prefix: str, store: str) -> str:
    """The URL the client library will talk to for ``prefix``."""
    if store == "gcs":
        emulator = os.environ.get("STORAGE_EMULATOR_HOST")
        if emulator:
            return emulator if is_url(emulator) else f"http://{emulator}"
        return _DEFAULT_ENDPOINTS["gcs"]
    from marin.storage.object_stores import S3

    _, client = S3.client(prefix)
    return client.meta.endpoint_url or _DEFAULT_ENDPOINTS["s3"]


def _check_reachable(prefix: str, store: str) -> None:
    url = endpoint(prefix, store)
    parsed = urlparse(url)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        socket.create_connection((parsed.hostname, port), timeout=CONNECT_TIMEOUT_S).close()
    except socket.gaierror as e:
        reason = f"cannot resolve {parsed.hostname}: {e.strerror}"
    except ConnectionRefusedError:
        reason = "connection refused"
    except TimeoutError:
        reason = f"no answer within {CONNECT_TIMEOUT_S:g} s"
    except OSError as e:
        reason = e.strerror or str(e)
    else:
        return
    raise StoreUnavailable(f"{prefix}: cannot reach the store at {url} ({reason}); check {_ENDPOINT_HINTS[store]}")


def _check_bucket(prefix: str, store: str, bucket: str) -> None:
    scheme, _, key = split_bucket(prefix)
    try:
        if store == "gcs":
            _list_gcs(prefix, bucket, key)
        else:
            _list_s3(prefix, bucket, key)
    except FileNotFoundError:
        raise StoreUnavailable(f"{prefix}: bucket {scheme}://{bucket} does not exist") from None
    except PermissionError as e:
        raise StoreUnavailable(f"{prefix}: permission denied listing the prefix ({_detail(e)})") from None


def _list_gcs(prefix: str, bucket: str, key: str) -> None:
    from google.api_core import exceptions as gexc

    from marin.storage.object_stores import GCS, gcs_reason

    client = GCS.client(prefix)
    try:
        list(client.list_blobs(bucket, prefix=key, max_results=1))
    except gexc.NotFound:
        raise FileNotFoundError(prefix) from None
    except (gexc.Forbidden, gexc.Unauthorized) as e:
        raise PermissionError(f"{prefix}: permission denied by GCS: {gcs_reason(e)}") from None


def _list_s3(prefix: str, bucket: str, key: str) -> None:
    from botocore.exceptions import NoCredentialsError

    from marin.storage.object_stores import S3, retrying

    try:
        retrying(prefix, lambda: S3.call(prefix, "list_objects_v2", Bucket=bucket, Prefix=key, MaxKeys=1))
    except NoCredentialsError:
        raise StoreUnavailable(f"{prefix}: no AWS credentials found (set AWS_ACCESS_KEY_ID or a profile)") from None


def _probe_writes(prefix: str, store: str) -> None:
    url = join(prefix, f".marin-probe-{uuid.uuid4().hex[:12]}")
    try:
        first = create_only(url, b"marin precondition probe 1")
    except PermissionError as e:
        raise StoreUnavailable(f"{prefix}: permission denied writing objects here ({_detail(e)})") from None
    if backend_name(prefix) == "process-local":  # already known not to honour preconditions
        _remove(url)
        return
    if first is None:
        raise StoreUnavailable(f"{prefix}: a create-only write of a fresh probe object {url} was refused")
    second = create_only(url, b"marin precondition probe 2")
    never = "1" if store == "gcs" else '"marin-probe-no-such-etag"'  # no real generation / ETag looks like this
    stale = replace_if_version(url, b"marin precondition probe 3", never)
    current = second or stale or first
    if not delete_if_version(url, current.version):
        _remove(url)
    if second is not None or stale is not None:
        what = "a second create-only write" if second is not None else "a replace against a wrong version"
        mark_unconditional(prefix, f"the preflight probe saw {what} succeed")


def _remove(url: str) -> None:
    fs, path = filesystem(url)
    try:
        fs.rm(path)
    except FileNotFoundError:
        pass


def _detail(e: BaseException) -> str:
    """ "GCS: 403 caller does not have ..." out of a backend's "<url>: permission denied by GCS: 403 ..."."""
    text = str(e).splitlines()[0] if str(e) else type(e).__name__
    return text.split("permission denied by ", 1)[-1]
