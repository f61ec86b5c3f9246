"""The files beside each step's output: the contract with reruns, other executors and the browser.

``.executor_status`` is JSON lines, one event per state change, newest last:

    {"state": "RUNNING", "time": 1763780000.1, "message": null, "owner": "host:123:9f2c"}
    {"state": "SUCCESS", "time": 1763780004.7, "message": null, "owner": "host:123:9f2c"}

The file is rewritten whole on each event (object stores cannot append) by the lease holder only, with a
compare-and-swap (``append_event``). RUNNING events carry the lease ``attempt``; the final event of an
attempt is written only while the last RUNNING is still that attempt's, so an executor that lost its
lease cannot write over its successor's history.
``.executor_info`` is one JSON document describing the step (schema below, ``format_version`` 1).
"""

from __future__ import annotations

import enum
import json
import time
from collections.abc import Callable
from typing import Any

from marin.storage import create_only, join, read_bytes, read_versioned, replace_if_version, write_atomic

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
    return _parse_events(url, raw)


def _parse_events(url: str, raw: bytes) -> list[dict[str, Any]]:
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


def event_line(
    state: StepState, message: str | None = None, owner: str | None = None, attempt: str | None = None
) -> str:
    event = {"state": state.value, "time": time.time(), "message": message, "owner": owner}
    if attempt is not None:
        event["attempt"] = attempt
    return json.dumps(event) + "\n"


def append_event(
    output_path: str,
    state: StepState,
    message: str | None = None,
    owner: str | None = None,
    *,
    attempt: str | None = None,
    expect: Callable[[list[dict[str, Any]]], bool] | None = None,
) -> bool:
    """Add an event with a compare-and-swap on the status file; only the step's lease holder calls this.

    ``expect(events)`` guards the write: if it returns False for the current history nothing is written
    and the call returns False. The swap makes the guard exact: a status written by a new lease holder
    between our read and our write makes the write fail and the guard is evaluated again.
    """
    url = status_path(output_path)
    for _ in range(_CAS_ATTEMPTS):
        blob = read_versioned(url)
        events = _parse_events(url, blob.data) if blob is not None else []
        if expect is not None and not expect(events):
            return False
        data = ("".join(json.dumps(e) + "\n" for e in events) + event_line(state, message, owner, attempt)).encode()
        if blob is None:
            written = create_only(url, data)
        else:
            written = replace_if_version(url, data, blob.version)
        if written is not None:
            return True
    raise RuntimeError(f"{url}: the status file kept changing during {_CAS_ATTEMPTS} attempts to add {state.value}")


_CAS_ATTEMPTS = 20


def running_attempt(events: list[dict[str, Any]]) -> str | None:
    """The ``attempt`` of the last RUNNING event (None if there is none or it predates attempts)."""
    for event in reversed(events):
        if event["state"] == StepState.RUNNING.value:
            return event.get("attempt")
    return None


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
