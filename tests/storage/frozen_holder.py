"""A process that stops itself (SIGSTOP) while it holds the local store's lock on a file, right after it
read the version it is about to replace or delete -- the worst moment to freeze:

    python tests/storage/frozen_holder.py /store/.executor_lease VERSION replace|delete

Resumed (SIGCONT), it finishes the call and prints its result as JSON: true if its write landed.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable

from marin.storage import conditional, delete_if_version, replace_if_version


def holds_the_lock(path: str) -> bool:
    try:
        return any(token.split("-")[1] == str(os.getpid()) for token in os.listdir(f"{path}.lock"))
    except (FileNotFoundError, IndexError):
        return False


def stop_inside_the_lock(when: Callable[[str], bool] = lambda url: True) -> None:
    """From now on, this process stops itself after a read made under its own lock on a file, if
    ``when(url)`` (instrumentation for tests: the read is the last step before the write)."""
    read = conditional._LocalBackend.read

    def read_then_stop(self, url):
        blob = read(self, url)
        if holds_the_lock(url) and when(url):
            os.kill(os.getpid(), signal.SIGSTOP)
        return blob

    conditional._LocalBackend.read = read_then_stop


if __name__ == "__main__":
    url, version, op = sys.argv[1:]
    stop_inside_the_lock()
    if op == "replace":
        landed = replace_if_version(url, f"frozen holder {os.getpid()}".encode(), version) is not None
    else:
        landed = delete_if_version(url, version)
    print(json.dumps(landed))
