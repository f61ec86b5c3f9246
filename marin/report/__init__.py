"""Experiment reports: the Markdown body of an experiment's GitHub issue, written from a prefix's outputs.

    python -m marin.report experiments/exp42_wsd_vs_cosine.py --prefix gs://bucket/lab --out reports/exp42.md

    files = write_report("experiments/quickstart.py", "./local_store", "reports/quickstart.md")
    files.markdown, files.image   # reports/quickstart.md, reports/quickstart_loss.png

Reading (``collect``), writing Markdown (``render``), plotting (``plot``) and posting (``publish``) are
separate so a test can check each against files on disk, and the data browser's contract (the files under
the prefix) is the only thing they share with the executor.
"""

from __future__ import annotations

import dataclasses
import logging
import os

from marin.report.collect import ExperimentReport, ReportError, StepReport, collect, find_record
from marin.report.leaderboard import Board, LeaderboardEntry, collect_boards
from marin.report.plot import plot_curves
from marin.report.publish import PostOutcome, github_repo, post_issue
from marin.report.render import Links, issue_number, leaderboard_markdown, render

logger = logging.getLogger(__name__)

__all__ = [
    "Board",
    "ExperimentReport",
    "LeaderboardEntry",
    "Links",
    "PostOutcome",
    "ReportError",
    "ReportFiles",
    "StepReport",
    "collect",
    "collect_boards",
    "find_record",
    "post_report",
    "render",
    "write_leaderboard",
    "write_report",
]


@dataclasses.dataclass(frozen=True)
class ReportFiles:
    markdown: str
    image: str | None
    """The loss-curve PNG beside the Markdown; None when no step logged a training loss."""
    report: ExperimentReport
    issue: int | None
    """The experiment's issue number, from ``exp<N>_`` in the file name or an issue link in its docstring."""


def write_report(experiment_file: str, prefix: str, out: str | None = None, links: Links = Links()) -> ReportFiles:
    """Write ``out`` (default ``reports/<script>.md``) and ``<out stem>_loss.png`` beside it; local paths."""
    record_url, record = find_record(prefix, experiment_file)
    report = collect(record_url, record, experiment_file if os.path.exists(experiment_file) else None)
    out = out or os.path.join("reports", f"{record.get('script', 'experiment')}.md")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    image = os.path.splitext(out)[0] + "_loss.png"
    if not plot_curves(report.steps, image):
        image = None
    body = render(report, links, image=os.path.basename(image) if image else None)
    with open(out, "w", encoding="utf-8") as f:
        f.write(body)
    logger.info("wrote %s from %s (%d steps)", out, record_url, len(report.steps))
    return ReportFiles(out, image, report, issue_number(record.get("caller_file"), report.docstring))


def write_leaderboard(
    prefix: str, experiments: list[str] | None = None, out: str | None = None, links: Links = Links()
) -> str:
    """Write ``out`` (default ``reports/leaderboard.md``): the boards of ``experiments`` (default: all under
    ``prefix``, see ``marin.report.leaderboard``); returns the path."""
    boards = collect_boards(prefix, experiments or None)
    out = out or os.path.join("reports", "leaderboard.md")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        f.write(leaderboard_markdown(boards, links))
    logger.info("wrote %s: %d board(s)", out, len(boards))
    return out


def post_report(files: ReportFiles, links: Links, issue: int | None = None) -> PostOutcome:
    """Create or update the experiment's issue with ``gh`` (see ``marin.report.publish``)."""
    record = files.report.record
    title = f"{record.get('script')}: {record.get('description') or 'experiment'}"
    return post_issue(
        files.markdown,
        title=title,
        issue=issue if issue is not None else files.issue,
        repo=github_repo(links.repo(record)),
        image=files.image,
    )
