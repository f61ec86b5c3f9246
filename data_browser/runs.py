"""Training runs overlaid (``/compare/runs``): each run's training loss and eval bits-per-byte against a common
x-axis, labelled by its step name and the config fields in which it differs from the other runs shown.

    runs = load_runs(["/lab/checkpoints/a-1f2e", "/lab/checkpoints/b-9c0d"], "tokens", read)
    runs[0].fields         # ["trainer.batch_size=32"]        (config_diff over the .executor_info configs)
    runs[0].curves         # {"train/loss": Curve(x=[...], y=[...]), "eval/stories/bpb": Curve(...)}

The x-axes: ``step`` (as logged), ``tokens`` and ``flops``, from the trainer's cumulative
``throughput/total_tokens`` and ``throughput/total_flops`` on every train record. A record without them (an
eval logged on its own line) takes the value of the same step, scaled from the nearest logged step where
the step is not logged (the totals grow in proportion to the step). Logs older than those totals get tokens
= step × ``trainer.batch_size`` × ``model.seq_len`` from the run's config, said in a note; their FLOPs are
unavailable and the run is left out of a FLOPs chart, also said: nothing is estimated that was not logged.
"""

from __future__ import annotations

import bisect
import dataclasses
import re
from collections.abc import Callable
from typing import Any

from data_browser import training
from data_browser.config_diff import differing_fields
from data_browser.readers import ReadFailure
from data_browser.step_files import METRICS_FILE
from marin.execution.status import INFO_FILE
from marin.report.leaderboard import tokens_per_step
from marin.storage import exists, join

X_AXES = ("step", "tokens", "flops")
TOTALS = {"tokens": "throughput/total_tokens", "flops": "throughput/total_flops"}
EVAL_BPB = re.compile(r"^eval/(.+)/bpb$")
PALETTE = ("#1565c0", "#c62828", "#2e7d32", "#ef6c00", "#6a1b9a", "#00838f", "#ad1457", "#4e342e", "#558b2f", "#283593")
"""One colour per run (and per budget on the fit page), cycled past ten."""


@dataclasses.dataclass
class Curve:
    x: list[float]
    y: list[float]


@dataclasses.dataclass
class Run:
    path: str
    name: str
    """The step's name from ``.executor_info`` (else its directory's), or the directory's name where two
    runs shown share a step name."""
    config: Any
    fields: list[str]
    """``path=value`` of the config fields that differ from the other runs shown."""
    color: str
    curves: dict[str, Curve]
    """Training loss (``train/loss``) and each ``eval/<set>/bpb`` against the chosen x-axis."""
    notes: list[str]
    """What could not be drawn, and how x was derived when it was not logged."""
    metrics: bool = False
    """Whether it has a ``metrics.jsonl`` (then its training page is linked)."""


def fill_by_step(steps: list, values: list) -> list:
    """``values`` with each gap filled from the same step's value, else scaled from the nearest logged step."""
    known = {s: v for s, v in zip(steps, values) if v is not None and s}
    order = sorted(known)
    out = []
    for s, v in zip(steps, values):
        if v is None and order:
            v = known.get(s)
            if v is None:
                i = bisect.bisect_right(order, s)
                k = order[i - 1] if i > 0 else order[0]
                v = known[k] * s / k
        out.append(v)
    return out


def x_values(columns: dict[str, list], x: str, config: Any) -> tuple[list | None, str | None]:
    """The x of every row (None: unavailable) and a note on how it was derived or why it is missing."""
    steps = columns["step"]
    if x == "step":
        return steps, None
    logged = columns.get(TOTALS[x])
    if logged and any(v is not None for v in logged):
        return fill_by_step(steps, logged), None
    if x == "tokens":
        per_step = tokens_per_step(config)
        if per_step:
            note = "tokens = step × trainer.batch_size × model.seq_len (its log predates throughput/total_tokens)"
            return [s * per_step for s in steps], note
        return None, (
            "not drawn against tokens: no throughput/total_tokens in its metrics.jsonl and no "
            "trainer.batch_size and model.seq_len in its .executor_info"
        )
    return None, "not drawn against FLOPs: its metrics.jsonl has no throughput/total_flops (an older trainer's log)"


def curves(columns: dict[str, list], xs: list) -> dict[str, Curve]:
    keys = [next((k for k in training.TRAIN_LOSS if k in columns), None)]
    keys += sorted(k for k in columns if EVAL_BPB.match(k))
    out = {}
    for key in filter(None, keys):
        pairs = [(x, y) for x, y in zip(xs, columns[key]) if x is not None and y is not None]
        if pairs:
            out["train/loss" if key in training.TRAIN_LOSS else key] = Curve(
                [p[0] for p in pairs], [p[1] for p in pairs]
            )
    return out


def read_config(path: str, read_json: Callable[[str], Any]) -> tuple[dict[str, Any] | None, str | None]:
    """``.executor_info`` of a step: (the document, None) or (None, why it is missing)."""
    url = join(path, INFO_FILE)
    if not exists(url):
        return None, f"no {INFO_FILE}: its config is unknown"
    try:
        info = read_json(url)
    except (ReadFailure, OSError) as e:
        return None, f"config unknown: {e}"
    if not isinstance(info, dict):
        return None, f"config unknown: {url} is not a JSON object"
    return info, None


def load_run(path: str, x: str, read_json: Callable[[str], Any], read_metrics: Callable[[str], Any]) -> Run:
    """One run's curves against ``x``; every problem becomes a note of that run, never an error of the page."""
    info, problem = read_config(path, read_json)
    notes = [problem] if problem else []
    config = info.get("config") if info else None
    name = info.get("name") if info and isinstance(info.get("name"), str) else path.rstrip("/").rsplit("/", 1)[-1]
    url = join(path, METRICS_FILE)
    found: dict[str, Curve] = {}
    if not exists(url):
        notes.append(f"no {METRICS_FILE} in {path}")
    else:
        metrics = read_metrics(url)
        notes += metrics.notes
        if metrics.columns:
            xs, note = x_values(metrics.columns, x, config)
            notes += [note] if note else []
            found = curves(metrics.columns, xs) if xs is not None else {}
    return Run(path, name, config, [], "", found, notes, exists(url))


def load_runs(paths: list[str], x: str, read_json, read_metrics) -> list[Run]:
    """The runs at ``paths`` (resolved), coloured and labelled by the fields that set each apart."""
    runs = [load_run(p, x, read_json, read_metrics) for p in dict.fromkeys(paths)]
    names = [r.name for r in runs]
    for i, (run, fields) in enumerate(zip(runs, differing_fields([r.config for r in runs]))):
        run.fields, run.color = fields, PALETTE[i % len(PALETTE)]
        if names.count(run.name) > 1:
            run.name = run.path.rstrip("/").rsplit("/", 1)[-1]
    return runs


def chart_keys(runs: list[Run]) -> list[str]:
    """The charts to draw: training loss, then each eval set's bits-per-byte, present in any run."""
    keys = {k for r in runs for k in r.curves}
    return sorted(keys, key=lambda k: (k != "train/loss", k))
