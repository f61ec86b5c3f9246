"""Test-wide environment: Ray without usage stats or auth files, one shared local Ray cluster, and real
object-store servers on loopback (fake-gcs-server for gs://, moto for s3://; tests/object_store_servers.py)."""

import atexit
import os
import shutil
import tempfile
import uuid
from pathlib import Path

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
# Ray's socket paths must stay short: a private dir directly under /tmp, removed at exit (after Ray's own
# shutdown hook, registered later, has run): the runtime-env test clones the venv into it (~3 GB a run).
# Each xdist worker (``make test`` runs two) starts its own cluster, in a directory of its own.
if "RAY_TMPDIR" not in os.environ or os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="mray", dir="/tmp")
    atexit.register(shutil.rmtree, os.environ["RAY_TMPDIR"], ignore_errors=True)
# Bytecode for every process of the session (Ray workers and subprocesses import the lab afresh, ~0.13 s of
# compiling its sources each where PYTHONDONTWRITEBYTECODE is set, as on the lab's hosts), kept out of the tree.
SHARED_BYTECODE = bool(os.environ.get("PYTHONDONTWRITEBYTECODE")) and "PYTHONPYCACHEPREFIX" not in os.environ
if SHARED_BYTECODE:
    del os.environ["PYTHONDONTWRITEBYTECODE"]
    os.environ["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="marin-pyc-")
    atexit.register(shutil.rmtree, os.environ["PYTHONPYCACHEPREFIX"], ignore_errors=True)
os.environ.pop("RAY_ADDRESS", None)
os.environ.pop("MARIN_PREFIX", None)
# gcsfs must not probe bucket types over gRPC against an emulator (ENVIRONMENT-NOTES); set before any import.
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
# gcsfs: anonymous access (the emulator needs no token) instead of probing for Google credentials and the
# GCE metadata server on every new filesystem. fsspec reads FSSPEC_<PROTOCOL>_<ARG> when it is imported.
os.environ.setdefault("FSSPEC_GS_TOKEN", "anon")

from tests.compile_cache import TEST_XLA_FLAGS, share_compilation_cache  # noqa: E402

# One persistent compilation cache for the session's processes (set here, before the xdist workers start, so that
# they share it too); tests/conftest.py's IN_PROCESS_CACHE_DIRS says where the pytest processes use it.
share_compilation_cache()

USERS_XLA_FLAGS = os.environ.get("XLA_FLAGS")
if os.environ.get("MARIN_TEST_XLA_DEFAULTS") != "1" and os.environ.get("MARIN_TEST_JAX_PLATFORMS", "cpu") == "cpu":
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {TEST_XLA_FLAGS}".strip()

import pytest  # noqa: E402

IN_PROCESS_CACHE_DIRS = (
    "tests/trainer/",
    "tests/posttrain/",
    "tests/inference/",
    "tests/evaluation/",
    "tests/export/",
    "tests/chat/",
)
"""Whose tests compile with the session's persistent compilation cache in the pytest process itself (the
trainer's and RL's conftests set ``JAX_COMPILATION_CACHE_DIR`` for their subprocesses, but in a whole-suite run
JAX is imported, and reads that variable, while the earlier directories are collected, so it is switched on
here). Their tests build fresh closures over the same tiny models, which JAX's in-memory cache misses and the
persistent one hits: ``pytest tests/trainer`` took 808 s with it and 1,008 s without (Intel Xeon, 2 cores,
2026-11-29). It is off for every other test and for the quickstart's readers.

It was switched off for a day, blamed for the suite's segmentation faults (a gdb trace caught one in the
cache's serializer); the cause was the process running out of memory mappings, with or without the cache
(``tests/memory_maps.py``, docs/installation.md)."""


def _in_process_compile_cache(on: bool) -> None:
    import sys

    if "jax" not in sys.modules and not on:
        return
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    target = os.environ.get("JAX_COMPILATION_CACHE_DIR") if on else None
    if jax.config.jax_compilation_cache_dir == target:
        return
    jax.config.update("jax_compilation_cache_dir", target)
    if on:  # as the directories' conftests ask of their subprocesses: cache every program
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    compilation_cache.reset_cache()


def pytest_runtest_setup(item):
    _in_process_compile_cache(item.nodeid.startswith(IN_PROCESS_CACHE_DIRS) and not _uses_quickstart(item))


@pytest.fixture(scope="session")
def object_stores(tmp_path_factory):
    """fake-gcs-server and moto, started once per session; their endpoints are exported to os.environ.

    ``ray_address`` depends on this so that Ray workers (which inherit the environment of the cluster's
    processes, not of the driver) reach the same servers. Starting both costs about a second.
    """
    from tests.object_store_servers import start_servers

    servers = start_servers(str(tmp_path_factory.mktemp("object-stores")))
    yield servers
    servers.stop()


@pytest.fixture
def gcs_prefix(object_stores):
    """A fresh ``gs://`` prefix on the fake-gcs-server (one shared bucket, a unique path per test)."""
    from tests.object_store_servers import GCS_BUCKET

    if object_stores.gcs_url is None:
        pytest.skip(object_stores.gcs_missing)
    return f"gs://{GCS_BUCKET}/t-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def s3_prefix(object_stores):
    """A fresh ``s3://`` prefix on the moto server (one shared bucket, a unique path per test)."""
    from tests.object_store_servers import S3_BUCKET

    if object_stores.s3_url is None:
        pytest.skip(object_stores.s3_missing)
    return f"s3://{S3_BUCKET}/t-{uuid.uuid4().hex[:10]}"


@pytest.fixture(params=["local", "gcs", "s3"])
def store_prefix(request, tmp_path):
    """The same test on local disk, on the GCS server and on the S3 server (``tests.stores.on_stores``
    narrows a test to some of them)."""
    if request.param == "local":
        return str(tmp_path / "store")
    return request.getfixturevalue(f"{request.param}_prefix")


def _set_env(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


@pytest.fixture(scope="session")
def ray_address(object_stores):
    """A local Ray cluster shared by the whole session; its address lets subprocess executors join it.

    It lives in the pytest process, so it dies with it. 8 logical CPUs: the test steps are tiny.
    """
    import ray

    if not ray.is_initialized():
        # The cluster's workers (where executor steps run: the quickstart's training among them) compile on
        # the user's XLA flags, not TEST_XLA_FLAGS: the quickstart's held-out scores are a trained model's, and
        # a run under other rounding lands elsewhere (SFT exact match 0.605, below the tests' 0.7, which the
        # defaults pass).
        suite_flags = os.environ.get("XLA_FLAGS")
        _set_env("XLA_FLAGS", USERS_XLA_FLAGS)
        try:
            ray.init(num_cpus=8, include_dashboard=False, log_to_driver=False)
        finally:
            _set_env("XLA_FLAGS", suite_flags)
    yield ray.get_runtime_context().gcs_address


@pytest.fixture(scope="session")
def quickstart_run(tmp_path_factory, ray_address):
    """The quickstart experiment exactly as `make quickstart` runs it (same steps, same hashes), once per
    session, recorded as experiments/quickstart.py would record it.

    Shared by the quickstart, data browser and report tests so CI trains the model only once."""
    from experiments import quickstart
    from marin.execution import Executor

    root = Path(__file__).resolve().parents[1]

    steps = quickstart.STEPS
    prefix = str(tmp_path_factory.mktemp("quickstart") / "store")
    executor = Executor(
        prefix=prefix, caller_file=str(root / "experiments" / "quickstart.py"), description="quickstart (test run)"
    )
    result = executor.run(quickstart.TARGETS)
    return {
        "prefix": prefix,
        "steps": steps,
        "result": result,
        "paths": {
            name: next(p.output_path for p in result.plan.steps if p.name == step.name) for name, step in steps.items()
        },
    }


QUICKSTART_TIMEOUT_S = 1800


def _uses_quickstart(item) -> bool:
    return "quickstart_run" in getattr(item, "fixturenames", ())


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the xdist_group marks added here
def pytest_collection_modifyitems(config, items):
    """The modules whose tests read the quickstart's outputs run together, in their order: last in a run on one
    process (the whole-suite run that validated ``IN_PROCESS_CACHE_DIRS`` ran them after the trainer's tests,
    docs/installation.md), first on several workers (``make test``: training the quickstart is the suite's
    longest piece of work, so it starts at once on one worker while the others take everything else).
    Whichever of them first asks for ``quickstart_run`` pays for training the model (minutes on 2 busy cores),
    so they get a longer per-test timeout than the suite's default.

    Under xdist (``--dist loadgroup``) every test is grouped with its module, so module- and session-scoped
    fixtures are built once as in one process, and the quickstart's readers, and the tests sharing the bundled
    books' store, form one group each."""
    readers = {item.nodeid.split("::")[0] for item in items if _uses_quickstart(item)}
    first = hasattr(config, "workerinput")  # an xdist worker
    items.sort(key=lambda item: (item.nodeid.split("::")[0] in readers) != first)  # stable: parts keep order
    for item in items:
        module = item.nodeid.split("::")[0]
        if _uses_quickstart(item):
            item.add_marker(pytest.mark.timeout(QUICKSTART_TIMEOUT_S))
        group = "quickstart" if module in readers else "books" if "books_store" in item.fixturenames else module
        item.add_marker(pytest.mark.xdist_group(group))


@pytest.hookimpl(trylast=True)  # after pytest's faulthandler plugin, which sends dumps to stderr
def pytest_configure(config):
    """With ``MARIN_CRASH_LOG`` set (``make test``), a fatal signal's dump goes to that file, with the
    running test's id beside it (tests/crash_log.py says why). Taken out of the environment: a test's
    subprocess (a pytest run among them) must not write over this run's file. Under xdist each worker writes
    ``<file>.<worker id>`` (``python -m tests.crash_log <file>`` reads them all)."""
    path = os.environ.pop("MARIN_CRASH_LOG", None)
    worker = getattr(config, "workerinput", None)
    if worker is not None:
        path = worker.get("marin_crash_log")
    elif path and config.pluginmanager.hasplugin("xdist") and config.getoption("numprocesses", None):
        config.pluginmanager.register(_CrashLogPerWorker(path))
    if path:
        from tests import crash_log

        crash_log.enable(path)


class _CrashLogPerWorker:
    """Hands each xdist worker its own crash-log file (an xdist hook, registered only where xdist runs)."""

    def __init__(self, path: str):
        self.path = path

    def pytest_configure_node(self, node):
        node.workerinput["marin_crash_log"] = f"{self.path}.{node.gateway.id}"


RELEASES: list[tuple[str, int, int]] = []


def pytest_runtest_teardown(item, nextitem):
    """Between test modules, frees JAX's compiled programs if the process nears the kernel's limit on memory
    mappings (tests/memory_maps.py: past it XLA:CPU's JIT corrupts the unwinder and the process segfaults)."""
    if nextitem is not None and nextitem.path == item.path:
        return
    from tests import crash_log, memory_maps

    maps = memory_maps.release_compiled_programs_if_near_limit()
    if maps.after is not None:
        RELEASES.append((item.path.name, maps.before, maps.after))
    held = maps.before if maps.after is None else maps.after
    crash_log.note(f"memory maps after {item.path.name}: {held} of {maps.limit}")


def pytest_terminal_summary(terminalreporter):
    for module, before, after in RELEASES:
        terminalreporter.write_line(f"compiled programs released after {module}: {before} -> {after} memory maps")


def pytest_runtest_logstart(nodeid, location):
    from tests import crash_log

    crash_log.started(nodeid)
