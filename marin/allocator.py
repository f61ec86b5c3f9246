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
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

logger = logging.getLogger(__name__)

_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD, _M_MMAP_MAX, _M_ARENA_MAX = -1, -2, -3, -4, -8
_applied: set[str] = set()


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


def keep_large_buffers_mapped() -> bool:
    """The trainer's policy: one arena, no mmap, never trim, grow in 256 MB steps. True if applied."""
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
