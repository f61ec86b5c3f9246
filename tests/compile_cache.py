"""The session's persistent compilation cache, set up by the conftests of the directories that share it.

Called before JAX is imported by those conftests, so that their subprocesses and the session's Ray workers
(which inherit the environment) compile each program once per session. The directory is fresh for every
session (nothing is reused across sessions) and removed when the session ends. The pytest process itself
uses it for the directories named by ``tests/conftest.py``'s ``IN_PROCESS_CACHE_DIRS``."""

import atexit
import os
import shutil
import tempfile

TEST_XLA_FLAGS = "--xla_cpu_use_fusion_emitters=false --xla_backend_optimization_level=0"
"""XLA:CPU flags for the test session's pytest process and its subprocesses, set before JAX is imported (the
session's Ray cluster starts on the user's flags: ``ray_address``). The suite's tiny programs spend their
time compiling, not running: XLA's older elemental fusion emitters with LLVM's optimizations off compile the
tiny model's train step in 0.39 s against 1.28 s at -O1 and 4.7 s on XLA's defaults, its parameter init in
0.70 s against 1.16 s at -O1, while the tiny step runs in 10.6 ms against 4.1 (benchmarks/compile_flags.py,
docs/installation.md). Compile-bound modules run a third faster than at -O1 (the lm-eval parity tests 68 s
against 111, the engine's 28 against 50); a test that trains for long pays for it (DPO's learning test 26 s
against 20). Results agree with the default compile to fp32 rounding, not bitwise (the fused elementwise code
is generated differently), so every bitwise comparison in the suite computes both sides under these flags,
and ``test_the_suites_xla_flags_train_like_xlas_defaults`` checks them against the defaults.
``MARIN_TEST_XLA_DEFAULTS=1`` runs the suite on XLA's defaults; a GPU run
(``MARIN_TEST_JAX_PLATFORMS=cuda``) never gets them."""


def share_compilation_cache() -> None:
    """Point ``JAX_COMPILATION_CACHE_DIR`` at a fresh directory (unless a caller already set one) and cache
    every program, however small or quick to compile: the tests' programs are all tiny."""
    if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
        os.environ["JAX_COMPILATION_CACHE_DIR"] = path = tempfile.mkdtemp(prefix="marin-jax-cache-")
        atexit.register(shutil.rmtree, path, ignore_errors=True)
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
