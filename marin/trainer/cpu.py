"""Host-side tuning for training on CPU: keep XLA's large temporary buffers mapped between steps.

glibc serves allocations above its mmap threshold (at most 32 MB) with a fresh ``mmap`` and returns
them with ``munmap`` on free, so every step re-faults and zero-fills its big temporaries (attention
scores, logits: 64 MB each for the ``small`` preset), kernel time in ``clear_page_erms`` that profiles
show (docs/trainer.md). Disabling mmap for malloc and switching trimming off keeps those pages in the
heap, reused step after step.

The trim threshold must be unbounded, not merely large: a step frees gigabytes at once (the ``small``
step's heap top is past 2 GiB), and any finite threshold below that hands the top back with ``brk`` and
re-faults it on the next step. ``mallopt``
takes an int, and glibc stores it as a ``size_t``, so -1 means "never".

Process-wide and glibc-only; ``train()`` calls it on the CPU backend. Elsewhere (macOS, musl) it is a
no-op with a debug message.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

logger = logging.getLogger(__name__)

_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_MAX, _M_ARENA_MAX = -1, -2, -4, -8
_done = False


def keep_large_buffers_mapped() -> bool:
    """Tune glibc malloc (once per process); True if the settings were applied."""
    global _done
    if _done:
        return True
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        logger.debug("no glibc mallopt here; leaving the allocator alone")
        return False
    settings = (
        (_M_ARENA_MAX, 1),  # one heap: threads' large blocks are reused across threads
        (_M_MMAP_MAX, 0),  # never serve malloc with mmap (so no munmap on free)
        (_M_TRIM_THRESHOLD, -1),  # never give the heap's top back to the OS (-1 is SIZE_MAX in glibc)
        (_M_TOP_PAD, 256 << 20),  # grow the heap in 256 MB steps
    )
    _done = all(mallopt(option, value) == 1 for option, value in settings)
    logger.debug("glibc malloc tuned for large reused buffers: %s", _done)
    return _done
