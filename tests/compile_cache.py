"""The session's persistent compilation cache, set up by the conftests of the directories that share it.

Called before JAX is imported by those conftests, so that their subprocesses and the session's Ray workers
(which inherit the environment) compile each program once per session. The directory is fresh for every
session (nothing is reused across sessions) and removed when the session ends. The pytest process itself
uses it for the directories named by ``tests/conftest.py``'s ``IN_PROCESS_CACHE_DIRS``."""

import atexit
import os
import shutil
import tempfile


def share_compilation_cache() -> None:
    """Point ``JAX_COMPILATION_CACHE_DIR`` at a fresh directory (unless a caller already set one) and cache
    every program, however small or quick to compile: the tests' programs are all tiny."""
    if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
        os.environ["JAX_COMPILATION_CACHE_DIR"] = path = tempfile.mkdtemp(prefix="marin-jax-cache-")
        atexit.register(shutil.rmtree, path, ignore_errors=True)
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
