"""Post-training tests run on CPU with tiny models. XLA:CPU spends most of their time compiling the engine's
and the update's programs: the session's persistent compilation cache (``tests/conftest.py``) lets the
subprocesses of the resume test and the Ray rollout workers reuse what the first run compiled."""

import os

os.environ["JAX_PLATFORMS"] = os.environ.get("MARIN_TEST_JAX_PLATFORMS", "cpu")
