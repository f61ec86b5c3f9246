"""Conditional writes on object stores: GCS generation preconditions and S3 conditional requests.

The executor's lease needs four operations (see ``marin.storage.conditional``); here is how each maps
onto the two stores, with the version token being the store's own:

    operation           GCS (JSON API)                        S3
    ------------------  ------------------------------------  ---------------------------------
    create_only         upload, ifGenerationMatch=0           PutObject, If-None-Match: *
    read_versioned      download -> x-goog-generation         GetObject -> ETag
    replace_if_version  upload, ifGenerationMatch=<gen>       PutObject, If-Match: <etag>
    delete_if_version   delete, ifGenerationMatch=<gen>       DeleteObject, If-Match: <etag>

A refused precondition is HTTP 412 on both stores and means "someone else got there first".

Retries need care. A write whose response was lost (connection reset, 5xx after the server committed)
may have landed; retrying it then hits our *own* precondition and reports 412. So each call retries
transient errors itself, remembers that an earlier attempt may have landed, and on a later 412 reads the
object back: if it holds exactly the bytes we sent, the earlier attempt won and the call succeeds. That
read-back is exact when the payload is unique to the caller (a lease carries its owner id and a
timestamp); it is only done after a transient error, so compare-and-swap loops with repeated payloads
keep their meaning in the absence of faults.

Known gaps, also in docs/storage.md:
- S3 ETags of single-part uploads are content MD5s, so a version identifies *content*, not a write:
  rewriting identical bytes is invisible to If-Match (the local backend's digest behaves the same). Lease
  payloads always differ, so leases are unaffected.
- fake-gcs-server (the test emulator) ignores preconditions on DELETE, and S3-compatible stores differ in
  whether they honour If-Match on DELETE. Deletes therefore read the current version first and then delete
  with the precondition: atomic where the store honours it (GCS, AWS S3, moto), check-then-act elsewhere.
- A store that answers 501 to a conditional request raises ``ConditionalWriteUnsupported``; the caller
  (``conditional._backend``) then falls back to the process-local lock with a warning.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable
from typing import Any

from marin.storage.blob import ConditionalWriteUnsupported, VersionedBlob
from marin.storage.urls import split_bucket

logger = logging.getLogger(__name__)

_ATTEMPTS = 5
_BACKOFF_S = 0.2


class _PreconditionFailed(Exception):
    """Internal: the store refused the write because its precondition did not hold (HTTP 412)."""


class _Transient(Exception):
    """Internal: a retryable failure; ``maybe_applied`` says whether the request may have reached the store."""

    def __init__(self, cause: BaseException, maybe_applied: bool = True):
        super().__init__(str(cause))
        self.cause = cause
        self.maybe_applied = maybe_applied


def _with_retries(url: str, attempt: Callable[[], Any], on_landed: Callable[[], Any], on_refused: Any) -> Any:
    """Run ``attempt`` until it returns, retrying transient failures with backoff.

    On a refused precondition: ``on_landed()`` if an earlier attempt may have been applied (see the module
    docstring), else ``on_refused``.
    """
    maybe_applied = False
    for i in range(_ATTEMPTS):
        try:
            return attempt()
        except _PreconditionFailed:
            return on_landed() if maybe_applied else on_refused
        except _Transient as e:
            maybe_applied = maybe_applied or e.maybe_applied
            if i == _ATTEMPTS - 1:
                raise OSError(f"{url}: store kept failing after {_ATTEMPTS} attempts: {e.cause}") from e.cause
            logger.warning("%s: transient store error (%s); retrying", url, e.cause)
            time.sleep(_BACKOFF_S * 2**i)
    raise AssertionError("unreachable")


def retrying(url: str, read: Callable[[], Any]) -> Any:
    """Run an idempotent call (a read, a listing) with the same retries; never leaks ``_Transient``."""
    return _with_retries(url, read, lambda: None, None)


def _landed(backend, url: str, data: bytes) -> VersionedBlob | None:
    current = backend.read(url)
    if current is not None and current.data == data:
        logger.info("%s: an earlier attempt of this write had landed; keeping it", url)
        return current
    return None


class GcsBackend:
    """GCS through google-cloud-storage (a dependency of gcsfs), which exposes generation preconditions
    directly. Its own retries are switched off for conditional calls so that ours can tell an ambiguous
    retry from a lost race."""

    name = "gcs"

    def __init__(self):
        self._clients: dict[int, Any] = {}
        self._lock = threading.Lock()

    def client(self, url: str):
        """One client per process (requests sessions must not cross a fork)."""
        with self._lock:
            client = self._clients.get(os.getpid())
            if client is None:
                client = self._clients[os.getpid()] = _new_gcs_client(url)
            return client

    def _blob(self, url: str):
        _, bucket, key = split_bucket(url)
        return self.client(url).bucket(bucket).blob(key)

    def _translate(self, url: str, e: BaseException) -> BaseException:
        from google.api_core import exceptions as gexc

        if isinstance(e, gexc.PreconditionFailed):
            return _PreconditionFailed()
        if isinstance(e, (gexc.Forbidden, gexc.Unauthorized)):
            return PermissionError(f"{url}: permission denied by GCS: {gcs_reason(e)}")
        if isinstance(e, gexc.MethodNotImplemented):
            return ConditionalWriteUnsupported(f"{url}: store does not implement generation preconditions")
        if isinstance(e, gexc.TooManyRequests):  # rejected before it was applied
            return _Transient(e, maybe_applied=False)
        if isinstance(e, gexc.ServerError) or getattr(e, "code", None) == 408 or _is_connection_error(e):
            return _Transient(e)
        return e

    def _call(self, url: str, fn: Callable[[], Any]) -> Any:
        from google.api_core import exceptions as gexc

        try:
            return fn()
        except (gexc.GoogleAPIError, OSError, ConnectionError) as e:
            translated = self._translate(url, e)
            if translated is e:
                raise
            raise translated from e

    def create_only(self, url: str, data: bytes) -> VersionedBlob | None:
        return self._upload(url, data, generation=0)

    def replace(self, url: str, data: bytes, version: str) -> VersionedBlob | None:
        return self._upload(url, data, generation=int(version))

    def _upload(self, url: str, data: bytes, generation: int) -> VersionedBlob | None:
        def attempt():
            blob = self._blob(url)
            self._call(url, lambda: blob.upload_from_string(data, if_generation_match=generation, retry=None))
            return VersionedBlob(data, str(blob.generation))

        return _with_retries(url, attempt, lambda: _landed(self, url, data), None)

    def read(self, url: str) -> VersionedBlob | None:
        from google.api_core import exceptions as gexc

        blob = self._blob(url)
        try:
            data = retrying(url, lambda: self._call(url, blob.download_as_bytes))
        except gexc.NotFound:
            return None
        return VersionedBlob(data, str(blob.generation))

    def delete(self, url: str, version: str) -> bool:
        from google.api_core import exceptions as gexc

        _, bucket, key = split_bucket(url)
        try:  # see the module docstring: the emulator ignores DELETE preconditions
            current = retrying(url, lambda: self._call(url, lambda: self.client(url).bucket(bucket).get_blob(key)))
        except gexc.NotFound:
            return False
        if current is None or str(current.generation) != version:
            return False

        def attempt():
            try:
                self._call(url, lambda: self._blob(url).delete(if_generation_match=int(version), retry=None))
            except gexc.NotFound:
                return False
            return True

        # After an ambiguous attempt a 412 cannot be ours (a landed delete would give 404): refused.
        return _with_retries(url, attempt, lambda: False, False)


def gcs_reason(e) -> str:
    """ "403 caller does not have ..." out of a google-api-core error, whose message also carries the
    request line and, for uploads, the raw JSON body."""
    text = getattr(e, "message", None) or str(e)
    found = re.search(r'"message":\s*"([^"]*)"', text)
    reason = found.group(1) if found else text.split(": ", 1)[-1]
    return f"{getattr(e, 'code', '')} {reason}".strip()


def _new_gcs_client(url: str):
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    if os.environ.get("STORAGE_EMULATOR_HOST"):
        return storage.Client()  # anonymous, pointed at the emulator by the environment
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError

    try:
        credentials, project = google.auth.default()
    except DefaultCredentialsError:
        logger.warning("%s: no Google credentials found; using anonymous access (writes will be refused)", url)
        return storage.Client(credentials=AnonymousCredentials(), project="<none>")
    return storage.Client(credentials=credentials, project=project)


class S3Backend:
    """S3 through a synchronous botocore client built from the settings of the s3fs filesystem that serves
    the URL (endpoint, keys, client and config kwargs), so ``s3://`` reaches the same store for plain and
    conditional I/O.

    Not s3fs's own aiobotocore client: aiohttp silently resends a PUT or DELETE once when a kept-alive
    connection drops (HTTP calls them idempotent; a conditional write is not), which turns a landed
    create into a 412 nobody can explain. botocore's urllib3 session never resends, and its own retries
    are off here (``total_max_attempts=1``), so ``_with_retries`` knows exactly which attempts may have landed.
    """

    name = "s3"

    def __init__(self, storage_options: dict | None = None):
        self._options = storage_options
        """None: the s3fs settings fsspec resolves for the URL; else a private s3fs with these options."""
        self._clients: dict[tuple, Any] = {}
        self._lock = threading.Lock()

    def client(self, url: str):
        """(s3fs filesystem, botocore client) for ``url``; one client per process and filesystem."""
        from marin.storage.paths import filesystem

        if self._options is None:
            fs, _ = filesystem(url)
        else:
            import s3fs

            fs = s3fs.S3FileSystem(**self._options)
        with self._lock:
            key = (os.getpid(), id(fs))
            if key not in self._clients:
                self._clients[key] = _new_s3_client(fs)
            return fs, self._clients[key]

    def call(self, url: str, method: str, **kwargs) -> dict:
        """Call one S3 API method once; translate errors into this module's vocabulary."""
        from botocore.exceptions import BotoCoreError, ClientError

        _, client = self.client(url)
        try:
            response = getattr(client, method)(**kwargs)
            if "Body" in response:
                with response["Body"] as body:
                    response["Data"] = body.read()
            return response
        except ClientError as e:
            translated = self._translate(url, e)
            if translated is e:
                raise
            raise translated from e
        except BotoCoreError as e:
            if _is_connection_error(e):  # a refused connect cannot have landed; anything later may have
                raise _Transient(e, maybe_applied=type(e).__name__ not in _NOT_SENT) from e
            raise

    def _translate(self, url: str, e) -> BaseException:
        error = e.response.get("Error", {})
        code = str(error.get("Code", ""))
        meta = e.response.get("ResponseMetadata", {})
        status = int(meta.get("HTTPStatusCode") or 0)
        if status == 412 or code == "PreconditionFailed":
            return _PreconditionFailed()
        if status == 409 and code == "ConditionalRequestConflict":  # a concurrent conditional write: ours did not land
            return _Transient(e, maybe_applied=False)
        if status in (403, 401) or code in ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
            return PermissionError(f"{url}: permission denied by S3: {code}: {error.get('Message', '')}")
        if status == 501 or code == "NotImplemented":
            return ConditionalWriteUnsupported(f"{url}: store does not implement conditional requests ({code})")
        if code == "NoSuchBucket":
            return FileNotFoundError(f"{url}: bucket does not exist")
        if code in ("NoSuchKey", "404") or status == 404:
            return FileNotFoundError(url)
        if status >= 500 or status in (408, 429) or code in ("SlowDown", "RequestTimeout"):
            return _Transient(e, maybe_applied=status != 429)
        return e

    def _put(self, url: str, data: bytes, **condition) -> VersionedBlob | None:
        _, bucket, key = split_bucket(url)

        def attempt():
            try:
                response = self.call(url, "put_object", Bucket=bucket, Key=key, Body=data, **condition)
            except FileNotFoundError:
                if "IfMatch" in condition:  # replacing an object that was deleted meanwhile
                    raise _PreconditionFailed() from None
                raise
            return VersionedBlob(data, response["ETag"])

        return _with_retries(url, attempt, lambda: _landed(self, url, data), None)

    def create_only(self, url: str, data: bytes) -> VersionedBlob | None:
        return self._put(url, data, IfNoneMatch="*")

    def replace(self, url: str, data: bytes, version: str) -> VersionedBlob | None:
        return self._put(url, data, IfMatch=version)

    def read(self, url: str) -> VersionedBlob | None:
        _, bucket, key = split_bucket(url)
        try:
            response = retrying(url, lambda: self.call(url, "get_object", Bucket=bucket, Key=key))
        except FileNotFoundError as e:
            if "bucket does not exist" in str(e):
                raise
            return None
        return VersionedBlob(response["Data"], response["ETag"])

    def delete(self, url: str, version: str) -> bool:
        _, bucket, key = split_bucket(url)
        try:  # a store that ignores If-Match on DELETE still gets the sequential check right
            if retrying(url, lambda: self.call(url, "head_object", Bucket=bucket, Key=key))["ETag"] != version:
                return False
        except FileNotFoundError:
            return False

        def attempt():
            try:
                self.call(url, "delete_object", Bucket=bucket, Key=key, IfMatch=version)
            except FileNotFoundError:
                return False
            return True

        return _with_retries(url, attempt, lambda: False, False)


