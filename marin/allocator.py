"""glibc malloc tuning, process-wide, for the two ways the lab's processes use memory.

- ``keep_large_buffers_mapped()`` (the trainer on CPU): glibc serves allocations above its mmap threshold
  (at most 32 MB) with a fresh ``mmap`` and returns them with ``munmap`` on free, so every step re-faults and
  zero-fills its big temporaries (attention scores, logits: 64 MB each for the ``small`` preset), kernel time in
  ``clear_page_erms`` that profiles show (docs/trainer.md). No mmap and no trimming keep those pages in the
  heap, reused step after step. The trim threshold must be unbounded, not merely large: a step frees
  gigabytes at once (the ``small`` step's heap top is past 2 GiB), and any finite threshold below that hands
  the top back with ``brk`` and re-faults it on the next step.
- ``keep_record_batches_mapped()`` (data-step tasks, ``marin.parallel``): a step holds a batch of records
  (~1 MiB of encoded lines, a few hundred parsed pages), frees it, and builds the next. With glibc's default
  (trim above 128 KiB) the freed heap top goes back to the OS after every batch and the next batch faults it
  in again: orjson encoding 10,000 small records into a batch took 2.3 us each instead of 0.17
  (docs/data_quality.md). A trim threshold of 64 MiB keeps the batch's pages (256 MiB measured no better);
  fixing the mmap threshold at glibc's own ceiling (32 MiB) keeps ~1 MiB read buffers on the heap too
  (setting any threshold turns off glibc's adaptive one). The price: a worker's resident memory may stay up
  to 64 MiB above what it uses.

``mallopt`` takes an int, and glibc stores the thresholds as ``size_t``, so -1 means "never". Elsewhere
(macOS, musl) both are no-ops with a debug message.

When the trainer's policy is applied matters. ``M_ARENA_MAX`` limits only arenas created *afterwards*: the
XLA threads that already allocated (JAX ran an eval, a data step, another model's jit) keep their own
arenas, made of 64 MiB heaps that cannot hold a larger block, which glibc then serves with ``mmap`` whatever
``M_MMAP_MAX`` says, and unmaps on free. Measured (nano, 2-core Intel Xeon, 2026-11-25): policy applied
first 8,146-8,721 tokens/s and 2,372 page faults per step; JAX first, then the policy 6,782-7,130 and
71,418 faults per step, no better than no policy at all. ``large_buffers_env()`` is the same policy as
glibc tunables in a process's environment, in force from its first allocation whatever runs first
(8,288-8,531 with JAX first): the executor starts training steps' Ray workers with it. Importing
``marin.trainer`` applies the policy when JAX's runtime has not started yet (a notebook that imports the
trainer, runs JAX, then trains), and ``train()`` warns when it finds its policy applied too late
(``benchmarks/history_bench.py``, docs/trainer.md). ``MARIN_MALLOC_DEFAULTS=1`` in the environment keeps
glibc's defaults in the trainer (a process that must hand memory back; the benchmarks' no-policy baseline).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
from collections.abc import Mapping

logger = logging.getLogger(__name__)

_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD, _M_MMAP_MAX, _M_ARENA_MAX = -1, -2, -3, -4, -8
_applied: set[str] = set()
_warned_late = False
KEEP_DEFAULTS_ENV = "MARIN_MALLOC_DEFAULTS"

LARGE_BUFFER_TUNABLES = (
    ("glibc.malloc.arena_max", "1"),
    ("glibc.malloc.mmap_max", "0"),
    ("glibc.malloc.trim_threshold", str(2**64 - 1)),  # SIZE_MAX: never trim
    ("glibc.malloc.top_pad", str(256 << 20)),
    ("glibc.malloc.hugetlb", "1"),  # the heap in transparent huge pages (madvise), a tunable only
)
"""``keep_large_buffers_mapped()`` as glibc tunables (``GLIBC_TUNABLES``), read once at process start, and one
setting ``mallopt`` cannot make: ``glibc.malloc.hugetlb=1`` has glibc ask for transparent huge pages on the heap
as it grows (``madvise(MADV_HUGEPAGE)``: what a host in THP mode ``madvise``, this lab's, needs; under
``always`` the heap gets them anyway, under ``never`` not at all). A step's gigabytes of temporaries then take
a TLB entry per 2 MiB, not per 4 KiB: the bf16 MoE step 5% faster in the steady state, its first steps slower
by the zeroing of those pages (docs/trainer.md, "Speed on this CPU"). Torch's processes do better without
these tunables, so the benchmarks give them only to the lab's workers (``benchmarks/host.py``)."""


