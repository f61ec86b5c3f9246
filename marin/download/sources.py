"""What to download: list the files of a Hugging Face repo at a pinned revision, or under any fsspec URL.

    list_hub_files("hf://datasets/allenai/c4", revision="1588ec4", patterns=("en/c4-train.0000*",))
    list_url_files("https://example.org/data/", files=("a.jsonl.gz", "b.jsonl.gz"))  # http: name files
    list_url_files("gs://bucket/raw/", patterns=("*.parquet",))

Each file becomes a ``RemoteFile`` with what is known in advance to verify it: the size, and for hub
files the checksum the hub publishes (SHA-256 of LFS files, the git blob SHA-1 of the others). The hub is
reached through ``huggingface_hub`` at ``HF_ENDPOINT`` (read at call time, so tests and mirrors can point
it elsewhere); a branch or tag is resolved to its commit once, and every file is fetched at that commit.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import logging
import os
from urllib.parse import quote

from marin.storage import is_url, scheme_of

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class RemoteFile:
    path: str
    """Relative path; the file lands at ``<output_path>/<path>``."""
    url: str
    kind: str
    """"http" (streamed with HTTP range requests), "hub" (the same, with hub auth headers) or "fsspec"."""
    size: int | None = None
    sha256: str | None = None
    git_sha1: str | None = None


@dataclasses.dataclass(frozen=True)
class Listing:
    files: list[RemoteFile]
    revision: str | None = None
    """The commit a hub revision resolved to."""


def hub_endpoint() -> str:
    from huggingface_hub import constants

    return os.environ.get("HF_ENDPOINT", constants.ENDPOINT).rstrip("/")


def parse_hub_source(source: str) -> tuple[str, str]:
    """``hf://datasets/<owner>/<name>`` -> ("dataset", repo id); ``hf://<owner>/<name>`` -> ("model", ...)."""
    rest = source[len("hf://") :].strip("/")
    repo_type = "model"
    for prefix, kind in (("datasets/", "dataset"), ("models/", "model")):
        if rest.startswith(prefix):
            rest, repo_type = rest[len(prefix) :], kind
    if rest.count("/") > 1 or not rest:
        raise ValueError(f"DownloadConfig.source: expected hf://datasets/<owner>/<name>, got {source!r}")
    return repo_type, rest


def selected(path: str, patterns: tuple[str, ...], files: tuple[str, ...]) -> bool:
    if files:
        return path in files
    return not patterns or any(fnmatch.fnmatchcase(path, p) for p in patterns)


def list_hub_files(source: str, revision: str, patterns: tuple[str, ...] = (), files: tuple[str, ...] = ()) -> Listing:
    from huggingface_hub import HfApi, hf_hub_url

    repo_type, repo_id = parse_hub_source(source)
    endpoint = hub_endpoint()
    api = HfApi(endpoint=endpoint)
    info = (api.dataset_info if repo_type == "dataset" else api.model_info)(
        repo_id, revision=revision, files_metadata=True
    )
    if revision != info.sha:
        logger.info("hub revision %r of %s resolved to commit %s", revision, repo_id, info.sha)
    out = []
    for sib in info.siblings or []:
        if not selected(sib.rfilename, patterns, files):
            continue
        url = hf_hub_url(repo_id, sib.rfilename, repo_type=repo_type, revision=info.sha, endpoint=endpoint)
        out.append(
            RemoteFile(
                path=sib.rfilename,
                url=url,
                kind="hub",
                size=sib.size,
                sha256=sib.lfs.sha256 if sib.lfs else None,
                git_sha1=None if sib.lfs else sib.blob_id,
            )
        )
    _check_requested(source, out, files)
    return Listing(sorted(out, key=lambda f: f.path), revision=info.sha)


def list_url_files(source: str, patterns: tuple[str, ...] = (), files: tuple[str, ...] = ()) -> Listing:
    """Files under an fsspec URL. ``files`` names them explicitly (needed for http(s) servers that do not
    list directories); otherwise a directory is searched recursively, a glob expanded, a file taken as is."""
    from marin.storage import filesystem, join
    from marin.storage.fence import METADATA_PREFIX

    is_http = source.startswith(("http://", "https://"))
    kind = "http" if is_http else "fsspec"
    if files:
        # http(s): the path is percent-encoded in the URL ("Austen, Jane/Emma.txt" -> "Austen%2C%20Jane/Emma.txt")
        out = [RemoteFile(path=f, url=join(source, quote(f) if is_http else f), kind=kind) for f in files]
        return Listing(_with_sizes(out))
    if is_http:
        if source.endswith("/") or patterns:
            raise ValueError(
                f"DownloadConfig: an http(s) source cannot be listed; name the files with "
                f"DownloadConfig.files, or give a file URL (got source={source!r})"
            )
        return Listing([RemoteFile(path=source.rsplit("/", 1)[-1], url=source, kind=kind)])
    fs, root = filesystem(source)
    if any(ch in root for ch in "*?["):
        found = fs.glob(root)
        base = root[: min(root.find(ch) for ch in "*?[" if ch in root)].rpartition("/")[0]
    elif fs.isdir(root):
        found, base = fs.find(root), root.rstrip("/")
    elif fs.exists(root):
        found, base = [root], root.rpartition("/")[0]
    else:
        raise FileNotFoundError(f"DownloadConfig.source: nothing at {source}")
    out = []
    for path in sorted(found):
        rel = path[len(base) :].lstrip("/") if path.startswith(base) else path.rsplit("/", 1)[-1]
        url = f"{scheme_of(source)}://{path}" if is_url(source) else path
        # A step's executor files (.executor_status, _info, _lease, _manifest) describe that step, not data:
        # copied, they would overwrite this step's own.
        if selected(rel, patterns, ()) and not any(part.startswith(METADATA_PREFIX) for part in rel.split("/")):
            out.append(RemoteFile(path=rel, url=url, kind=kind))
    return Listing(_with_sizes(out))


def _with_sizes(files: list[RemoteFile]) -> list[RemoteFile]:
    from marin.storage import filesystem

    out = []
    for f in files:
        if f.kind == "http":
            out.append(f)  # the size comes with the response (Content-Length / Content-Range)
            continue
        fs, path = filesystem(f.url)
        try:
            size = fs.info(path).get("size")
        except FileNotFoundError:
            raise FileNotFoundError(f"DownloadConfig: source file {f.url} does not exist") from None
        out.append(dataclasses.replace(f, size=size))
    return out


def _check_requested(source: str, found: list[RemoteFile], files: tuple[str, ...]) -> None:
    missing = sorted(set(files) - {f.path for f in found})
    if missing:
        raise FileNotFoundError(f"DownloadConfig.files: not in {source}: {', '.join(missing)}")
