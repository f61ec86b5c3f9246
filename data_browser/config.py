"""The browser's configuration: command-line flags or a YAML file (draccus), never both edited by hand."""

from __future__ import annotations

import dataclasses

from data_browser.access import normalize_root


@dataclasses.dataclass(frozen=True)
class BrowserConfig:
    roots: list[str] = dataclasses.field(default_factory=lambda: ["./local_store"])
    """Prefixes to serve (local paths, gs://, s3://). Nothing outside them is ever shown."""
    host: str = "127.0.0.1"
    port: int = 5000
    records_per_page: int = 100
    max_line_bytes: int = 1_000_000
    """A JSONL line longer than this is shown cut (and flagged)."""
    max_view_bytes: int = 1_000_000
    """Text files are previewed up to this many bytes."""
    max_search_records: int = 200_000
    """A search (or an id lookup for side-by-side view) scans at most this many records."""
    max_json_bytes: int = 16_000_000
    """Experiment records, ``.executor_info``, ``results.json`` and ``tracker.json`` larger than this are
    refused with a message instead of being read."""
    max_metrics_bytes: int = 32_000_000
    """At most this much of a ``metrics.jsonl`` is read; a larger log is sampled in evenly spaced slices."""
    max_metric_points: int = 10_000
    """Each training curve is thinned to about this many points."""
    collapse_chars: int = 600
    """Text fields longer than this are collapsed behind a 'show all' toggle."""
    github_repo_url: str | None = None
    """e.g. https://github.com/org/lab; default: each experiment's recorded git remote."""

    def __post_init__(self):
        if not self.roots:
            raise ValueError("BrowserConfig.roots must name at least one prefix")
        for field in (
            "records_per_page",
            "max_line_bytes",
            "max_view_bytes",
            "max_search_records",
            "max_json_bytes",
            "max_metrics_bytes",
            "max_metric_points",
        ):
            if getattr(self, field) <= 0:
                raise ValueError(f"BrowserConfig.{field} must be > 0, got {getattr(self, field)}")

    def normalized_roots(self) -> list[str]:
        return [normalize_root(r) for r in self.roots]
