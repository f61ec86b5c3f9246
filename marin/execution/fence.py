"""The step task's own side of fencing: stop as soon as the step's lease is no longer ours.

The executor heartbeats a step's lease while the step's Ray task runs. If the executor stops heartbeating
(a long pause, a partition from the store) another executor takes the lease over after ``stale_after_s``
and runs the step again, into the same output directory. The first task must be gone by then. Inside the
task process a ``StepFence``:

1. guards the output directory in ``marin.storage`` (``guard_prefix``): every write helper there first
   calls ``check()``, which re-reads the lease when the last confirmation is older than ``check_s`` and
   raises ``LeaseLost`` if it is not ours;
2. runs a watcher thread that re-reads the lease every ``check_s`` and, once the lease carries another
   attempt, is gone, or its heartbeat is older than ``stop_after_s`` (two checks before a take-over is
   allowed), records why in ``.executor_fenced-<attempt>`` and SIGKILLs its own process: a step stuck in a
   C call (an XLA computation, a download) stops too, and so does every host of a multi-host gang, each of
   which runs its own fence.

The kill happens only while the fenced call is still running (leaving the fence and killing exclude each
other): a process that outlives its step (a reused Ray worker, a test) is never killed for a lease it no
longer runs under. A call that leaves the fence with its lease lost (``LeaseLost`` raised by a guarded
write, racing the watcher) is killed on the way out, still inside its task: every path out of a lost
lease ends the process. That kill waits for the loss's record (``.executor_fenced-<attempt>``), which the
watcher may still be writing: the executor reads it to tell a fenced task from a crashed one.

A verdict needs one small read of ``.executor_lease``; a read that fails keeps the last confirmation, so a
task cut off from the store stops once it cannot prove its lease for ``stop_after_s``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Self

from marin.execution.status import LEASE_FILE
from marin.storage import (
    LeaseLost,
    guard_prefix,
    join,
    read_versioned,
    unguard_prefix,
    write_atomic,
)
from marin.storage.fence import FENCED_MARKER_PREFIX

logger = logging.getLogger(__name__)

FENCED_PREFIX = FENCED_MARKER_PREFIX
_RECORD_WAIT_S = 30.0
"""The longest a call leaving with its lease lost waits for the loss's record before its process is killed."""


@dataclasses.dataclass(frozen=True)
class FenceSpec:
    """What a step's task needs to watch its lease; built by the executor from the lease it holds."""

    output_path: str
    owner: str
    """The executor holding the lease (``host:pid:nonce``)."""
    attempt: str
    """The lease acquisition this task belongs to; a take-over writes a new one."""
    check_s: float
    """How often the lease is re-read (and the longest a write trusts an earlier read)."""
    stop_after_s: float
    """Heartbeat age at which the task stops itself, before anyone may take the lease over."""


def fenced_marker(output_path: str, attempt: str) -> str:
    return join(output_path, f"{FENCED_PREFIX}{attempt}")


def read_fenced_reason(output_path: str, attempt: str) -> str | None:
    """Why the task of ``attempt`` stopped itself, or None if it did not."""
    blob = read_versioned(fenced_marker(output_path, attempt))
    if blob is None:
        return None
    try:
        return json.loads(blob.data)["reason"]
    except (ValueError, KeyError, TypeError):
        return blob.data.decode("utf-8", errors="replace")


def _kill_self() -> None:
    logging.shutdown()  # flush what the task logged before the SIGKILL
    os.kill(os.getpid(), signal.SIGKILL)


