"""What the browser knows about experiments and steps, read only from files the executor and steps write.

- ``<prefix>/experiments/<script>-<hash>.json``: the experiment record (steps, versions, git commit);
- ``<step>/.executor_status`` / ``.executor_info``: each step's state history and resolved config;
- ``<step>/tracker.json``: ``{"wandb_url": ...}`` if tracked (training curves and results: ``training.py``).

Every file is read bounded, and a damaged one is shown as such: a record that is not JSON or lacks the
fields the pages use is a ``ReadFailure`` naming the file (an error page), a damaged ``.executor_info``
or ``.executor_status`` marks only its own step.
"""

from __future__ import annotations

import dataclasses
import html
import json
import re
from collections.abc import Callable
from typing import Any

from data_browser.readers import ReadFailure, read_bounded
from data_browser.step_files import StepFiles, step_files
from marin.execution.status import INFO_FILE, STATUS_FILE, state_summary
from marin.storage import exists, glob, join

STATE_COLORS = {
    "SUCCESS": "#2e7d32",
    "RUNNING": "#1565c0",
    "WAITING": "#9e9e9e",
    "FAILED": "#c62828",
    "DEP_FAILED": "#ef6c00",
    None: "#bdbdbd",
}
REQUIRED_STEP_KEYS = ("name", "identity", "output_path")


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
    files: StepFiles = StepFiles()
    """Which views its output directory has (none when it does not exist or is not browsable)."""
    duration: float | None = dataclasses.field(init=False)
    """Seconds from start to finish, None until both are known (a field, so the API sends it)."""

    def __post_init__(self):
        self.duration = None if self.started is None or self.finished is None else self.finished - self.started


def list_experiments(root: str) -> list[str]:
    return glob(join(root, "experiments", "*.json"))


def read_json(url: str, max_bytes: int) -> Any:
    """A JSON file read whole but bounded; any failure is a ``ReadFailure`` naming the file."""
    try:
        data = read_bounded(url, max_bytes)
    except IsADirectoryError:
        raise ReadFailure(f"{url}: a directory, not a JSON file") from None
    try:
        return json.loads(data.decode("utf-8"))
    except ValueError as e:  # UnicodeDecodeError is a ValueError too
        raise ReadFailure(f"{url}: not valid JSON ({type(e).__name__}: {e})") from None


def load_record(url: str, max_bytes: int) -> dict[str, Any]:
    """An experiment record, checked against the shape the pages rely on (else ``ReadFailure``)."""
    record = read_json(url, max_bytes)
    problem = _record_problem(record)
    if problem:
        raise ReadFailure(f"{url}: not an experiment record: {problem}")
    return record


def _record_problem(record: Any) -> str | None:
    if not isinstance(record, dict):
        return f"expected a JSON object, got {type(record).__name__}"
    for key in ("script", "description", "caller_file", "git_commit", "git_remote", "user"):
        if record.get(key) is not None and not isinstance(record[key], str):
            return f"{key!r} must be a string, got {record[key]!r}"
    if not isinstance(record.get("steps"), list):
        return "'steps' must be a list"
    for i, step in enumerate(record["steps"]):
        if not isinstance(step, dict) or not all(isinstance(step.get(k), str) for k in REQUIRED_STEP_KEYS):
            return f"steps[{i}] must be an object with string {', '.join(map(repr, REQUIRED_STEP_KEYS))}"
        deps = step.get("dependencies", [])
        if not isinstance(deps, list) or not all(isinstance(d, str) for d in deps):
            return f"steps[{i}].dependencies must be a list of step identities"
    return None


def step_state(output_path: str) -> tuple[str | None, str | None, float | None, float | None]:
    """``state_summary``, with a damaged status file shown as ``UNREADABLE`` whatever its fault."""
    try:
        return state_summary(output_path)
    except (KeyError, TypeError, ValueError) as e:  # e.g. an event without a "time"
        return "UNREADABLE", f"{join(output_path, STATUS_FILE)}: {type(e).__name__}: {e}", None, None


def step_views(record: dict[str, Any], allowed: Callable[[str], bool], max_bytes: int) -> list[StepView]:
    """One view per step of a checked record. Files are read only where ``allowed`` (under the browser's
    roots): a record may name outputs anywhere, e.g. a run under gs:// browsed from a local copy."""
    views = []
    for s in record["steps"]:
        out = s["output_path"]
        browsable = allowed(out)
        state, message, started, finished = (
            step_state(out) if browsable and allowed(join(out, STATUS_FILE)) else (None, None, None, None)
        )
        info_url = join(out, INFO_FILE)
        config = None
        if browsable and allowed(info_url) and exists(info_url):
            try:
                info = read_json(info_url, max_bytes)
                config = info.get("config") if isinstance(info, dict) else f"(unreadable {info_url}: not an object)"
            except (ReadFailure, OSError) as e:
                config = f"(unreadable {INFO_FILE}: {e})"
        views.append(
            StepView(
                s["name"],
                s["identity"],
                out,
                s.get("dependencies", []),
                state,
                message,
                started,
                finished,
                config,
                s.get("fn"),
                browsable,
                step_files(out) if browsable else StepFiles(),
            )
        )
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


def wandb_url(output_path: str, allowed: Callable[[str], bool], max_bytes: int) -> str | None:
    url = join(output_path, "tracker.json")
    if not allowed(url) or not exists(url):
        return None
    try:
        link = read_json(url, max_bytes)
    except (ReadFailure, OSError):
        return None
    link = link.get("wandb_url") if isinstance(link, dict) else None
    return link if isinstance(link, str) and link.startswith(("https://", "http://")) else None


def dag_svg(steps: list[StepView], link_prefix: str = "#step-") -> str:
    """The DAG as an SVG: columns by longest path from the sources, one box per step colored by state.

    The SVG has a ``viewBox``, so the page can scale it to its width (``static/dag.js``); a name too long
    for its box is cut with an ellipsis, whole in the box's tooltip."""
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
    width = 40 + (max(columns, default=0) + 1) * (box_w + gap_x) - gap_x
    height = 40 + max((len(m) for m in columns.values()), default=1) * (box_h + gap_y) - gap_y
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="dag" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" style="max-width: {width}px">'
    ]
    for s in steps:
        for d in s.dependencies:
            if d in pos:
                (x1, y1), (x2, y2) = pos[d], pos[s.identity]
                parts.append(
                    f'<path d="M{x1 + box_w},{y1 + box_h / 2} C{x1 + box_w + gap_x / 2},{y1 + box_h / 2} '
                    f'{x2 - gap_x / 2},{y2 + box_h / 2} {x2},{y2 + box_h / 2}" class="edge"/>'
                )
    for s in steps:
        x, y = pos[s.identity]
        color = STATE_COLORS.get(s.state, "#6a1b9a")
        name = s.name if len(s.name) <= 30 else s.name[:29] + "…"
        parts.append(
            f'<a href="{link_prefix}{html.escape(s.identity)}"><g class="node" data-state="{s.state}">'
            f"<title>{html.escape(s.identity)}</title>"
            f'<rect x="{x}" y="{y}" width="{box_w}" height="{box_h}" rx="6" fill="{color}"/>'
            f'<text x="{x + 8}" y="{y + 18}">{html.escape(name)}</text>'
            f'<text x="{x + 8}" y="{y + 35}" class="state">{s.state or "NOT STARTED"}</text></g></a>'
        )
    parts.append("</svg>")
    return "".join(parts)
