"""Post-training tests run on CPU with tiny models. XLA:CPU spends most of their time compiling the engine's
and the update's programs, so the session shares a persistent compilation cache (fresh each session), as the
trainer's tests do: the subprocesses of the resume test and the Ray rollout workers reuse what the first run
compiled. The root conftest keeps it off in the pytest process itself (``IN_PROCESS_CACHE_DIRS`` says why)."""

import os

from tests.compile_cache import share_compilation_cache

os.environ["JAX_PLATFORMS"] = os.environ.get("MARIN_TEST_JAX_PLATFORMS", "cpu")
share_compilation_cache()
