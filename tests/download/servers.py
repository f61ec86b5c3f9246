"""Loopback HTTP servers for download tests: plain files with Range support, and a stand-in for the
Hugging Face hub endpoints the client calls (repo info with file metadata, and ``resolve`` downloads of
data set and model repos, as ``snapshot``/``hf_hub_download`` request them).

Every request is logged as (method, path, Range header) so tests can see what the client asked for.
``cut_after[path] = n`` makes the next GET of ``path`` send its headers for the full length but stop
after ``n`` bytes and drop the connection, as a flaky network would.
"""

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse


class FileServer:
    def __init__(self, files: dict[str, bytes], hub: dict | None = None, honor_range: bool = True):
        self.files = dict(files)
        self.hub = hub or {}
        self.honor_range = honor_range
        self.cut_after: dict[str, int] = {}
        self.tampered: dict[str, bytes] = {}  # served instead of ``files`` (whose metadata the hub API reports)
        self.log: list[tuple[str, str, str | None]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_HEAD(self):
                self._serve(body=False)

            def do_GET(self):
                self._serve(body=True)

            def _serve(self, body):
                path = unquote(urlparse(self.path).path)
                server.log.append((self.command, path, self.headers.get("Range")))
                if path.startswith("/api/"):
                    return self._api(path)
                repo_spec = None
                for repo, spec in server.hub.items():
                    # Data sets live under /datasets/<repo>; model repos ("kind": "model") at /<repo>.
                    base = f"/{repo}" if spec.get("kind") == "model" else f"/datasets/{repo}"
                    for ref in (spec["sha"], *spec.get("refs", ())):
                        prefix = f"{base}/resolve/{ref}/"
                        if path.startswith(prefix):
                            path, repo_spec = "/" + path[len(prefix) :], spec
                            break
                    if repo_spec is not None:
                        break
                data = server.tampered.get(path, server.files.get(path))
                if data is None:
                    return self._send(404, b"not found", body)
                start = 0
                rng = self.headers.get("Range")
                if rng and server.honor_range:
                    start = int(rng.split("=")[1].split("-")[0])
                    if start >= len(data):
                        return self._send(416, b"", body, {"Content-Range": f"bytes */{len(data)}"})
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                else:
                    self.send_response(200)
                self.send_header("Content-Length", str(len(data) - start))
                self.send_header("Accept-Ranges", "bytes")
                if repo_spec is not None:  # what hf_hub_download checks before it downloads
                    self.send_header("X-Repo-Commit", repo_spec["sha"])
                    self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
                self.end_headers()
                if not body:
                    return
                cut = server.cut_after.pop(path, None)
                if cut is not None:
                    self.wfile.write(data[start : start + cut])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                self.wfile.write(data[start:])

            def _api(self, path):
                # /api/datasets/<owner>/<name>/revision/<rev>
                parts = path.split("/")
                repo, rev = "/".join(parts[3:5]), parts[6] if len(parts) > 6 else "main"
                spec = server.hub.get(repo)
                if spec is None or rev not in (spec["sha"], *spec.get("refs", ())):
                    return self._send(
                        404,
                        json.dumps({"error": "Repository not found"}).encode(),
                        True,
                        {"Content-Type": "application/json", "X-Error-Code": "RepoNotFound"},
                    )
                siblings = []
                for name in spec["files"]:
                    data = server.files["/" + name]
                    sib = {"rfilename": name, "size": len(data)}
                    if name in spec.get("lfs", ()):
                        sib["lfs"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
                        sib["blobId"] = hashlib.sha1(b"pointer").hexdigest()
                    else:
                        sib["blobId"] = hashlib.sha1(f"blob {len(data)}\0".encode() + data).hexdigest()
                    siblings.append(sib)
                self._send(
                    200,
                    json.dumps({"id": repo, "sha": spec["sha"], "siblings": siblings}).encode(),
                    True,
                    {"Content-Type": "application/json"},
                )

            def _send(self, code, payload, body, headers=None):
                self.send_response(code)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if body:
                    self.wfile.write(payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()

    def gets(self, path):
        return [r for m, p, r in self.log if m == "GET" and p.endswith(path)]
