"""A lock on one local file that a frozen holder cannot keep: the local store's compare-and-swap.

``flock`` on the step directory made every compare-and-swap there wait for a holder that was SIGSTOPped
inside one, for as long as it stayed stopped (issue 36). This lock is a directory whose holder's pending
write lives inside it, so a waiter can break the lock *and* void that write:

    lease.lock/                     the lock: exists while someone holds it (a non-empty directory)
    lease.lock/<token>              a replace: the holder's new content (``<token>`` = random id, pid, host)
    lease.lock/<token>/             a delete: the holder's room, where the file will be moved

To take the lock, a holder builds ``lease.lock-<id>/<token>`` privately and renames it to ``lease.lock``
(a rename onto a non-empty directory fails, so exactly one racer wins). It commits with one rename:
``rename(lease.lock/<token>, lease)``, or for a delete ``rename(lease, lease.lock/<token>/gone)``. A waiter
that finds the lock older than ``LOCK_BREAK_AFTER_S``, or held by a dead process on this host, renames it
away and removes what it holds: the old holder's commit, whenever it resumes, finds no ``<token>``
(``ENOENT``) and the holder retries the whole compare-and-swap against the file as it now is. So a break
never lets two writes from one version land, and breaking a live but slow holder costs it a retry, not a
lost or a double write.

A process stopped by a signal is never inside ``rename(2)`` (signals are acted on when the kernel returns
to user space), so a frozen holder's commit is always voided by a break. Directories left by a process
killed while it waited (``lease.lock-<id>``) start with the file's own name, so ``.executor_*`` litter stays
out of output manifests.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import socket
import time
import uuid

logger = logging.getLogger(__name__)

LOCK_BREAK_AFTER_S = 5.0
"""A lock held this long is broken by the next waiter. A compare-and-swap holds it for a few milliseconds
at most; breaking is always safe (see the module docstring), so this only bounds how long a frozen
holder can delay the others."""

_POLL_S = (0.0005, 0.02)
"""First and largest wait between attempts to take a held lock."""


class LockBroken(Exception):
    """Our lock was broken before we committed: the write did not happen; retry the compare-and-swap."""


class FileLock:
    """A held lock on ``path`` (from ``acquire``); leaving the ``with`` block releases it."""

    def __init__(self, path: str, deleting: bool):
        self.path = path
        self.deleting = deleting
        self.lock = f"{path}.lock"
        self.token = f"{uuid.uuid4().hex[:12]}-{os.getpid()}-{socket.gethostname()}"
        self._mine = os.path.join(self.lock, self.token)

    def __enter__(self) -> FileLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def commit_replace(self) -> None:
        """Publish the staged content at ``path``; raises ``LockBroken`` if the lock is no longer ours."""
        try:
            os.rename(self._mine, self.path)
        except FileNotFoundError as e:
            raise LockBroken(self.lock) from e

    def commit_delete(self) -> None:
        """Remove ``path`` (into our room); raises ``LockBroken`` if the lock is no longer ours."""
        try:
            os.rename(self.path, os.path.join(self._mine, "gone"))
        except FileNotFoundError as e:
            raise LockBroken(self.lock) from e

    def release(self) -> None:
        """Remove what we staged and the lock, unless it is no longer ours (a newer lock is never empty)."""
        with contextlib.suppress(FileNotFoundError):
            if self.deleting:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(self._mine, "gone"))
                os.rmdir(self._mine)
            else:
                os.unlink(self._mine)  # still there: not committed
        try:
            os.rmdir(self.lock)
        except OSError as e:
            if e.errno not in (errno.ENOENT, errno.ENOTEMPTY, errno.EEXIST):
                raise


def acquire(path: str, data: bytes | None) -> FileLock:
    """Take the lock on ``path`` with ``data`` staged (None for a delete), waiting for the current holder or
    breaking its lock."""
    held = FileLock(path, deleting=data is None)
    staging = f"{held.lock}-{uuid.uuid4().hex[:12]}"
    os.mkdir(staging)
    try:
        if data is None:
            os.mkdir(os.path.join(staging, held.token))
        else:
            with open(os.path.join(staging, held.token), "wb") as f:
                f.write(data)
        _publish(staging, held.lock)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return held


def _publish(staging: str, lock: str) -> None:
    """Rename ``staging`` to ``lock`` once no one holds it (a rename onto a non-empty directory fails)."""
    wait = _POLL_S[0]
    while True:
        os.utime(staging)  # the lock's age counts from when it was taken, not from when we began to wait
        try:
            os.rename(staging, lock)
            return
        except OSError as e:
            if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
        if _breakable(lock):
            _break(lock)
            continue
        time.sleep(wait)
        wait = min(2 * wait, _POLL_S[1])


def _breakable(lock: str) -> bool:
    """Held past ``LOCK_BREAK_AFTER_S``, or by a process of this host that no longer runs."""
    try:
        age = time.time() - os.stat(lock).st_mtime
        tokens = os.listdir(lock)
    except FileNotFoundError:
        return False  # released meanwhile: just try again
    if age > LOCK_BREAK_AFTER_S:
        return True
    return any(_holder_is_dead(token) for token in tokens)


def _holder_is_dead(token: str) -> bool:
    parts = token.split("-", 2)
    if len(parts) != 3 or parts[2] != socket.gethostname() or not parts[1].isdigit():
        return False
    pid = int(parts[1])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # someone else's live process
    try:  # an exited child not yet reaped still answers kill(pid, 0)
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return False


def _break(lock: str) -> None:
    """Move ``lock`` away and remove its room, voiding its holder's pending commit."""
    broken = f"{lock}-broken-{uuid.uuid4().hex[:12]}"
    try:
        os.rename(lock, broken)
    except FileNotFoundError:
        return  # released, or another waiter broke it first
    holders = os.listdir(broken)
    shutil.rmtree(broken, ignore_errors=True)
    logger.warning("broke the lock %s held by %s (stopped, or gone)", lock, ", ".join(holders) or "nobody")
