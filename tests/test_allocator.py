"""The CPU allocator tuning: freed multi-GiB blocks stay in the heap (no brk shrink, no re-faulting)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

# Run in a fresh process: the tuning is process-wide. Allocates 3 GiB of *virtual* heap (never touched),
# frees all of it, and reports whether the program break moved back down.
_SCRIPT = """
import ctypes, ctypes.util, sys
from marin.allocator import keep_large_buffers_mapped
libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
libc.sbrk.restype = ctypes.c_void_p
libc.sbrk.argtypes = [ctypes.c_ssize_t]
if sys.argv[1] == "tuned":
    assert keep_large_buffers_mapped()
else:  # the previous tuning: no mmap, and the largest trim threshold an int can say (2 GiB - 1)
    assert libc.mallopt(-4, 0) == 1 and libc.mallopt(-1, 2**31 - 1) == 1
blocks = [libc.malloc(256 << 20) for _ in range(12)]  # 3 GiB in blocks a step's temporaries might be
assert all(blocks), "malloc failed"
top = libc.sbrk(0)
for block in blocks:
    libc.free(block)
print(top - libc.sbrk(0))  # bytes handed back to the OS
"""


def _heap_given_back(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", _SCRIPT, mode], check=False, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    return int(out.stdout.strip())


@pytest.mark.skipif(sys.platform != "linux", reason="needs glibc malloc (Linux)")
def test_freed_multi_gib_heap_top_is_kept():
    # With a finite threshold glibc trims the freed 3 GiB top (the control proves the test can fail) ...
    assert _heap_given_back("control") >= 2 << 30
    # ... with it nothing goes back, so the next step reuses mapped pages instead of faulting them in.
    assert _heap_given_back("tuned") == 0


# A data step's batch: 20,000 records of ~1 KiB each (20 MiB) built, freed, and a 1 MiB read buffer.
_BATCH_SCRIPT = """
import ctypes, ctypes.util, json, sys
from marin.allocator import keep_record_batches_mapped
libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.sbrk.restype = ctypes.c_void_p
libc.sbrk.argtypes = [ctypes.c_ssize_t]
if sys.argv[1] == "tuned":
    assert keep_record_batches_mapped()
records = [libc.malloc(1024) for _ in range(20_000)]
assert all(records), "malloc failed"
top = libc.sbrk(0)
for block in records:
    libc.free(block)
given_back = top - libc.sbrk(0)
buffer = libc.malloc(1 << 20)
on_heap = buffer < libc.sbrk(0)  # mmap'd blocks live far above the program break
libc.free(buffer)
print(json.dumps({"given_back": given_back, "buffer_on_heap": bool(on_heap)}))
"""


def _batch_memory(mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", _BATCH_SCRIPT, mode], check=False, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


@pytest.mark.skipif(sys.platform != "linux", reason="needs glibc malloc (Linux)")
def test_a_freed_record_batch_stays_mapped_for_the_next():
    control, tuned = _batch_memory("control"), _batch_memory("tuned")
    # glibc's default hands the freed batch back (and faults it in again for the next batch) ...
    assert control["given_back"] >= 16 << 20 and not control["buffer_on_heap"]
    # ... the data steps' policy keeps it, and serves the 1 MiB read buffer from the heap, not a fresh mmap.
    assert tuned["given_back"] == 0 and tuned["buffer_on_heap"]


def test_large_buffers_env_is_the_policy_as_tunables_merged_with_others():
    from marin.allocator import LARGE_BUFFER_TUNABLES, large_buffers_env

    ours = ":".join(f"{name}={value}" for name, value in LARGE_BUFFER_TUNABLES)
    assert large_buffers_env({}) == {"GLIBC_TUNABLES": ours}
    # other tunables are kept, an older setting of ours is replaced
    merged = large_buffers_env({"GLIBC_TUNABLES": "glibc.malloc.arena_max=4:glibc.cpu.hwcaps=-AVX"})
    assert merged == {"GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX:" + ours}
    assert "glibc.malloc.trim_threshold=18446744073709551615" in ours  # SIZE_MAX: never trim


def test_a_process_started_with_the_tunables_knows_it_and_others_do_not():
    from marin.allocator import large_buffers_env

    script = "from marin.allocator import started_with_large_buffers as s; print(s())"
    run = lambda env: subprocess.run(  # noqa: E731
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    base = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    assert run({**base, **large_buffers_env(base)}) == "True"
    assert run(base) == "False"


# A step's temporaries: 64 MiB malloc'd and written, then how much of the process's memory is in huge pages.
_HUGE_SCRIPT = """
import ctypes, ctypes.util
libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
block = libc.malloc(64 << 20)
assert block, "malloc failed"
ctypes.memset(block, 1, 64 << 20)
rollup = open("/proc/self/smaps_rollup").read().splitlines()
print(next(int(line.split()[1]) for line in rollup if line.startswith("AnonHugePages:")) << 10)
"""


def _thp_mode() -> str | None:
    try:
        text = open("/sys/kernel/mm/transparent_hugepage/enabled").read()
    except OSError:
        return None
    return text[text.index("[") + 1 : text.index("]")]


def _glibc_version() -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in os.confstr("CS_GNU_LIBC_VERSION").split()[1].split("."))
    except (AttributeError, ValueError, OSError, IndexError):
        return ()


@pytest.mark.skipif(_thp_mode() in (None, "never"), reason="needs transparent huge pages (Linux, not 'never')")
@pytest.mark.skipif(_glibc_version() < (2, 35), reason="glibc.malloc.hugetlb is a tunable of glibc >= 2.35")
def test_a_process_started_with_the_tunables_backs_its_heap_with_huge_pages():
    from marin.allocator import large_buffers_env

    base = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    huge = lambda env: int(  # noqa: E731
        subprocess.run([sys.executable, "-c", _HUGE_SCRIPT], env=env, capture_output=True, text=True, check=True).stdout
    )
    assert huge({**base, **large_buffers_env(base)}) >= 32 << 20  # most of the 64 MiB, in 2 MiB pages
    if _thp_mode() == "madvise":  # the control: without the tunable glibc never asks for them
        assert huge(base) < 8 << 20
