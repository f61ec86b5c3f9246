"""The suite's one way to wait on a process's progress (tests/waiting.py, issue 47)."""

import subprocess
import sys
import threading
import time

import pytest

from tests.waiting import wait_for


def test_waits_for_as_long_as_the_process_runs_and_fails_at_once_with_its_output_when_it_exits(tmp_path):
    flag = tmp_path / "ready"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import time, pathlib; time.sleep(1); pathlib.Path({str(flag)!r}).touch(); time.sleep(30)",
        ]
    )
    try:
        wait_for(flag.exists, "the flag", proc=proc)
    finally:
        proc.kill()
        proc.wait()
    dead = subprocess.Popen(
        [sys.executable, "-c", "print('what went wrong'); raise SystemExit(3)"], stdout=subprocess.PIPE, text=True
    )
    started = time.monotonic()
    with pytest.raises(pytest.fail.Exception, match="(?s)stopped while waiting for nothing.*what went wrong"):
        wait_for(lambda: False, "nothing", proc=dead)
    assert time.monotonic() - started < 30


def test_a_thread_counts_as_the_process_and_a_wait_on_no_one_needs_a_bound():
    thread = threading.Thread(target=time.sleep, args=(0.2,))
    thread.start()
    with pytest.raises(pytest.fail.Exception, match="stopped while waiting"):
        wait_for(lambda: False, "nothing", proc=thread)
    with pytest.raises(ValueError, match="give the process"):
        wait_for(lambda: False, "nothing")
    with pytest.raises(AssertionError, match="timed out after 0.1 s waiting for nothing"):
        wait_for(lambda: False, "nothing", timeout=0.1)
