"""A step's training curves (``metrics.jsonl``) and evaluation results (``results.json``), read bounded.

The trainer appends one JSON object per logged step to ``metrics.jsonl``:

    {"step": 100, "train/loss": 3.21, "train/lr": 0.001, "throughput/tokens_per_s": 41000.0}
    {"step": 100, "eval/stories/bpb": 1.52}

``load_metrics`` turns it into columns for the charts, ``{"step": [100, 100], "train/loss": [3.21, None],
...}``. A log of a long run can be hundreds of megabytes, so at most ``max_bytes`` of it are read (evenly
spaced slices of a larger file, see ``readers.sample_lines``) and each metric is thinned to at most
``max_points`` points; every such cut is stated in ``Metrics.notes``, which the page shows.

The eval step (``marin.evaluation.step``) writes ``results.json``:

    {"checkpoint": ".../checkpoints/tiny-…", "checkpoint_step": 200, "tokenizer": "...", "model": {...},
     "validation": {"stories": {"loss": 2.1, "perplexity": 8.2, "bits_per_byte": 1.4, ...}},
     "tasks": {"arith_mc": {"items": 50, "chance": 0.25,
                            "acc": {"value": 0.8, "stderr": 0.05, "ci95": [0.67, 0.89]}, "acc_norm": {...}}}}

plus ``"config"``, the eval's own settings, at the top and in each task (what it was scored with).
``results_table`` flattens it to rows ``(section, set or task, metric, value, stderr, ci95)`` plus the
scalar fields (checkpoint, step, tokenizer) and nested configs (``model``, ``config``) shown beside the
table; a task's own ``config`` stays a row, folded. Any other top-level object of objects (e.g.
lm-eval-harness's ``{"results": {task: {metric: value}}}``) becomes a section of its own, so results of
another shape still read as a table.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from collections import Counter
from typing import Any

from data_browser.experiments import read_json
from data_browser.readers import ReadFailure, sample_lines
from data_browser.step_files import METRICS_FILE
from marin.storage import exists

TRAIN_LOSS = ("train/loss", "loss")
"""The training loss's key (``loss`` in logs older than the trainer's ``train/`` prefix)."""


@dataclasses.dataclass
class Metrics:
    columns: dict[str, list]
    """``{"step": [...], "<metric>": [...]}``; a value is None where that row did not log the metric."""
    notes: list[str]
    """What was left out (sampled, thinned, unparseable lines), for the page to say."""


def _number(value: Any) -> float | int | None:
    """A finite number, else None (NaN and infinities would not survive JSON for the charts)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value if math.isfinite(value) else None


def load_metrics(url: str, max_bytes: int, max_points: int) -> Metrics:
    if not exists(url):
        return Metrics({}, [])
    try:
        lines, size = sample_lines(url, max_bytes)
    except OSError as e:  # e.g. a directory by that name
        return Metrics({}, [f"{url}: cannot be read ({type(e).__name__}: {e})"])
    notes = []
    if size > max_bytes:
        notes.append(
            f"{METRICS_FILE} is {size / 1e6:.1f} MB, more than the {max_bytes / 1e6:.1f} MB the browser "
            f"reads (max_metrics_bytes): the curves are drawn from evenly spaced slices of it."
        )
    rows, bad = [], 0
    for line in lines:
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            bad += 1
            continue
        if isinstance(row, dict) and _number(row.get("step")) is not None:
            rows.append({k: _number(v) for k, v in row.items()})
        else:
            bad += 1
    if bad:
        notes.append(f"{bad} line(s) without a JSON object holding a numeric step were skipped.")
    rows, thinned = _thin(rows, max_points)
    if thinned:
        notes.append(
            f"Metrics with more than {max_points:,} points are thinned to about that many "
            f"(max_metric_points): {', '.join(thinned)}."
        )
    keys = sorted({k for r in rows for k, v in r.items() if v is not None and k != "step"})
    columns = {"step": [r["step"] for r in rows]}
    for key in keys:
        columns[key] = [r.get(key) for r in rows]
    return Metrics(columns, notes)