def _new_s3_client(fs):
    import botocore.session
    from botocore.config import Config

    kwargs = dict(fs.client_kwargs)
    if fs.endpoint_url:
        kwargs.setdefault("endpoint_url", fs.endpoint_url)
    if fs.key:
        kwargs.update(aws_access_key_id=fs.key, aws_secret_access_key=fs.secret, aws_session_token=fs.token)
    config = {k: v for k, v in fs.config_kwargs.items() if k != "retries"}
    if fs.anon:
        from botocore import UNSIGNED

        config["signature_version"] = UNSIGNED
    return botocore.session.Session().create_client(
        "s3", config=Config(retries={"total_max_attempts": 1, "mode": "standard"}, **config), **kwargs
    )


_NOT_SENT = {"EndpointConnectionError", "ConnectTimeoutError"}
"""botocore errors raised before a request reached the server."""


def _is_connection_error(e: BaseException) -> bool:
    """Network-level failures (refused, reset, timed out) from requests, aiohttp, botocore or the OS."""
    names = {cls.__name__ for cls in type(e).__mro__}
    return bool(
        names
        & {
            "ConnectionError",
            "ConnectTimeout",
            "ReadTimeout",
            "Timeout",
            "TransportError",
            "ClientConnectionError",
            "ServerDisconnectedError",
            "EndpointConnectionError",
            "ConnectionClosedError",
            "ReadTimeoutError",
            "ConnectTimeoutError",
            "ChunkedEncodingError",
        }
    )


GCS = GcsBackend()
S3 = S3Backend()
