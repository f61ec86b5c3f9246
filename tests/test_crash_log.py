"""A pytest run that dies of a segmentation fault leaves the test and the crashing thread's stack where
``make test`` prints them (tests/crash_log.py), with idle threads beside it as CI's run had."""

import os
import subprocess
import sys
from pathlib import Path

from tests.crash_log import summary

ROOT = Path(__file__).resolve().parents[1]

CRASHING = """
import ctypes, socket, threading, time


def idle_handler():  # like the loopback servers' handler threads: blocked in a read
    a, b = socket.socketpair()
    a.recv(1)


def test_first_passes():
    for _ in range(3):
        threading.Thread(target=idle_handler, daemon=True).start()
    time.sleep(0.2)


def crash_here():
    ctypes.string_at(0)


def test_second_crashes():
    crash_here()


def test_third_never_runs():
    pass
"""

CONFTEST = "from tests.conftest import pytest_configure, pytest_runtest_logstart  # noqa: F401\n"


def _crashing_run(tmp_path, *args: str) -> tuple[subprocess.CompletedProcess, str]:
    """The crashing tests run by pytest with ``args``, and what ``python -m tests.crash_log`` then prints."""
    (tmp_path / "test_crashing.py").write_text(CRASHING)
    (tmp_path / "conftest.py").write_text(CONFTEST)
    log = tmp_path / "out" / "crash.txt"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MARIN_CRASH_LOG": str(log)}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args, str(tmp_path / "test_crashing.py")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    report = subprocess.run(
        [sys.executable, "-m", "tests.crash_log", str(log)], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    return run, report


def test_a_segfaulting_run_names_the_test_and_the_crashing_frames(tmp_path):
    run, report = _crashing_run(tmp_path)
    assert run.returncode < 0 or run.returncode >= 128, run.stdout + run.stderr  # killed by the signal
    lines = report.strip().splitlines()
    assert lines[1] == "Fatal Python error: Segmentation fault"
    assert lines[2] == "while running: test_crashing.py::test_second_crashes"
    assert lines[3].startswith("Current thread 0x") and lines[3].endswith("[MainThread]")
    frames = [line for line in lines if line.startswith("  File ")]
    assert "in crash_here" in frames[1] and "in test_second_crashes" in frames[2], frames  # [0]: ctypes
    assert not any("/_pytest/" in frame for frame in frames)
    assert not any("idle_handler" in line for line in lines)
    assert lines[-1].endswith("other threads in the dump") and int(lines[-1].split()[0]) >= 3


def test_a_worker_that_segfaults_under_xdist_is_named_in_its_own_crash_log(tmp_path):
    """``make test`` runs two xdist workers: the one that crashed wrote ``crash.txt.<worker id>``."""
    run, report = _crashing_run(tmp_path, "-n", "2")
    assert run.returncode == 1 and "test_second_crashes" in run.stdout, run.stdout + run.stderr
    lines = report.strip().splitlines()
    assert lines[0].startswith("== the run crashed (") and ".gw" in lines[0], report
    assert lines[1:3] == [
        "Fatal Python error: Segmentation fault",
        "while running: test_crashing.py::test_second_crashes",
    ]
    assert "in crash_here" in report


def test_a_run_that_fails_without_a_crash_prints_nothing(tmp_path):
    assert summary("", "tests/x.py::test_y") == []
    (tmp_path / "crash.txt").write_text("")
    out = subprocess.run(
        [sys.executable, "-m", "tests.crash_log", str(tmp_path / "crash.txt")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout == ""


def test_a_long_stack_keeps_its_innermost_frames():
    frames = [f'  File "f.py", line {i} in f{i}' for i in range(100)]
    dump = "\n".join(["Fatal Python error: Aborted", "", "Current thread 0x1 (most recent call first):", *frames])
    out = summary(dump, None)
    assert out[:3] == [
        "Fatal Python error: Aborted",
        "while running: (unknown)",
        "Current thread 0x1 (most recent call first): [a thread started after the test began]",
    ]
    assert out[3:23] == frames[:20] and "80 outer frames" in out[-2] and out[-1] == "0 other threads in the dump"


def test_a_signal_in_a_native_thread_says_so_and_names_the_threads_alive():
    dump = "\n".join(
        ["Fatal Python error: Segmentation fault", "", "Thread 0x00000000000000aa (most recent call first):"]
        + ['  File "socket.py", line 706 in readinto']
    )
    out = summary(dump, "tests/x.py::test_y\nmemory maps after x.py: 65012 of 65530\n0x00000000000000aa moto-handler\n")
    assert out[1:3] == ["while running: tests/x.py::test_y", "memory maps after x.py: 65012 of 65530"]
    assert "native thread" in out[3] and out[-1] == "1 other threads in the dump"
