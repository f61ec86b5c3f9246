"""Create-only writes and compare-and-swap, raced by real processes on local disk."""

import multiprocessing
import os

import pytest

from marin.storage import (
    create_only,
    delete_if_version,
    read_versioned,
    replace_if_version,
    write_atomic,
    read_text,
)


def _race_create(url, who, barrier, results):
    barrier.wait()
    results.put((who, create_only(url, f"owner {who}".encode()) is not None))


def _race_increment(url, n, barrier):
    """Increment a counter file n times with compare-and-swap retries: lost updates would show."""
    barrier.wait()
    done = 0
    while done < n:
        blob = read_versioned(url)
        if replace_if_version(url, str(int(blob.data) + 1).encode(), blob.version) is not None:
            done += 1


@pytest.fixture
def ctx():
    return multiprocessing.get_context("fork")


def test_create_only_has_exactly_one_winner_among_processes(tmp_path, ctx):
    url = str(tmp_path / "lease")
    for round_ in range(5):
        target = f"{url}-{round_}"
        barrier, results = ctx.Barrier(8), ctx.Queue()
        procs = [ctx.Process(target=_race_create, args=(target, i, barrier, results)) for i in range(8)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(30)
        outcomes = dict(results.get(timeout=5) for _ in procs)
        winners = [who for who, won in outcomes.items() if won]
        assert len(winners) == 1
        assert read_versioned(target).data == f"owner {winners[0]}".encode()


def test_compare_and_swap_loses_no_update_across_processes(tmp_path, ctx):
    url = str(tmp_path / "counter")
    assert create_only(url, b"0") is not None
    barrier = ctx.Barrier(4)
    procs = [ctx.Process(target=_race_increment, args=(url, 50, barrier)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert read_versioned(url).data == b"200"


def test_replace_and_delete_require_the_current_version(tmp_path):
    url = str(tmp_path / "f")
    first = create_only(url, b"a")
    assert create_only(url, b"b") is None
    second = replace_if_version(url, b"b", first.version)
    assert second is not None
    assert replace_if_version(url, b"c", first.version) is None  # stale version
    assert not delete_if_version(url, first.version)
    assert delete_if_version(url, second.version)
    assert read_versioned(url) is None
    assert create_only(url, b"again") is not None


def test_create_only_never_exposes_partial_content(tmp_path):
    url = str(tmp_path / "big")
    payload = os.urandom(1 << 20)
    create_only(url, payload)
    assert read_versioned(url).data == payload
    assert [p.name for p in tmp_path.iterdir()] == ["big"]  # no temp files left behind


def test_memory_filesystem_falls_back_with_a_warning(caplog):
    url = "memory://marin-test/lease"
    assert create_only(url, b"x") is not None
    assert create_only(url, b"y") is None
    assert "no conditional writes" in caplog.text
    blob = read_versioned(url)
    assert replace_if_version(url, b"z", blob.version) is not None
    assert delete_if_version(url, read_versioned(url).version)


def test_write_atomic_replaces_whole_file(tmp_path):
    url = str(tmp_path / "sub" / "info.json")
    write_atomic(url, "one")
    write_atomic(url, "two")
    assert read_text(url) == "two"
    assert os.listdir(tmp_path / "sub") == ["info.json"]
