"""``make test`` runs two xdist workers, and tests/conftest.py groups tests so that expensive shared fixtures
are built once: each module's tests on one worker, and the quickstart's readers (several modules) on one
worker. pytest 9.2 broke xdist 3.8's grouping without an error (the groups split across workers and the
quickstart trained twice, docs/installation.md); this runs a small suite the same way and checks where each
test ran."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CONFTEST = """
import pytest
from tests.conftest import pytest_collection_modifyitems  # noqa: F401


@pytest.fixture(scope="session")
def quickstart_run():
    return "shared"
"""

READER = """
import json, os


def test_{name}_{i}(quickstart_run):
    with open(os.environ["WHERE"], "a") as f:
        f.write(json.dumps(["{name}", os.environ["PYTEST_XDIST_WORKER"]]) + "\\n")
"""

OTHER = """
import json, os, time


def test_{name}_{i}():
    time.sleep(0.2)
    with open(os.environ["WHERE"], "a") as f:
        f.write(json.dumps(["{name}", os.environ["PYTEST_XDIST_WORKER"]]) + "\\n")
"""


def test_the_quickstarts_readers_and_each_modules_tests_share_one_worker(tmp_path):
    (tmp_path / "conftest.py").write_text(CONFTEST)
    for name, body in (("reader_a", READER), ("reader_b", READER), ("other_a", OTHER), ("other_b", OTHER)):
        (tmp_path / f"test_{name}.py").write_text("".join(body.format(name=name, i=i) for i in range(4)))
    where = tmp_path / "where.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WHERE": str(where)}
    env.pop("PYTEST_XDIST_WORKER", None)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup", "."],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    ran = [json.loads(line) for line in where.read_text().splitlines()]
    assert len(ran) == 16
    workers = {name: {w for n, w in ran if n == name} for name, _ in ran}
    assert all(len(w) == 1 for w in workers.values()), workers  # a module's tests on one worker
    assert workers["reader_a"] == workers["reader_b"], workers  # the readers' modules together
    assert len({w for _, w in ran}) == 2, workers  # and both workers used