def _importance(key: str) -> int:
    """0 for the training loss, then eval loss and bits-per-byte, learning rate, grad norm, throughput, the rest.

    Cumulative totals (``throughput/total_tokens``) are straight lines: the x-axes of ``/compare/runs``, not
    curves worth a look, so they go with the rest."""
    last = key.rsplit("/", 1)[-1]
    if key in TRAIN_LOSS:
        return 0
    if key.startswith("eval/") and last in ("loss", "bpb", "bits_per_byte"):
        return 1
    if last in ("learning_rate", "lr"):
        return 2
    if last == "grad_norm":
        return 3
    if (key.startswith("throughput/") and not last.startswith("total_")) or last in ("tokens_per_s", "mfu"):
        return 4
    return 5


def chart_order(keys: list[str]) -> list[str]:
    """The metrics of a step in the order the training page draws them (``step`` left out)."""
    return sorted((k for k in keys if k != "step"), key=lambda k: (_importance(k), k))


def _thin(rows: list[dict], max_points: int) -> tuple[list[dict], list[str]]:
    """Keep every k-th value of each metric (k per metric), so sparse metrics (evals) keep all points."""
    counts = Counter(k for r in rows for k, v in r.items() if v is not None and k != "step")
    stride = {k: -(-c // max_points) for k, c in counts.items()}
    if all(s == 1 for s in stride.values()):
        return rows, []
    seen: Counter = Counter()
    kept = []
    for r in rows:
        keep = False
        for k, v in r.items():
            if v is None or k == "step":
                continue
            keep |= seen[k] % stride[k] == 0
            seen[k] += 1
        if keep:
            kept.append(r)
    return kept, sorted(k for k, s in stride.items() if s > 1)


def load_results(url: str, max_bytes: int) -> tuple[Any, str | None]:
    """(parsed ``results.json`` or None, an error message if it exists but cannot be shown)."""
    if not exists(url):
        return None, None
    try:
        return read_json(url, max_bytes), None
    except (ReadFailure, OSError) as e:
        return None, str(e)


@dataclasses.dataclass
class ResultRow:
    section: str
    name: str
    metric: str
    value: Any
    stderr: float | None = None
    ci95: list | None = None


@dataclasses.dataclass
class ResultsTable:
    rows: list[ResultRow]
    info: dict[str, Any]
    """Top-level scalars: checkpoint, checkpoint_step, tokenizer, ..."""
    configs: dict[str, Any]
    """Top-level objects that are not sections (``model``): shown collapsed."""

    @property
    def groups(self) -> list[tuple[str, str, list[ResultRow]]]:
        """Rows grouped by (section, set or task), in file order."""
        return [
            (section, name, list(rows))
            for (section, name), rows in itertools.groupby(self.rows, lambda r: (r.section, r.name))
        ]


def results_table(results: Any) -> ResultsTable | None:
    if not isinstance(results, dict):
        return None
    rows, info, configs = [], {}, {}
    for key, value in results.items():
        if isinstance(value, dict) and value and all(isinstance(v, dict) for v in value.values()):
            for name, metrics in value.items():
                rows.extend(_metric_rows(key, name, metrics))
        elif isinstance(value, (dict, list)):
            configs[key] = value
        else:
            info[key] = value
    return ResultsTable(rows, info, configs)


def _metric_rows(section: str, name: str, metrics: dict[str, Any]) -> list[ResultRow]:
    rows = []
    for metric, v in metrics.items():
        if isinstance(v, dict) and "value" in v:  # {"value", "stderr", "ci95"} from accuracy_stats
            ci = v.get("ci95")
            rows.append(
                ResultRow(
                    section,
                    name,
                    metric,
                    v["value"],
                    _number(v.get("stderr")),
                    ci if isinstance(ci, list) and len(ci) == 2 else None,
                )
            )
        else:  # a number, or the settings the task was scored with (``config``): shown folded
            rows.append(ResultRow(section, name, metric, v))
    return rows


def format_number(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:.4f}" if value == 0 or 1e-3 <= abs(value) < 1e4 else f"{value:.4g}"


def format_si(value: Any) -> str:
    """Compact like the charts' tick labels: 12k, 1.2M, 3.4G, 3.4e15 (``""`` for None)."""
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return "" if value is None else str(value)
    a = abs(value)
    if a >= 1e15 or 0 < a < 1e-3:
        mantissa, exponent = f"{value:.2e}".split("e")
        return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if a >= factor:
            return f"{value / factor:.4g}{prefix}"
    return f"{value:.4g}"


def format_duration(seconds: float | None) -> str:
    """``42.0 s``, ``12 min 5 s``, ``3 h 20 min`` (``""`` for None)."""
    if seconds is None:
        return ""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s"
    return f"{minutes // 60} h {minutes % 60} min"
