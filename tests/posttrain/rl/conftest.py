"""Post-training tests run on CPU with tiny models. XLA:CPU spends most of their time compiling the engine's
and the update's programs, so the session shares a persistent compilation cache (fresh each session), as the
trainer's tests do: the subprocesses of the resume test and the Ray rollout workers reuse what the first run
compiled. The root conftest switches it on in the pytest process itself for posttrain's tests
(``IN_PROCESS_CACHE_DIRS``)."""

import os

from tests.compile_cache import share_compilation_cache

os.environ["JAX_PLATFORMS"] = os.environ.get("MARIN_TEST_JAX_PLATFORMS", "cpu")
share_compilation_cache()
