"""Write fences: refuse writes under a directory once this process no longer owns it.

A step's task runs while its executor holds the step's lease. If the lease is lost (taken over after a
pause or a partition), the task must stop writing into the step's output directory, because the new
holder now writes there. The executor installs a guard for that directory in the task's process:

    guard_prefix("gs://b/lab/tokenized/x-1a2b", fence.check)    # check() raises LeaseLost once lost
    write_atomic("gs://b/lab/tokenized/x-1a2b/part-0.jsonl", data)  # calls check_fence(url) first

Every write helper of ``marin.storage`` (``write_atomic``, ``open_url`` for writing, ``RecordWriter``,
``makedirs``, ``delete``, the conditional writes) calls ``check_fence`` first. Code that writes through
other libraries (tensorstore, a raw fsspec handle) should call ``check_fence(url)`` before it publishes a
file (docs/executor.md, "Fencing"). Files named ``.executor_*`` directly in the guarded directory (status,
lease, info, manifest) are the executor's own: a step's task writing one gets a ``PermissionError``. With no
guard installed (the executor's own process, notebooks, tests) the check is a dictionary lookup.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

METADATA_PREFIX = ".executor_"
"""Names of the executor's own files in a step directory; the lease holder's executor writes them."""
FENCED_MARKER_PREFIX = ".executor_fenced-"
"""The one executor file a step's task writes: its fence's record of why it stopped."""


class LeaseLost(RuntimeError):
    """This process's step lost its lease: another executor now owns the output directory."""


_guards: dict[str, Callable[[], None]] = {}
_lock = threading.Lock()


def _normalize(url: str) -> str:
    return (url.removeprefix("file://")).rstrip("/")


def guard_prefix(prefix: str, check: Callable[[], None]) -> None:
    """Call ``check()`` before every write under ``prefix`` made through ``marin.storage``."""
    with _lock:
        _guards[_normalize(prefix)] = check


def unguard_prefix(prefix: str) -> None:
    with _lock:
        _guards.pop(_normalize(prefix), None)


def check_fence(url: str) -> None:
    """Raise ``LeaseLost`` if ``url`` lies in a guarded directory whose lease this process has lost."""
    if not _guards:
        return
    target = _normalize(url)
    for prefix, check in list(_guards.items()):
        if target == prefix or target.startswith(prefix + "/"):
            first = target[len(prefix) + 1 :].split("/", 1)[0]
            if first.startswith(FENCED_MARKER_PREFIX):
                continue  # the fence's own record of why it stopped the task
            if first.startswith(METADATA_PREFIX):
                raise PermissionError(
                    f"{url}: {METADATA_PREFIX}* files belong to the executor; a step's task must "
                    "not write them (a copied upstream directory? skip its .executor_* files)"
                )
            check()
