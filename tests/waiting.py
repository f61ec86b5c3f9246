"""Waiting in tests without guessing how fast the machine is (issue 47).

    wait_for(lambda: ready(url), "the server to answer", proc=server, log=log_path)

A wait on something a live process (or thread) is working towards has no wall-clock bound of its own: it
lasts as long as the process runs, and the test's own timeout (pytest-timeout; 300 s unless the test says
otherwise) is the bound on a hung one. It fails at once, with the process's output, when the process exits
first. ``timeout`` is for what must happen within a bound whatever the host's load (a fence stopping a
task within a heartbeat), or for a condition no process is working towards.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest


def alive(proc: subprocess.Popen | threading.Thread) -> bool:
    return proc.is_alive() if isinstance(proc, threading.Thread) else proc.poll() is None


def wait_for(
    predicate: Callable[[], bool],
    what: str,
    timeout: float | None = None,
    proc: subprocess.Popen | threading.Thread | None = None,
    log: str | Path | None = None,
    poll_s: float = 0.02,
) -> None:
    """Poll ``predicate`` until it is true. With ``proc``: for as long as ``proc`` is alive (failing with the
    tail of ``log``, or of its stdout pipe, when it stops first); ``timeout`` (seconds) adds a fixed bound,
    and is required without ``proc``."""
    if proc is None and timeout is None:
        raise ValueError(f"waiting for {what}: give the process that works towards it, or a timeout")
    deadline = None if timeout is None else time.monotonic() + timeout
    while not predicate():
        if proc is not None and not alive(proc):
            if predicate():  # it finished, and got there on its way out
                return
            output = Path(log).read_text() if log else _piped_output(proc)
            pytest.fail(f"{proc} stopped while waiting for {what}:\n{output[-3000:]}")
        assert deadline is None or time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(poll_s)


def _piped_output(proc: subprocess.Popen | threading.Thread) -> str:
    """What an exited process wrote to its stdout pipe, if it had one."""
    out = getattr(proc, "stdout", None)
    if out is None:
        return ""
    text = out.read()
    return text.decode(errors="replace") if isinstance(text, bytes) else text
