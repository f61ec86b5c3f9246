"""What the browser knows about experiments and steps, read only from files the executor and steps write.

- ``<prefix>/experiments/<script>-<hash>.json``: the experiment record (steps, versions, git commit);
- ``<step>/.executor_status`` / ``.executor_info``: each step's state history and resolved config;
- ``<step>/metrics.jsonl``: one JSON object per line with a ``step`` and metric values (training curves);
- ``<step>/results.json``: evaluation results; ``<step>/tracker.json``: ``{"wandb_url": ...}`` if tracked.
"""

from __future__ import annotations

import dataclasses
import html
import json
import re
from typing import Any

from marin.execution.status import INFO_FILE, state_summary
from marin.storage import exists, glob, join, read_text

STATE_COLORS = {
    "SUCCESS": "#2e7d32",
    "RUNNING": "#1565c0",
    "WAITING": "#9e9e9e",
    "FAILED": "#c62828",
    "DEP_FAILED": "#ef6c00",
    None: "#bdbdbd",
}


@dataclasses.dataclass
class StepView:
    name: str
    identity: str
    output_path: str
    dependencies: list[str]
    state: str | None
    message: str | None
    started: float | None
    finished: float | None
    config: Any
    fn: str | None
    browsable: bool = True
    """False when the output lies outside the browser's roots (no link is shown)."""

    @property
    def duration(self) -> float | None:
        if self.started is None or self.finished is None:
            return None
        return self.finished - self.started


def list_experiments(root: str) -> list[str]:
    return glob(join(root, "experiments", "*.json"))


def load_record(url: str) -> dict[str, Any]:
    return json.loads(read_text(url))


step_state = state_summary


def step_views(record: dict[str, Any]) -> list[StepView]:
    views = []
    for s in record.get("steps", []):
        state, message, started, finished = step_state(s["output_path"])
        info_url = join(s["output_path"], INFO_FILE)
        config = None
        if exists(info_url):
            try:
                config = json.loads(read_text(info_url)).get("config")
            except ValueError:
                config = "(unreadable .executor_info)"
        views.append(StepView(s["name"], s["identity"], s["output_path"], s.get("dependencies", []), state, message,
                              started, finished, config, s.get("fn")))
    return views


def github_url(record: dict[str, Any], repo_url: str | None) -> str | None:
    """Link to the experiment file at its recorded commit (repo from config, else the git remote)."""
    repo = repo_url or _https_remote(record.get("git_remote"))
    if not repo or not record.get("git_commit") or not record.get("caller_file"):
        return None
    return f"{repo.rstrip('/')}/blob/{record['git_commit']}/{record['caller_file']}"


def _https_remote(remote: str | None) -> str | None:
    if not remote:
        return None
    match = re.match(r"^(?:git@|ssh://git@)([^:/]+)[:/](.+?)(?:\.git)?$", remote)
    if match:
        return f"https://{match.group(1)}/{match.group(2)}"
    if remote.startswith(("http://", "https://")):
        return remote[:-4] if remote.endswith(".git") else remote
    return None


def wandb_url(output_path: str) -> str | None:
    url = join(output_path, "tracker.json")
    if not exists(url):
        return None
    try:
        return json.loads(read_text(url)).get("wandb_url")
    except ValueError:
        return None


def load_metrics(output_path: str, max_points: int = 20000) -> dict[str, list]:
    """Columns from ``metrics.jsonl``: {"step": [...], "loss": [...], ...}; missing values are None."""
    url = join(output_path, "metrics.jsonl")
    if not exists(url):
        return {}
    rows = []
    for line in read_text(url).splitlines()[-max_points:]:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and isinstance(row.get("step"), (int, float)):
            rows.append(row)
    keys = sorted({k for r in rows for k, v in r.items() if isinstance(v, (int, float)) and k != "step"})
    columns = {"step": [r["step"] for r in rows]}
    for key in keys:
        columns[key] = [r.get(key) if isinstance(r.get(key), (int, float)) else None for r in rows]
    return columns


def load_results(output_path: str) -> dict[str, Any] | None:
    url = join(output_path, "results.json")
    if not exists(url):
        return None
    try:
        return json.loads(read_text(url))
    except ValueError:
        return None


def dag_svg(steps: list[StepView], link_prefix: str = "#step-") -> str:
    """The DAG as an SVG: columns by longest path from the sources, one box per step colored by state."""
    by_id = {s.identity: s for s in steps}
    layer: dict[str, int] = {}
    for s in steps:  # records list dependencies before dependents
        layer[s.identity] = 1 + max((layer.get(d, 0) for d in s.dependencies if d in by_id), default=-1)
    columns: dict[int, list[StepView]] = {}
    for s in steps:
        columns.setdefault(layer[s.identity], []).append(s)
    box_w, box_h, gap_x, gap_y = 210, 44, 60, 22
    pos = {}
    for col, members in columns.items():
        for row, s in enumerate(members):
            pos[s.identity] = (20 + col * (box_w + gap_x), 20 + row * (box_h + gap_y))
    width = 40 + (max(columns, default=0) + 1) * (box_w + gap_x)
    height = 40 + max((len(m) for m in columns.values()), default=1) * (box_h + gap_y)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="dag" width="{width}" height="{height}">']
    for s in steps:
        for d in s.dependencies:
            if d in pos:
                (x1, y1), (x2, y2) = pos[d], pos[s.identity]
                parts.append(f'<path d="M{x1 + box_w},{y1 + box_h / 2} C{x1 + box_w + gap_x / 2},{y1 + box_h / 2} '
                             f'{x2 - gap_x / 2},{y2 + box_h / 2} {x2},{y2 + box_h / 2}" class="edge"/>')
    for s in steps:
        x, y = pos[s.identity]
        color = STATE_COLORS.get(s.state, "#6a1b9a")
        name = html.escape(s.name)
        parts.append(
            f'<a href="{link_prefix}{html.escape(s.identity)}"><g class="node" data-state="{s.state}">'
            f'<rect x="{x}" y="{y}" width="{box_w}" height="{box_h}" rx="6" fill="{color}"/>'
            f'<text x="{x + 8}" y="{y + 18}">{name}</text>'
            f'<text x="{x + 8}" y="{y + 35}" class="state">{s.state or "NOT STARTED"}</text></g></a>'
        )
    parts.append("</svg>")
    return "".join(parts)
