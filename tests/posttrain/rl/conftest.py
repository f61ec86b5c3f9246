"""Post-training tests run on CPU with tiny models. XLA:CPU spends most of their time compiling the engine's
and the update's programs, so the session shares a persistent compilation cache (fresh each session), as the
trainer's tests do: the subprocesses of the resume test and the Ray rollout workers reuse what the first run
compiled. The root conftest switches it on in the pytest process for these tests (``IN_PROCESS_CACHE_DIRS``)."""

import os
import tempfile

os.environ["JAX_PLATFORMS"] = os.environ.get("MARIN_TEST_JAX_PLATFORMS", "cpu")
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", tempfile.mkdtemp(prefix="marin-jax-cache-"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
