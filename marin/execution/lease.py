"""Step leases: how several executors on one prefix run each step exactly once.

The lease is a small JSON file in the step's output directory:

    {"owner": "host:4242:9f2c1a", "attempt": "5d1e...", "acquired": 1763780000.0, "heartbeat": 1763780030.0}

``attempt`` is new at every acquisition (take-overs included): the step's task checks that the lease still
carries its attempt (``marin.execution.fence``).

1. Acquire: ``create_only`` (``O_EXCL``-style link locally; generation/ETag preconditions on object
   stores). Exactly one racer wins.
2. Hold: a heartbeat thread rewrites ``heartbeat`` with ``replace_if_version``, i.e. only if the file is
   still the version this holder last wrote. A failed swap means someone took the lease over: the
   lease is marked lost: the executor cancels the step's task and writes no status over the new holder's
   (fencing; the task also watches the lease itself, ``marin.execution.fence``).
3. Take over: a lease whose heartbeat is older than ``stale_after`` belongs to a dead executor; it is
   replaced with a compare-and-swap against the stale version, so exactly one taker wins.
4. Release: ``delete_if_version`` after the final status is written.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable

from marin.execution.status import LEASE_FILE
from marin.storage import create_only, delete_if_version, join, read_versioned, replace_if_version

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class LeaseConfig:
    heartbeat_s: float = 30.0
    """How often the holder refreshes its lease."""
    stale_after_s: float = 90.0
    """A lease not refreshed for this long is considered abandoned and may be taken over."""

    @property
    def fence_check_s(self) -> float:
        """How often a step's task re-reads its lease (and the longest a fenced write trusts an old read)."""
        return min(self.heartbeat_s, (self.stale_after_s - self.heartbeat_s) / 4)

    @property
    def fence_stop_after_s(self) -> float:
        """Heartbeat age at which a step's task stops itself: two checks before anyone may take over, so a
        task whose executor stopped heartbeating (paused, partitioned) is gone before a new holder starts."""
        return self.stale_after_s - 2 * self.fence_check_s

    def __post_init__(self):
        if self.heartbeat_s <= 0:
            raise ValueError(f"LeaseConfig.heartbeat_s must be > 0, got {self.heartbeat_s}")
        if self.stale_after_s <= self.heartbeat_s:
            raise ValueError(
                f"LeaseConfig.stale_after_s ({self.stale_after_s}) must exceed heartbeat_s ({self.heartbeat_s})"
            )


def new_owner_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Lease:
    """A held lease on one step directory. ``lost`` turns true once another owner replaced it."""

    def __init__(self, url: str, owner: str, version: str, acquired: float, attempt: str):
        self.url = url
        self.owner = owner
        self.attempt = attempt
        self._version = version
        self._acquired = acquired
        self._lock = threading.Lock()
        self.lost = False
        self.lost_reason: str | None = None

    def refresh(self) -> bool:
        """Rewrite the heartbeat; returns False (and marks the lease lost) if it was taken over."""
        with self._lock:
            if self.lost:
                return False
            blob = replace_if_version(self.url, _encode(self.owner, self._acquired, self.attempt), self._version)
            if blob is None:
                self.lost = True
                self.lost_reason = "lease taken over by another executor (or deleted) while its step ran"
                logger.error("lease %s was taken over or removed; this run will not mark it done", self.url)
                return False
            self._version = blob.version
            return True

    def release(self) -> None:
        with self._lock:
            if not self.lost:
                delete_if_version(self.url, self._version)
            self.lost = True


def lease_url(output_path: str) -> str:
    return join(output_path, LEASE_FILE)


def read_lease(output_path: str) -> dict | None:
    """The current lease document, or None if there is none (or it is unreadable garbage)."""
    blob = read_versioned(lease_url(output_path))
    return None if blob is None else _decode(blob.data)


def try_acquire(output_path: str, owner: str, config: LeaseConfig) -> Lease | None:
    """Take the step's lease if it is free or stale. None if a live executor holds it."""
    url = lease_url(output_path)
    now = time.time()
    attempt = uuid.uuid4().hex
    blob = create_only(url, _encode(owner, now, attempt))
    if blob is not None:
        return Lease(url, owner, blob.version, now, attempt)
    current = read_versioned(url)
    if current is None:  # released between our two calls: race for it again next poll
        return None
    doc = _decode(current.data)
    # A lease we cannot parse has no heartbeat to judge by; take it over only after watching that same
    # garbage for a full stale period (a live holder would have rewritten it by then).
    if doc is not None and now - doc["heartbeat"] < config.stale_after_s:
        return None
    if doc is None and not _garbage_is_stale(url, current.version, config, now):
        return None
    blob = replace_if_version(url, _encode(owner, now, attempt), current.version)
    if blob is None:
        return None
    previous = doc["owner"] if doc else "an unreadable lease"
    logger.warning("took over stale lease %s from %s", url, previous)
    return Lease(url, owner, blob.version, now, attempt)


_first_seen_garbage: dict[tuple[str, str], float] = {}


def _garbage_is_stale(url: str, version: str, config: LeaseConfig, now: float) -> bool:
    first = _first_seen_garbage.setdefault((url, version), now)
    return now - first >= config.stale_after_s


class Heartbeat:
    """One daemon thread refreshing every lease this executor holds; ``on_lost(lease)`` is called (on that
    thread) as soon as a refresh finds the lease taken over or gone."""

    def __init__(self, config: LeaseConfig, on_lost: Callable[[Lease], None] | None = None):
        self._config = config
        self._on_lost = on_lost
        self._leases: set[Lease] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="marin-lease-heartbeat", daemon=True)
        self._thread.start()

    def add(self, lease: Lease) -> None:
        with self._lock:
            self._leases.add(lease)

    def remove(self, lease: Lease) -> None:
        with self._lock:
            self._leases.discard(lease)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self._config.heartbeat_s):
            with self._lock:
                leases = list(self._leases)
            for lease in leases:
                try:
                    held = lease.refresh()
                except Exception:  # a transient store error must not kill the heartbeat thread
                    logger.exception("heartbeat for %s failed; will retry", lease.url)
                    continue
                if not held and self._on_lost is not None:
                    self.remove(lease)
                    try:
                        self._on_lost(lease)
                    except Exception:
                        logger.exception("reacting to the loss of %s failed", lease.url)


def _encode(owner: str, acquired: float, attempt: str) -> bytes:
    return json.dumps({"owner": owner, "attempt": attempt, "acquired": acquired, "heartbeat": time.time()}).encode()


def _decode(data: bytes) -> dict | None:
    """The lease document, or None for anything this module would not have written (truncated JSON, a
    heartbeat that is not a finite number, ...): such a lease is judged by ``_garbage_is_stale``."""
    try:
        doc = json.loads(data)
    except ValueError:
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("owner"), str):
        return None
    heartbeat = doc.get("heartbeat")
    if isinstance(heartbeat, bool) or not isinstance(heartbeat, (int, float)) or not math.isfinite(heartbeat):
        return None
    return doc
