"""The download step: copy a data set from the Hugging Face hub or any fsspec URL under the step's output.

    raw = ExecutorStep(name="raw/tinystories", fn=download_dataset, config=DownloadConfig(
        source="hf://datasets/roneneldan/TinyStories", revision=versioned("f54c09f"),
        patterns=versioned(("*.txt",)), output_path=this_output_path()))

Files keep their relative paths. Each file is one Ray task (``marin.parallel``); a file already
downloaded and verified by an earlier run is skipped, a partially downloaded one resumes
(``marin.download.fetch``). ``provenance.json`` is written last::

    {"source": "hf://datasets/...", "license": ..., "revision": "<requested>", "resolved_revision": "<commit sha>",
     "files": [{"path", "url", "size", "sha256", "git_sha1"?}], "total_bytes": ..., "finished_at": ...}
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
from collections.abc import Mapping

from marin.download.fetch import fetch_file
from marin.download.sources import Listing, list_hub_files, list_url_files
from marin.parallel import run_tasks
from marin.storage import join, write_atomic
from marin.validation import check, concrete

logger = logging.getLogger(__name__)
PROVENANCE = "provenance.json"


@dataclasses.dataclass(frozen=True, kw_only=True)
class DownloadConfig:
    source: str
    """``hf://datasets/<owner>/<name>`` (or ``hf://<owner>/<name>`` for a model repo), or any fsspec URL:
    a file, a directory (copied recursively) or a glob. http(s) directories cannot be listed: name the
    files in ``files``."""
    output_path: str
    revision: str | None = None
    """Hub only, required: a commit sha (best), tag or branch; provenance records the resolved commit."""
    patterns: tuple[str, ...] = ()
    """fnmatch globs over relative paths (e.g. ``"data/train-*.parquet"``); empty selects everything."""
    files: tuple[str, ...] = ()
    """Exact relative paths to fetch instead of listing the source."""
    expected_sha256: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Relative path -> SHA-256 the file must have (pins sources that publish no checksum)."""
    chunk_bytes: int = 8 << 20
    max_retries: int = 3
    """Attempts per file after the first; each resumes where the previous one stopped."""
    max_workers: int | None = None
    use_ray: bool = True
    license: str | None = None
    """The data's licence in a line (recorded in ``provenance.json``: a data set travels with its terms)."""

    def __post_init__(self):
        name = "DownloadConfig"
        known, source = concrete(self.source)
        check(name, "source", self.source, lambda v: isinstance(v, str) and v != "", "a URL")
        if known and source.startswith("hf://"):
            check(
                name,
                "revision",
                self.revision,
                lambda v: isinstance(v, str) and v != "",
                "a commit, tag or branch for hub sources (pin the data)",
            )
        elif known:
            check(name, "revision", self.revision, lambda v: v is None, "None for non-hub sources")
        check(name, "patterns", self.patterns, lambda v: isinstance(v, (tuple, list)), "a tuple of globs")
        check(name, "files", self.files, lambda v: isinstance(v, (tuple, list)), "a tuple of relative paths")
        check(name, "chunk_bytes", self.chunk_bytes, lambda v: v >= 1024, ">= 1024")
        check(name, "max_retries", self.max_retries, lambda v: v >= 0, ">= 0")
        check(name, "max_workers", self.max_workers, lambda v: v is None or v >= 1, ">= 1 or None")


def list_source(config: DownloadConfig) -> Listing:
    if config.source.startswith("hf://"):
        return list_hub_files(config.source, config.revision, tuple(config.patterns), tuple(config.files))
    return list_url_files(config.source, tuple(config.patterns), tuple(config.files))


def download_dataset(config: DownloadConfig) -> dict:
    """Fetch every selected file of ``config.source`` into ``config.output_path``; returns the provenance."""
    listing = list_source(config)
    if not listing.files:
        raise FileNotFoundError(f"DownloadConfig: no files at {config.source} match patterns={config.patterns}")
    unknown = sorted(set(config.expected_sha256) - {f.path for f in listing.files})
    if unknown:
        raise ValueError(f"DownloadConfig.expected_sha256 names files that are not downloaded: {unknown}")
    logger.info("download: %d files from %s", len(listing.files), config.source)
    args = [
        (f, config.output_path, config.chunk_bytes, config.max_retries, config.expected_sha256.get(f.path))
        for f in listing.files
    ]
    rows = run_tasks(fetch_file, args, use_ray=config.use_ray, max_workers=config.max_workers, label="download")
    skipped = sum(r.pop("skipped") for r in rows)
    provenance = {
        "source": config.source,
        "license": config.license,
        "revision": config.revision,
        "resolved_revision": listing.revision,
        "patterns": list(config.patterns),
        "files": rows,
        "total_bytes": sum(r["size"] for r in rows),
        "finished_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    write_atomic(join(config.output_path, PROVENANCE), json.dumps(provenance, indent=2))
    logger.info("download: %d files, %d bytes (%d already present)", len(rows), provenance["total_bytes"], skipped)
    return provenance
