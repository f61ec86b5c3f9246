"""Everything a report says, read from the files the executor and the steps wrote under a prefix.

    record_url, record = find_record("gs://bucket/lab", "experiments/exp42_wsd_vs_cosine.py")
    report = collect(record_url, record)
    report.steps[0].state, report.steps[0].duration, report.steps[0].final_loss, report.steps[0].results

The report never imports or runs the experiment file: a file may train for weeks when executed, and the
outputs under the prefix (not today's version of the code) are what the issue has to describe. So the
record is found by the ``caller_file`` the executor stored in it, and everything else comes from:

- ``<prefix>/experiments/<script>-<hash>.json``: steps, git commit, remote, dirty flag, caller file;
- ``<step>/.executor_status``: state history (durations, failure messages);
- ``<step>/metrics.jsonl``: training curves (``train/loss``, ``eval/<set>/bpb``);
- ``<step>/results.json``: eval results (``validation`` and ``tasks``, see ``marin.evaluation.step``);
- ``<step>/fit.json``: a scaling ladder's fit and prediction (``marin.scaling.step``);
- ``<step>/tracker.json``: ``{"wandb_url": ...}`` when the run was tracked.

A step whose files are missing or damaged is still reported (with what could be read), never dropped:
an issue that silently omits the broken step is worse than one that says it is broken.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from typing import Any

from marin.execution.status import state_summary
from marin.scaling.record import FIT_FILE, FitRecord
from marin.storage import exists, glob, join, read_text

logger = logging.getLogger(__name__)


class ReportError(RuntimeError):
    """The report cannot be made (no matching record); the message says what exists instead."""


@dataclasses.dataclass
class Curve:
    """One metric over training steps (``step`` counts completed optimizer steps, as the trainer logs it)."""

    steps: list[float]
    values: list[float]

    @property
    def final(self) -> float:
        return self.values[-1]


@dataclasses.dataclass
class StepReport:
    name: str
    identity: str
    output_path: str
    description: str | None
    state: str | None
    """Last state in ``.executor_status``; None if the step never started, ``UNREADABLE`` if damaged."""
    message: str | None
    started: float | None
    """When the last RUNNING began (a rerun after a failure measures the rerun, not the first try)."""
    finished: float | None
    curves: dict[str, Curve] = dataclasses.field(default_factory=dict)
    """``metrics.jsonl`` columns by metric name (``train/loss``, ``eval/<set>/bpb``, ...)."""
    results: dict[str, Any] | None = None
    """``results.json`` of an eval step."""
    fit: FitRecord | None = None
    """``fit.json`` of a scaling ladder's analysis step (``marin.scaling.record``); damaged parts left empty."""
    fit_errors: dict[str, str] = dataclasses.field(default_factory=dict)
    """What is wrong with each damaged part of ``fit.json`` (``marin.scaling.record.FitRecord.from_json``)."""
    wandb_url: str | None = None

    @property
    def duration(self) -> float | None:
        if self.started is None or self.finished is None:
            return None
        return self.finished - self.started

    @property
    def final_loss(self) -> float | None:
        curve = self.curves.get("train/loss")
        return curve.final if curve and curve.values else None

    @property
    def final_step(self) -> int | None:
        curve = self.curves.get("train/loss")
        return int(curve.steps[-1]) if curve and curve.steps else None

    def eval_bpb(self) -> dict[str, float]:
        """Final ``eval/<set>/bpb`` logged during training, by validation set."""
        out = {}
        for key, curve in self.curves.items():
            parts = key.split("/")
            if len(parts) == 3 and parts[0] == "eval" and parts[2] == "bpb" and curve.values:
                out[parts[1]] = curve.final
        return out


@dataclasses.dataclass
class ExperimentReport:
    record_url: str
    record: dict[str, Any]
    steps: list[StepReport]
    docstring: str | None
    """The experiment file's module docstring (read as text, never imported), if the file is at hand."""

    @property
    def failures(self) -> list[StepReport]:
        return [s for s in self.steps if s.state in ("FAILED", "DEP_FAILED", "UNREADABLE")]


def repo_relative(path: str) -> str | None:
    """``path`` relative to the root of the git checkout holding it (None outside a checkout)."""
    import subprocess

    try:
        out = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"],
            cwd=os.path.dirname(os.path.realpath(path)),
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    return os.path.relpath(os.path.realpath(path), os.path.realpath(out.stdout.strip()))