class StepFence:
    """Watches one step's lease from inside its task; see the module docstring."""

    def __init__(self, spec: FenceSpec, on_lost: Callable[[], None] = _kill_self):
        self.spec = spec
        self._on_lost = on_lost
        self._lock = threading.Lock()
        self._confirmed_at = time.monotonic()  # monotonic time of the last read that proved the lease ours
        self._age_then = 0.0  # the heartbeat's age at that read
        self.lost: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._inside_lock = threading.Lock()  # held by a kill and by leaving the fence: never both
        self._record_lock = threading.Lock()  # held from setting ``lost`` until its record is written
        self._inside = False
        self._stopped = False  # on_lost has been called

    def __enter__(self) -> Self:
        # A retried or late-started task of a lost attempt fails before it writes anything, with an exception
        # (not the SIGKILL, which Ray would answer with yet another retry).
        reason = self._verdict()
        if reason is not None:
            self.lost = reason
            raise LeaseLost(f"{self.spec.output_path}: {reason}; not starting")
        guard_prefix(self.spec.output_path, self.check)
        self._inside = True
        self._thread = threading.Thread(target=self._watch, name="marin-step-fence", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        with self._inside_lock:  # from here on a late verdict records the loss but kills nothing
            self._inside = False
            stop = self.lost is not None and not self._stopped
            self._stopped = self._stopped or stop
        self._stop.set()
        unguard_prefix(self.spec.output_path)
        if stop:  # lost before the call returned: still this task's process
            # The thread that set ``lost`` may still be writing the record (a slow store): kill after it, or
            # after _RECORD_WAIT_S when the store does not answer (the call has returned; it writes nothing).
            if self._record_lock.acquire(timeout=_RECORD_WAIT_S):
                self._record_lock.release()
            self._on_lost()

    def check(self) -> None:
        """Raise ``LeaseLost`` unless the lease was proven ours within the last ``check_s``."""
        if self.lost is None and time.monotonic() - self._confirmed_at > self.spec.check_s:
            self.confirm()
        if self.lost is not None:
            raise LeaseLost(f"{self.spec.output_path}: {self.lost}")

    def confirm(self) -> None:
        """Re-read the lease now; on loss, record it and call ``on_lost`` (default: SIGKILL this process)."""
        reason = self._verdict()
        if reason is not None:
            self._lose(reason)
            raise LeaseLost(f"{self.spec.output_path}: {reason}")

    def _verdict(self) -> str | None:
        try:
            blob = read_versioned(join(self.spec.output_path, LEASE_FILE))
        except Exception as e:  # noqa: BLE001 - the store is unreachable: judge by the last good read
            since = time.monotonic() - self._confirmed_at
            if self._age_then + since >= self.spec.stop_after_s:
                return f"cannot read the lease ({type(e).__name__}: {e}) for {since:.1f}s"
            logger.warning("fence: cannot read the lease of %s (%s); retrying", self.spec.output_path, e)
            return None
        if blob is None:
            return "the lease file is gone (released or deleted by another executor)"
        try:
            doc = json.loads(blob.data)
            attempt, owner, heartbeat = doc.get("attempt"), doc.get("owner"), float(doc["heartbeat"])
        except (ValueError, KeyError, TypeError, AttributeError):
            return "the lease file is not a lease any more"
        if attempt != self.spec.attempt:
            return f"the lease now belongs to attempt {attempt} of executor {owner}"
        age = time.time() - heartbeat
        if age >= self.spec.stop_after_s:
            return (
                f"the lease's heartbeat is {age:.1f}s old (limit {self.spec.stop_after_s:.1f}s): its executor "
                "stopped heartbeating and another executor may take the step over"
            )
        with self._lock:
            self._confirmed_at, self._age_then = time.monotonic(), max(age, 0.0)
        return None

    def _lose(self, reason: str) -> None:
        with self._record_lock:  # before ``lost`` is set: whoever sees it set can wait for the record
            with self._lock:
                if self.lost is not None:
                    return
                self.lost = reason
            logger.error("fence: %s lost its lease: %s; stopping this task", self.spec.output_path, reason)
            try:
                doc = {"reason": reason, "pid": os.getpid(), "time": time.time(), "owner": self.spec.owner}
                write_atomic(fenced_marker(self.spec.output_path, self.spec.attempt), json.dumps(doc))
            except Exception:
                logger.exception("fence: could not record the loss")
        with self._inside_lock:
            if self._inside and not self._stopped:  # else the call has returned: this process may run another task
                self._stopped = True
                self._on_lost()

    def _watch(self) -> None:
        while not self._stop.wait(self.spec.check_s):
            try:
                self.confirm()
            except LeaseLost:
                return


def run_fenced(fn: Callable, config, spec: FenceSpec | None) -> None:
    """``fn(config)`` under a fence on ``spec.output_path`` (no fence when ``spec`` is None)."""
    if spec is None:
        fn(config)
        return
    with StepFence(spec):
        fn(config)
