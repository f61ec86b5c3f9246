"""Multi-host training on one machine: two processes (one CPU device each, gloo collectives, a loopback
coordinator) train the tiny model 5 steps and end where one process does.

Each process is ``multihost_script.py`` started with the environment the executor's Ray runner gives a
``ResourceConfig(hosts=2)`` step; the one-process run is the same script without it.
"""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from marin import multihost
from marin.trainer import distributed
from marin.trainer.checkpoint import _read_array, list_checkpoints

SCRIPT = Path(__file__).with_name("multihost_script.py")
ROOT = Path(__file__).resolve().parents[2]
TOLERANCE = 1e-5  # fp32; only the order of the gradient sum differs (an all-reduce across processes)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(out: Path, coordinates: dict[str, str]) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **coordinates}
    env.pop("XLA_FLAGS", None)
    return subprocess.Popen(
        [sys.executable, str(SCRIPT), str(out)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _finish(proc: subprocess.Popen) -> dict:
    try:
        out, err = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    assert proc.returncode == 0, err[-4000:]
    return json.loads(out.strip().splitlines()[-1])


def _final_checkpoint(run: Path) -> dict[str, np.ndarray]:
    step, url = list_checkpoints(str(run / "checkpoints"))[-1]
    manifest = json.loads((Path(url) / "manifest.json").read_text())
    assert step == 5
    return {
        name: _read_array(f"{url}/{name}", np.dtype(meta["dtype"]), tuple(meta["shape"]))
        for name, meta in manifest["leaves"].items()
    }


def _metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):  # ~30 s idle, ~90 s on a busy machine: three processes compile and train
    out = tmp_path_factory.mktemp("multihost")
    coordinator = f"127.0.0.1:{_free_port()}"
    hosts = [_start(out / "two", multihost.host_env(coordinator, 2, i)) for i in range(2)]
    reports = [_finish(p) for p in hosts]
    single = _finish(_start(out / "one", {}))
    return out, reports, single


@pytest.mark.slow
def test_two_processes_form_one_job_and_each_builds_only_its_rows(runs):
    _, reports, single = runs
    assert single == {**single, "process_count": 1, "devices": 1}
    assert [(r["process_index"], r["process_count"], r["devices"]) for r in reports] == [(0, 2, 2), (1, 2, 2)]
    for report, expected in zip(reports, ([0, 8], [8, 16])):  # batch 16 over 2 devices, one per process
        assert {tuple(r[1:]) for r in report["rows"]} == {tuple(expected)}, report["rows"][:3]
        assert sorted({r[0] for r in report["rows"]}) == [0, 1, 2, 3, 4]
    assert {tuple(r[1:]) for r in single["rows"]} == {(0, 16)}


@pytest.mark.slow
def test_two_processes_train_like_one(runs):
    out, _, _ = runs
    two, one = _final_checkpoint(out / "two"), _final_checkpoint(out / "one")
    assert sorted(two) == sorted(one)
    diffs = {name: float(np.max(np.abs(two[name].astype(np.float64) - one[name]), initial=0.0)) for name in one}
    assert max(diffs.values()) <= TOLERANCE, sorted(diffs.items(), key=lambda kv: -kv[1])[:3]
    losses = {run: [m["train/loss"] for m in _metrics(out / run) if "train/loss" in m] for run in ("one", "two")}
    assert len(losses["two"]) == 5  # written once, by process 0, not once per process
    np.testing.assert_allclose(losses["two"], losses["one"], atol=TOLERANCE)
    evals = {run: [m["eval/held/loss"] for m in _metrics(out / run) if "eval/held/loss" in m] for run in ("one", "two")}
    assert len(evals["two"]) == 1
    np.testing.assert_allclose(evals["two"], evals["one"], atol=TOLERANCE)
    assert json.loads((out / "two" / "summary.json").read_text())["step"] == 5


def test_coordinates_come_from_the_environment_and_bad_ones_are_named():
    assert multihost.coordinates({}) is None
    env = multihost.host_env("10.0.0.2:8476", 4, 3)
    assert multihost.coordinates(env) == ("10.0.0.2:8476", 4, 3)
    with pytest.raises(ValueError, match="MARIN_PROCESS_ID=4 of MARIN_NUM_PROCESSES=4"):
        multihost.coordinates({**env, multihost.ENV_PROCESS_ID: "4"})
    with pytest.raises(ValueError, match="MARIN_NUM_PROCESSES"):
        multihost.coordinates({multihost.ENV_COORDINATOR: "10.0.0.2:8476"})
    assert distributed.initialize({}) is False
