"""The files beside each step's output: the contract with reruns, other executors and the browser.

``.executor_status`` is JSON lines, one event per state change, newest last:

    {"state": "RUNNING", "time": 1763780000.1, "message": null, "owner": "host:123:9f2c"}
    {"state": "SUCCESS", "time": 1763780004.7, "message": null, "owner": "host:123:9f2c"}

The file is rewritten whole on each event (object stores cannot append) by the lease holder only.
``.executor_info`` is one JSON document describing the step (schema below, ``format_version`` 1).
"""

from __future__ import annotations

import enum
import json
import time
from typing import Any

from marin.storage import create_only, join, read_bytes, write_atomic

STATUS_FILE = ".executor_status"
INFO_FILE = ".executor_info"
LEASE_FILE = ".executor_lease"
INFO_FORMAT_VERSION = 1


class StepState(str, enum.Enum):
    WAITING = "WAITING"
    RUNNING = "RUNNING"
    SUCCESS = "SUCCESS"
    FAILED = "FAILED"
    DEP_FAILED = "DEP_FAILED"


class StatusFileError(RuntimeError):
    """A status file exists but cannot be parsed; never guessed around, since a guess could rerun a
    step over good outputs."""


def status_path(output_path: str) -> str:
    return join(output_path, STATUS_FILE)


def read_events(output_path: str) -> list[dict[str, Any]]:
    """All status events of a step, oldest first ([] if the step never started)."""
    url = status_path(output_path)
    try:
        raw = read_bytes(url)
    except FileNotFoundError:
        return []
    events = []
    for lineno, line in enumerate(raw.decode("utf-8", errors="replace").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
            StepState(event["state"])
        except (ValueError, KeyError, TypeError) as e:
            raise StatusFileError(
                f"{url}, line {lineno}: not a status event ({e}); expected JSON with a 'state' in "
                f"{[s.value for s in StepState]}. Inspect the step's outputs, then delete this file to rerun it."
            ) from None
        events.append(event)
    if not events:  # the first write (WAITING, create-only) already holds an event: this file lost its content
        raise StatusFileError(
            f"{url}: no status events (the file is empty); expected JSON lines with a 'state'. "
            "Inspect the step's outputs, then delete this file to rerun it."
        )
    return events


def current_state(output_path: str) -> StepState | None:
    events = read_events(output_path)
    return StepState(events[-1]["state"]) if events else None


def last_message(output_path: str) -> str | None:
    events = read_events(output_path)
    return events[-1].get("message") if events else None


def state_summary(output_path: str) -> tuple[str | None, str | None, float | None, float | None]:
    """(state, its message, start of the last RUNNING, time a final state was reached) for displays
    (browser, reports); an unparseable status file shows as ``UNREADABLE`` with the parse error."""
    try:
        events = read_events(output_path)
    except StatusFileError as e:
        return "UNREADABLE", str(e), None, None
    if not events:
        return None, None, None, None
    last = events[-1]
    started = next((e["time"] for e in reversed(events) if e["state"] == StepState.RUNNING.value), None)
    final = (StepState.SUCCESS.value, StepState.FAILED.value, StepState.DEP_FAILED.value)
    finished = last["time"] if last["state"] in final else None
    return last["state"], last.get("message"), started, finished


def event_line(state: StepState, message: str | None = None, owner: str | None = None) -> str:
    return json.dumps({"state": state.value, "time": time.time(), "message": message, "owner": owner}) + "\n"


def append_event(output_path: str, state: StepState, message: str | None = None, owner: str | None = None) -> None:
    """Add an event; only the step's lease holder calls this, so read-modify-write is safe."""
    lines = "".join(json.dumps(e) + "\n" for e in read_events(output_path))
    write_atomic(status_path(output_path), lines + event_line(state, message, owner))


def mark_waiting(output_path: str, owner: str) -> None:
    """Record WAITING for a step that has no status yet; never overwrites a real status (create-only)."""
    create_only(status_path(output_path), event_line(StepState.WAITING, owner=owner).encode())


def write_info(output_path: str, info: dict[str, Any]) -> None:
    document = {"format_version": INFO_FORMAT_VERSION, **info}
    write_atomic(join(output_path, INFO_FILE), json.dumps(document, indent=2, sort_keys=True, default=_jsonable))


def _jsonable(value: Any) -> Any:
    """Resolved configs may hold values JSON cannot (paths, enums, callables): keep their text."""
    if hasattr(value, "value") and isinstance(value, enum.Enum):
        return value.value
    return repr(value)
