"""Which of the browser's views a step directory has, from one listing of it, so pages link only to views
that exist (a step without ``metrics.jsonl`` gets no "metrics" link leading to an empty page).

    files = step_files("/lab/checkpoints/tiny-847c8c77")
    files.metrics, files.results, files.fit   # True, True, False
"""

from __future__ import annotations

import dataclasses

from marin.storage import filesystem

METRICS_FILE = "metrics.jsonl"
RESULTS_FILE = "results.json"
FIT_FILE = "fit.json"
SAMPLES_FILE = "samples.jsonl"
"""Written by a samples step (``marin.evaluation.samples``; the browser imports no inference code)."""


@dataclasses.dataclass(frozen=True)
class StepFiles:
    exists: bool = False
    """The directory exists (a step that never started has none: no link to it)."""
    metrics: bool = False
    """``metrics.jsonl``: training curves on ``/training``, and the step can be compared on ``/compare/runs``."""
    results: bool = False
    """``results.json``: evaluation results on ``/training``."""
    fit: bool = False
    """``fit.json``: a scaling-ladder analysis on ``/fit``."""
    samples: bool = False
    """``samples.jsonl``: text sampled from a checkpoint, on ``/training`` (its own and its run's page)."""

    @property
    def training(self) -> bool:
        """Whether ``/training`` has anything to show."""
        return self.metrics or self.results or self.samples


def files_from_names(names: set[str]) -> StepFiles:
    return StepFiles(True, METRICS_FILE in names, RESULTS_FILE in names, FIT_FILE in names, SAMPLES_FILE in names)


def step_files(path: str) -> StepFiles:
    """One ``ls`` of ``path``; an absent or unreadable directory has no views."""
    fs, p = filesystem(path)
    try:
        names = {n.rstrip("/").rsplit("/", 1)[-1] for n in fs.ls(p, detail=False)}
    except (OSError, ValueError):
        return StepFiles()
    return files_from_names(names)
