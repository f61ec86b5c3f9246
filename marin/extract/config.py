"""Configuration of the extract step (raw HTML -> text).

As an experiment declares it (``experiments.defaults.default_extract`` does this)::

    ExtractConfig(
        input_path=output_path_of(download, "web"),        # WARC files, record files with "html", .html files
        output_path=this_output_path(),
        extractor=versioned(ExtractorConfig(name="trafilatura")),
        min_chars=versioned(50),
    )

``max_workers`` and ``use_ray`` only change how the work is spread, never the result.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from marin.identity import runtime_field
from marin.validation import check

EXTRACTOR_NAMES = ("resiliparse", "trafilatura")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExtractorConfig:
    """Which extractor, and how it formats its output."""

    name: str = "trafilatura"
    """``trafilatura`` or ``resiliparse`` (``marin.extract.extractors``). trafilatura is the default: the
    best F1 on WCXB and 0.99x the best on news424, the real-page benchmarks measured (docs/data_quality.md);
    resiliparse is 8-12x faster at about 0.95x its F1, the trade a DCLM-scale run may choose to make."""
    markdown: bool = False
    """Keep structure as Markdown: ``#`` headings, ``-``/``1.`` list items, fenced code blocks. Off by default:
    the page's own text, one block per line, with no markup the page did not contain."""
    main_content: bool = True
    """resiliparse: keep only what its main-content heuristics call the article (trafilatura always does)."""
    comments: bool = False
    """Keep comment sections."""
    fast: bool = False
    """trafilatura: skip its fallback extractors (faster, a little less recall)."""

    def __post_init__(self):
        check("ExtractorConfig", "name", self.name, lambda v: v in EXTRACTOR_NAMES, f"one of {EXTRACTOR_NAMES}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExtractConfig:
    input_path: str
    """A file, a directory (searched recursively) or a glob of WARC (.warc, .warc.gz), record files
    (JSONL plain/.gz/.zst, Parquet) with an HTML field, or .html/.htm files."""
    output_path: str
    extractor: ExtractorConfig = ExtractorConfig()
    min_chars: int = 50
    """Extracted texts shorter than this (after stripping) are skipped with reason ``too_short``."""
    html_field: str = "html"
    """Record-file inputs: the field holding the page's HTML."""
    source: str | None = None
    """Written as each document's ``source``; None: the input file's directory relative to the input root
    ("web" for files at the root)."""
    on_error: Literal["raise", "skip"] = "raise"
    """Malformed input records (bad JSON, no HTML field): fail naming file and line, or skip and count."""
    max_workers: int | None = runtime_field(None)
    """Ray tasks in flight at once (None: as many as the cluster has CPUs). No effect on the result."""
    use_ray: bool = runtime_field(True)
    """False runs every shard in this process, one after another (notebooks, debugging)."""

    def __post_init__(self):
        check("ExtractConfig", "min_chars", self.min_chars, lambda v: v >= 0, ">= 0")
        check("ExtractConfig", "on_error", self.on_error, lambda v: v in ("raise", "skip"), "'raise' or 'skip'")
        check("ExtractConfig", "max_workers", self.max_workers, lambda v: v is None or v >= 1, ">= 1 or None")
