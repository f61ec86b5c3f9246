"""Keep the pytest process under the kernel's limit on memory mappings (``vm.max_map_count``).

Every program XLA:CPU compiles is JIT-linked into mappings of its own (code, read-only data, data: about three
per program), and JAX keeps every compiled program alive in its caches. A whole-suite run compiles some
20,000 programs in the pytest process, and near the default limit of 65,530 mappings the JIT's ``mmap`` or
``mprotect`` fails. LLVM's ORC layer (``RTDyldObjectLinkingLayer``) then frees the object's memory on its error
path without deregistering the object's ``.eh_frame``, which it had registered with libgcc's unwinder. The
next C++ exception, stack walk or thread exit anywhere in the process reads that freed memory and segfaults
(CI's crash of stops 59 and 60; docs/installation.md has the trace).

So between test modules, once the process holds more than ``HEADROOM`` of the limit, JAX's caches are cleared
and the dropped executables freed (their frames deregistered properly). Below that share nothing happens, so
programs compiled by one module stay compiled for the next, as before.
"""

import gc
import os
from pathlib import Path
from typing import NamedTuple

HEADROOM = float(os.environ.get("MARIN_MAPS_HEADROOM", "0.5"))
"""The share of ``vm.max_map_count`` past which the caches are cleared (the crash came above 0.99). The
variable sets it for a run: 0 releases after every module, a large number never (how the crash was reproduced
with a lowered limit, docs/installation.md)."""

DEFAULT_MAX_MAP_COUNT = 65530


def map_count() -> int:
    """The mappings this process holds now (lines of ``/proc/self/maps``); 0 where there is no procfs."""
    try:
        with open("/proc/self/maps", "rb") as maps:
            return sum(1 for _ in maps)
    except OSError:
        return 0


def max_map_count() -> int:
    try:
        return int(Path("/proc/sys/vm/max_map_count").read_text())
    except (OSError, ValueError):
        return DEFAULT_MAX_MAP_COUNT


class MapState(NamedTuple):
    before: int
    """Mappings held when the check began."""
    after: int | None
    """Mappings held after a release; None when none was needed (or JAX is not loaded: nothing to free)."""
    limit: int
    """``vm.max_map_count`` as read for the check."""


def release_compiled_programs_if_near_limit(headroom: float = HEADROOM) -> MapState:
    """Clear JAX's caches and collect garbage when this process's mappings exceed ``headroom`` of the limit."""
    import sys

    before, limit = map_count(), max_map_count()
    if "jax" not in sys.modules or before <= headroom * limit:
        return MapState(before, None, limit)
    import jax

    jax.clear_caches()
    gc.collect()
    return MapState(before, map_count(), limit)
