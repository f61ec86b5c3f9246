"""The local store's compare-and-swap lock: a holder frozen (SIGSTOP) or killed inside it blocks the other
writers for at most ``LOCK_BREAK_AFTER_S`` (dead: not at all), and its voided write never lands."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from marin.storage import create_only, local_lock, read_versioned, replace_if_version
from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
BREAK_S = 1.0


def start_holder(url: str, version: str, op: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "storage" / "frozen_holder.py"), url, version, op],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def wait_until_stopped(proc: subprocess.Popen) -> None:
    """Until the holder stops itself inside the lock, for as long as it runs (it imports the lab first)."""
    stopped = lambda: Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"  # noqa: E731
    wait_for(stopped, "the holder to stop inside the lock", proc=proc, poll_s=0.01)


def race_replace(url: str, version: str, n: int) -> list[bytes | None]:
    """``n`` writers swap the same version at once; each result within the break bound (plus slack)."""
    results: list[bytes | None] = [b"blocked"] * n

    def swap(i: int) -> None:
        blob = replace_if_version(url, f"writer {i}".encode(), version)
        results[i] = None if blob is None else blob.data

    threads = [threading.Thread(target=swap, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(BREAK_S + 10)
    return list(results)  # as they stood now: a blocked writer may finish once the holder resumes


@pytest.mark.parametrize("op", ["replace", "delete"])
def test_a_holder_frozen_inside_the_lock_blocks_no_one_and_its_write_never_lands(tmp_path, monkeypatch, op):
    monkeypatch.setattr(local_lock, "LOCK_BREAK_AFTER_S", BREAK_S)
    url = str(tmp_path / ".executor_lease")
    first = create_only(url, b"first")
    holder = start_holder(url, first.version, op)
    try:
        wait_until_stopped(holder)
        assert os.path.isdir(url + ".lock"), "the holder must be frozen while it holds the lock"
        started = time.time()
        results = race_replace(url, first.version, 3)
        waited = time.time() - started
    finally:
        os.kill(holder.pid, signal.SIGCONT)
    out, _ = holder.communicate()  # its voided write and exit: work, bounded by the test's timeout
    assert b"blocked" not in results, f"a writer was still blocked behind the frozen holder: {results}"
    winners = [r for r in results if r is not None]
    assert len(winners) == 1, results  # one swap from one version, even across a broken lock
    assert waited < BREAK_S + 3, waited
    assert json.loads(out.strip().splitlines()[-1]) is False, out  # the frozen holder's write was voided
    assert read_versioned(url).data == winners[0]
    assert sorted(os.listdir(tmp_path)) == [".executor_lease"], "no lock or staging directory left behind"


def test_a_holder_killed_inside_the_lock_is_broken_at_once(tmp_path):
    url = str(tmp_path / "f")
    first = create_only(url, b"first")
    holder = start_holder(url, first.version, "replace")
    wait_until_stopped(holder)
    holder.kill()
    holder.wait(30)
    started = time.time()
    assert replace_if_version(url, b"second", first.version) is not None
    assert time.time() - started < local_lock.LOCK_BREAK_AFTER_S / 2  # a dead holder is not waited for
    assert read_versioned(url).data == b"second"
    assert sorted(os.listdir(tmp_path)) == ["f"]


def test_a_held_lock_makes_writers_wait_and_then_serializes_them(tmp_path):
    """While a live holder has the lock (younger than the bound) another writer waits; the version it
    swaps from decides, so exactly one of two swaps from one version lands."""
    url = str(tmp_path / "f")
    first = create_only(url, b"first")
    with local_lock.acquire(url, b"by hand") as held:
        results = []
        waiter = threading.Thread(target=lambda: results.append(replace_if_version(url, b"waiter", first.version)))
        waiter.start()
        time.sleep(0.3)
        assert waiter.is_alive() and read_versioned(url) == first
        held.commit_replace()
    waiter.join(10)
    assert results == [None] and read_versioned(url).data == b"by hand"