def same_file(recorded: str | None, given: str) -> bool:
    """Whether a record's ``caller_file`` names the file the user gave.

    Records hold the path relative to the repository root when the experiment ran in a git checkout
    (``experiments/quickstart.py``), else an absolute path: on a cluster, the Ray job's unpacked working
    directory (``/tmp/ray/.../_ray_pkg_<hash>/experiments/quickstart.py``). The user may type the file
    relative to the repo root or to the current directory, or absolutely.
    """
    if not recorded:
        return False
    recorded = os.path.normpath(recorded)
    given_abs = os.path.realpath(given)
    if recorded == given_abs or (not os.path.isabs(recorded) and given_abs.endswith(os.sep + recorded)):
        return True
    forms = {os.path.normpath(given)} if not os.path.isabs(given) else set()
    forms.add(repo_relative(given) if os.path.exists(given) else None)
    return any(f and not f.startswith("..") and (recorded == f or recorded.endswith(os.sep + f)) for f in forms)


def find_record(prefix: str, experiment_file: str) -> tuple[str, dict[str, Any]]:
    """The newest experiment record under ``prefix`` whose ``caller_file`` is ``experiment_file``."""
    script = os.path.splitext(os.path.basename(experiment_file))[0]
    seen, matches = [], []
    for url in glob(join(prefix, "experiments", "*.json")):
        try:
            record = json.loads(read_text(url))
        except (OSError, ValueError) as e:
            logger.warning("skipping unreadable experiment record %s: %s", url, e)
            continue
        seen.append(f"{record.get('caller_file') or record.get('script')} ({url})")
        if record.get("script") == script and same_file(record.get("caller_file"), experiment_file):
            matches.append((record.get("created", 0), url, record))
    if not matches:
        known = "\n  ".join(seen) or "(none)"
        raise ReportError(
            f"no experiment record for {experiment_file} under {join(prefix, 'experiments')}; "
            f"run the experiment with --prefix {prefix} first. Records there:\n  {known}"
        )
    _, url, record = max(matches, key=lambda m: m[0])
    return url, record


read_state = state_summary


def read_curves(output_path: str) -> dict[str, Curve]:
    """Every numeric series of ``metrics.jsonl``; a torn last line (a run killed mid-write) is skipped."""
    url = join(output_path, "metrics.jsonl")
    if not exists(url):
        return {}
    curves: dict[str, Curve] = {}
    for line in read_text(url).splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if not isinstance(row, dict) or not isinstance(row.get("step"), (int, float)):
            continue
        for key, value in row.items():
            if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
                curve = curves.setdefault(key, Curve([], []))
                curve.steps.append(row["step"])
                curve.values.append(float(value))
    return curves


def _read_json(url: str) -> dict[str, Any] | None:
    if not exists(url):
        return None
    try:
        value = json.loads(read_text(url))
    except ValueError as e:
        logger.warning("unreadable %s: %s", url, e)
        return None
    return value if isinstance(value, dict) else None


def step_report(entry: dict[str, Any]) -> StepReport:
    path = entry["output_path"]
    state, message, started, finished = read_state(path)
    tracker = _read_json(join(path, "tracker.json")) or {}
    fit_document, fit_errors = _read_json(join(path, FIT_FILE)), {}
    return StepReport(
        name=entry["name"],
        identity=entry["identity"],
        output_path=path,
        description=entry.get("description"),
        state=state,
        message=message,
        started=started,
        finished=finished,
        curves=read_curves(path),
        results=_read_json(join(path, "results.json")),
        fit=None if fit_document is None else FitRecord.from_json(fit_document, fit_errors),
        fit_errors=fit_errors,
        wandb_url=tracker.get("wandb_url"),
    )


def read_docstring(experiment_file: str) -> str | None:
    """The module docstring, parsed (not executed) from the file's text."""
    import ast

    try:
        with open(experiment_file, encoding="utf-8") as f:
            return ast.get_docstring(ast.parse(f.read()))
    except (OSError, SyntaxError, ValueError) as e:
        logger.warning("cannot read the docstring of %s: %s", experiment_file, e)
        return None


def collect(record_url: str, record: dict[str, Any], experiment_file: str | None = None) -> ExperimentReport:
    steps = [step_report(entry) for entry in record.get("steps", [])]
    docstring = read_docstring(experiment_file) if experiment_file else None
    return ExperimentReport(record_url=record_url, record=record, steps=steps, docstring=docstring)
