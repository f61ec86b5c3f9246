"""The committed output of a step: what its directory held when SUCCESS was written.

Just before writing SUCCESS, the lease holder lists the output directory and writes
``.executor_manifest``:

    {"format_version": 1, "owner": "host:123:9f2c", "attempt": "5d1e...", "time": 1763780004.6,
     "files": {"result.json": {"size": 81, "version": "1763780004123456"}, "ckpt/step-40/params": {...}}}

``version`` is the store's own token for that exact object (GCS generation, S3 ETag, local mtime);
``checksum``, where the store's listing gives one for free (GCS: CRC32C), is the content's. A file matches
its entry when the sizes agree and either the versions or the checksums do: a bucket-to-bucket copy gives
every GCS object a new generation but keeps its CRC32C, so a copied store verifies as committed. (An S3
copy keeps a single-part object's ETag, its MD5; a local copy keeps mtimes with ``cp -a``.)
The manifest is the answer to a write that lands late: a task paused with a write already in flight
(past its fence check, ``marin.execution.fence``) can resume after a new holder committed. Before a step
reads a dependency, the executor checks the dependency against its manifest (``verify_output``):

- a file the manifest does not list (a zombie's new file, a temp file of a killed task) is deleted;
- a listed file that changed or vanished is an error naming the file: the step's output is no longer the
  one that was committed, and no step reads it.

Directories written before manifests existed have none and are read as they are.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from typing import Any

from marin.storage import delete, filesystem, join, read_bytes, write_atomic
from marin.storage.fence import METADATA_PREFIX

logger = logging.getLogger(__name__)

MANIFEST_FILE = ".executor_manifest"
MANIFEST_FORMAT_VERSION = 1


class OutputChanged(RuntimeError):
    """A committed step output no longer matches its manifest."""


def list_output(output_path: str) -> dict[str, dict[str, Any]]:
    """Every file under ``output_path`` except the executor's own, as {relative path: {size, version}}."""
    fs, root = filesystem(output_path)
    root = root.rstrip("/")
    fs.invalidate_cache(root)  # gcsfs/s3fs cache listings per process: a manifest must see the store as it is
    try:
        found = fs.find(root, detail=True)
    except FileNotFoundError:
        return {}
    files = {}
    for path, info in found.items():
        if info.get("type") == "directory":
            continue
        relative = path[len(root) :].lstrip("/")
        if not relative or relative.split("/", 1)[0].startswith(METADATA_PREFIX):
            continue
        entry = {"size": info.get("size"), "version": _version(info)}
        if info.get("crc32c"):
            entry["checksum"] = f"crc32c:{info['crc32c']}"
        files[relative] = entry
    return files


def _version(info: dict[str, Any]) -> str:
    for key in ("generation", "ETag", "etag", "mtime"):
        if info.get(key) is not None:
            return str(info[key])
    return ""


def _same(now: dict[str, Any], committed: dict[str, Any]) -> bool:
    """Whether a file as listed now is the one its manifest entry recorded (see the module docstring)."""
    if now.get("size") != committed.get("size"):
        return False
    if now.get("version") == committed.get("version"):
        return True
    return now.get("checksum") is not None and now.get("checksum") == committed.get("checksum")


def write_manifest(output_path: str, *, owner: str, attempt: str) -> dict[str, Any]:
    doc = {
        "format_version": MANIFEST_FORMAT_VERSION,
        "owner": owner,
        "attempt": attempt,
        "time": time.time(),
        "files": list_output(output_path),
    }
    write_atomic(join(output_path, MANIFEST_FILE), json.dumps(doc, sort_keys=True))
    return doc


def read_manifest(output_path: str) -> dict[str, Any] | None:
    url = join(output_path, MANIFEST_FILE)
    try:
        doc = json.loads(read_bytes(url))
    except FileNotFoundError:
        return None
    except ValueError as e:
        raise OutputChanged(
            f"{url}: not a manifest ({e}); inspect the step's output, then delete its directory to rerun it"
        ) from None
    return doc


@dataclasses.dataclass(frozen=True)
class OutputCheck:
    extra: list[str]
    """Files not in the manifest (removed when ``clean``)."""
    changed: list[str]
    """Files whose size or version differs from the manifest's."""
    missing: list[str]


def verify_output(output_path: str, *, clean: bool = True) -> OutputCheck | None:
    """Compare ``output_path`` with its manifest; None if it has none (written before manifests existed).

    With ``clean``, files the manifest does not list are deleted. Raises ``OutputChanged`` if a listed
    file changed or vanished.
    """
    manifest = read_manifest(output_path)
    if manifest is None:
        return None
    committed = manifest["files"]
    now = list_output(output_path)
    check = OutputCheck(
        extra=sorted(set(now) - set(committed)),
        changed=sorted(f for f in set(now) & set(committed) if not _same(now[f], committed[f])),
        missing=sorted(set(committed) - set(now)),
    )
    if clean:
        for relative in check.extra:
            logger.warning(
                "%s: removing %s, written after the step was committed (a lost lease holder's late "
                "write or a killed task's temp file)",
                output_path,
                relative,
            )
            delete(join(output_path, relative))
    if check.changed or check.missing:
        raise OutputChanged(
            f"{output_path}: files changed after the step was committed: changed {check.changed}, missing "
            f"{check.missing} (compared with {MANIFEST_FILE}, attempt {manifest.get('attempt')}); delete the "
            "directory to rerun the step"
        )
    return check
