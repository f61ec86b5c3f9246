"""Create-only writes and compare-and-swap, raced by real processes on local disk, GCS and S3 servers."""

import multiprocessing
import os

import pytest

from marin.storage import (
    backend_name,
    create_only,
    delete_if_version,
    join,
    read_text,
    read_versioned,
    replace_if_version,
    write_atomic,
)


def _race_create(prefix, who, rounds, barrier, results):
    """Each round, every process tries to create the same fresh file at the same moment."""
    for r in range(rounds):
        barrier.wait()
        results.put((r, who, create_only(join(prefix, f"lease-{r}"), f"owner {who}".encode()) is not None))


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
    # spawn, not fork: the pytest process runs server and Ray threads, and a forked child could inherit
    # a lock held by one of them.
    return multiprocessing.get_context("spawn")


def _join_all(procs, timeout):
    for p in procs:
        p.join(timeout)
    assert [p.exitcode for p in procs] == [0] * len(procs)


def test_store_prefix_is_served_by_its_real_backend(store_prefix):
    expected = {"gs": "gcs", "s3": "s3"}.get(store_prefix.split("://")[0], "local")
    assert backend_name(store_prefix) == expected  # not the process-local fallback


def test_create_only_has_exactly_one_winner_among_processes(store_prefix, ctx):
    rounds, n = 5, 8
    barrier, results = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_race_create, args=(store_prefix, i, rounds, barrier, results)) for i in range(n)]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=120) for _ in range(rounds * n)]
    _join_all(procs, 60)
    for r in range(rounds):
        winners = [who for round_, who, won in outcomes if round_ == r and won]
        assert len(winners) == 1, f"round {r}: winners {winners}"
        assert read_versioned(join(store_prefix, f"lease-{r}")).data == f"owner {winners[0]}".encode()


def test_compare_and_swap_loses_no_update_across_processes(store_prefix, ctx):
    url = join(store_prefix, "counter")
    assert create_only(url, b"0") is not None
    barrier = ctx.Barrier(4)
    procs = [ctx.Process(target=_race_increment, args=(url, 25, barrier)) for _ in range(4)]
    for p in procs:
        p.start()
    _join_all(procs, 120)
    assert read_versioned(url).data == b"100"


def test_replace_and_delete_require_the_current_version(store_prefix):
    url = join(store_prefix, "f")
    first = create_only(url, b"a")
    assert create_only(url, b"b") is None
    assert read_versioned(url) == first
    second = replace_if_version(url, b"b", first.version)
    assert second is not None and second.version != first.version
    assert replace_if_version(url, b"c", first.version) is None  # stale version
    assert not delete_if_version(url, first.version)
    assert read_versioned(url) == second
    assert delete_if_version(url, second.version)
    assert read_versioned(url) is None
    assert replace_if_version(url, b"d", second.version) is None  # gone: nothing to replace
    assert not delete_if_version(url, second.version)
    assert create_only(url, b"again") is not None


def test_create_only_never_exposes_partial_content(tmp_path):
    url = str(tmp_path / "big")
    payload = os.urandom(1 << 20)
    create_only(url, payload)
    assert read_versioned(url).data == payload
    assert [p.name for p in tmp_path.iterdir()] == ["big"]  # no temp files left behind


def test_memory_filesystem_falls_back_with_a_warning(caplog):
    url = "memory://marin-test/lease"
    assert backend_name(url) == "process-local"
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