def _mallopt(policy: str, settings: tuple[tuple[int, int], ...]) -> bool:
    """Apply ``settings`` once per process under the name ``policy``; True if glibc took every one."""
    if policy in _applied:
        return True
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        logger.debug("no glibc mallopt here; leaving the allocator alone")
        return False
    ok = all(mallopt(option, value) == 1 for option, value in settings)
    if ok:
        _applied.add(policy)
    logger.debug("glibc malloc tuned (%s): %s", policy, ok)
    return ok


def large_buffers_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``{"GLIBC_TUNABLES": ...}``: the trainer's policy for a process started with it (merged with any
    tunables already in ``environ``, which defaults to this process's)."""
    names = {name for name, _ in LARGE_BUFFER_TUNABLES}
    existing = (os.environ if environ is None else environ).get("GLIBC_TUNABLES", "")
    kept = [part for part in existing.split(":") if part and part.split("=", 1)[0] not in names]
    return {"GLIBC_TUNABLES": ":".join(kept + [f"{name}={value}" for name, value in LARGE_BUFFER_TUNABLES])}


def started_with_large_buffers() -> bool:
    """Whether this process began with the policy's tunables. Read from ``os.environ`` (the environment
    Python started with): ``/proc/self/environ`` does not do, since glibc cuts the variable there while
    parsing it."""
    tunables = dict(part.split("=", 1) for part in os.environ.get("GLIBC_TUNABLES", "").split(":") if "=" in part)
    return all(tunables.get(name) == value for name, value in LARGE_BUFFER_TUNABLES)


def keep_large_buffers_mapped(*, late: bool = False) -> bool:
    """The trainer's policy: one arena, no mmap, never trim, grow in 256 MB steps. True if applied. Huge pages
    come only with a process started with ``large_buffers_env()`` (``LARGE_BUFFER_TUNABLES``).

    ``late=True`` says the caller knows JAX's runtime already ran in this process: unless the process
    started with ``large_buffers_env()``, the policy then only partly holds (module docstring), which is
    logged once as a warning naming the remedy. Nothing is applied (False) when ``MARIN_MALLOC_DEFAULTS=1``."""
    global _warned_late
    if os.environ.get(KEEP_DEFAULTS_ENV) == "1":
        return False
    if late and not _warned_late and "large buffers" not in _applied and not started_with_large_buffers():
        _warned_late = True
        logger.warning(
            "the trainer's malloc policy is applied after JAX already ran in this process, so JAX's threads keep "
            "their own malloc arenas and re-fault large buffers every step (~20%% slower on CPU, measured). Start "
            "the process with GLIBC_TUNABLES=%s (marin.allocator.large_buffers_env()), or call "
            "marin.allocator.keep_large_buffers_mapped() before running JAX.",
            large_buffers_env({})["GLIBC_TUNABLES"],
        )
    return _mallopt(
        "large buffers",
        (
            (_M_ARENA_MAX, 1),  # one heap: threads' large blocks are reused across threads
            (_M_MMAP_MAX, 0),  # never serve malloc with mmap (so no munmap on free)
            (_M_TRIM_THRESHOLD, -1),  # never give the heap's top back to the OS (-1 is SIZE_MAX in glibc)
            (_M_TOP_PAD, 256 << 20),  # grow the heap in 256 MB steps
        ),
    )


def keep_record_batches_mapped() -> bool:
    """The data steps' policy: keep up to 64 MiB of freed heap top, and blocks up to 32 MiB on the heap.
    Skipped (True) where the trainer's stronger policy already holds. True if applied."""
    if "large buffers" in _applied:
        return True
    return _mallopt(
        "record batches",
        (
            (_M_TRIM_THRESHOLD, 64 << 20),
            (_M_MMAP_THRESHOLD, 32 << 20),
        ),
    )
