"""Test-wide environment: Ray without usage stats or auth files, one shared local Ray cluster."""

import os
import tempfile

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
# Ray's socket paths must stay short: a private dir directly under /tmp.
os.environ.setdefault("RAY_TMPDIR", tempfile.mkdtemp(prefix="mray", dir="/tmp"))
os.environ.pop("RAY_ADDRESS", None)
os.environ.pop("MARIN_PREFIX", None)

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def ray_address():
    """A local Ray cluster shared by the whole session; its address lets subprocess executors join it.

    It lives in the pytest process, so it dies with it. 8 logical CPUs: the test steps are tiny.
    """
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=8, include_dashboard=False, log_to_driver=False)
    yield ray.get_runtime_context().gcs_address
