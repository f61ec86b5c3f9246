"""A loopback stand-in for the Hugging Face hub's file endpoints, so the real `huggingface_hub` client can
be tested offline (point it here with HF_ENDPOINT).

Serves ``HEAD``/``GET /{repo_id}/resolve/{revision}/{path}`` (with the ETag and commit headers the client
checks) and ``GET /api/models|datasets/{repo_id}/revision/{revision}`` listings, from a dict of files.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
from urllib.parse import unquote

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class HubStub:
    def __init__(self, repos: dict[str, dict[str, bytes]]):
        self.repos = repos
        self.requests: list[str] = []
        stub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_HEAD(self):
                self._serve(body=False)

            def do_GET(self):
                self._serve(body=True)

            def _serve(self, body: bool):
                stub.requests.append(f"{self.command} {self.path}")
                path = unquote(self.path.split("?", 1)[0]).lstrip("/")
                if path.startswith("api/"):
                    return self._api(path)
                for prefix in ("datasets/", ""):
                    if not path.startswith(prefix):
                        continue
                    rest = path[len(prefix):]
                    if "/resolve/" not in rest:
                        continue
                    repo, tail = rest.split("/resolve/", 1)
                    _revision, _, filename = tail.partition("/")
                    data = stub.repos.get(repo, {}).get(filename)
                    if data is not None:
                        etag = hashlib.sha256(data).hexdigest()
                        self.send_response(200)
                        self.send_header("Content-Length", str(len(data)))
                        self.send_header("ETag", f'"{etag}"')
                        self.send_header("X-Repo-Commit", COMMIT)
                        self.end_headers()
                        if body:
                            self.wfile.write(data)
                        return
                self.send_response(404)
                self.send_header("X-Error-Code", "EntryNotFound")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def _api(self, path: str):
                parts = path.split("/")  # api/{models|datasets}/{owner}/{name}/revision/{rev}
                repo = "/".join(parts[2:4])
                files = stub.repos.get(repo)
                if files is None:
                    self.send_response(404)
                    self.send_header("X-Error-Code", "RepositoryNotFound")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                payload = json.dumps({"id": repo, "sha": COMMIT,
                                      "siblings": [{"rfilename": f, "size": len(d)} for f, d in files.items()]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> HubStub:
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
