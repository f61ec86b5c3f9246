"""Ray-level faults: a worker killed mid-step, and a node (a stand-in TPU slice) preempted mid-step.

Outputs go to the GCS server, so "nothing half-written is read as complete" is checked on an object
store, where a step's partial files are visible to everyone as soon as they are written.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from marin.execution import Executor, ExecutorStep, PreviouslyFailed, ResourceConfig, StepsFailed, this_output_path
from marin.execution.status import read_events
from marin.storage import exists, join, read_text
from tests.chaos.fault_steps import (
    TPU_RESOURCE,
    ReaderConfig,
    VictimConfig,
    final_state,
    read_trace,
    reader_step,
    training_step,
    victim_step,
)
from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]


def victim_dag(calls, max_retries):
    victim = ExecutorStep(
        name="chaos/victim",
        fn=victim_step,
        config=VictimConfig(calls_dir=str(calls), output_path=this_output_path()),
        resources=ResourceConfig(num_cpus=0.5, max_retries=max_retries),
    )
    reader = ExecutorStep(
        name="chaos/reader",
        fn=reader_step,
        config=ReaderConfig(calls_dir=str(calls), input_path=victim / "result.json", output_path=this_output_path()),
        resources={"num_cpus": 0.5},
    )
    return victim, reader


def run_and_kill_first_attempt(executor, steps, calls):
    """Run the executor in a thread; SIGKILL the Ray worker of the victim's first attempt."""
    outcome = {}

    def run():
        try:
            outcome["result"] = executor.run(steps)
        except Exception as e:  # noqa: BLE001 - handed to the test thread
            outcome["error"] = e

    thread = threading.Thread(target=run)
    thread.start()
    started = lambda: read_trace(str(calls), "victim") or not thread.is_alive()  # noqa: E731
    wait_for(started, "the victim to start", proc=thread, poll_s=0.05)
    assert read_trace(str(calls), "victim"), f"victim never started: {outcome}"
    os.kill(read_trace(str(calls), "victim")[0]["pid"], signal.SIGKILL)
    thread.join()  # the executor fails the step or reruns it: work, bounded by the test's timeout
    return outcome


@pytest.mark.usefixtures("ray_address")
def test_killed_worker_without_retries_fails_the_step_clearly_and_nothing_partial_counts(tmp_path, gcs_prefix):
    calls = tmp_path / "calls"
    victim, reader = victim_dag(calls, max_retries=0)
    executor = Executor(prefix=gcs_prefix, poll_s=0.05)
    outcome = run_and_kill_first_attempt(executor, [reader], calls)

    error = outcome["error"]
    assert isinstance(error, StepsFailed)
    plan = executor.plan([reader])
    victim_out, reader_out = (p.output_path for p in plan.steps)
    message = error.failed[plan.steps[0].identity]
    assert "the worker or its node died" in message, message
    assert error.failed[plan.steps[1].identity] == f"dependency {plan.steps[0].identity} did not succeed"
    assert [e["state"] for e in read_events(victim_out)] == ["WAITING", "RUNNING", "FAILED"]
    assert read_events(reader_out)[-1]["state"] == "DEP_FAILED"
    assert exists(join(victim_out, "part-0.json")) and not exists(join(victim_out, "result.json"))
    assert read_trace(str(calls), "reader") == []  # the half-written output was never read
    with pytest.raises(PreviouslyFailed, match="the worker or its node died"):
        Executor(prefix=gcs_prefix).run([reader])  # and a rerun does not take it as complete either


@pytest.mark.usefixtures("ray_address")
def test_killed_worker_is_retried_per_max_retries_and_the_retry_completes(tmp_path, gcs_prefix):
    calls = tmp_path / "calls"
    victim, reader = victim_dag(calls, max_retries=1)
    executor = Executor(prefix=gcs_prefix, poll_s=0.05)
    outcome = run_and_kill_first_attempt(executor, [reader], calls)

    assert "error" not in outcome, outcome
    victim_out, reader_out = (p.output_path for p in executor.plan([reader]).steps)
    assert len(read_trace(str(calls), "victim")) == 2  # killed once, retried once by Ray
    assert [e["state"] for e in read_events(victim_out)] == ["WAITING", "RUNNING", "SUCCESS"]
    [seen] = read_trace(str(calls), "reader")
    assert seen["upstream"] == {"parts": 2, "attempt": 2}
    assert read_text(join(reader_out, "seen.json")) == read_text(join(victim_out, "result.json"))


@pytest.mark.slow
def test_preempted_node_step_is_rescheduled_when_capacity_returns_and_resumes_from_checkpoint(
    tmp_path, gcs_prefix, object_stores
):
    """A private two-node Ray cluster: the head has CPUs only, the worker node advertises a TPU-like
    resource. Removing that node mid-step is a preemption; a new node with the resource is the slice
    coming back. The step (max_retries=3) must be rescheduled there and resume from its checkpoint."""
    from ray.cluster_utils import Cluster

    calls = tmp_path / "calls"
    fast_failure_detection = {"health_check_period_ms": 500, "health_check_failure_threshold": 3}
    cluster = Cluster(
        initialize_head=True,
        connect=False,
        head_node_args={"num_cpus": 1, "include_dashboard": False, "_system_config": fast_failure_detection},
    )
    try:
        slice_node = cluster.add_node(num_cpus=1, resources={TPU_RESOURCE: 1})
        env = {**os.environ, "RAY_ADDRESS": cluster.address, "FAULT_CALLS": str(calls), "PYTHONPATH": str(ROOT)}
        log = tmp_path / "executor.log"
        proc = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "chaos" / "fault_steps.py"), "--prefix", gcs_prefix],
            cwd=ROOT,
            env=env,
            stdout=open(log, "w"),
            stderr=subprocess.STDOUT,
        )
        ckpt = join(training_out(gcs_prefix, calls), "checkpoint.json")
        trained = lambda: exists(ckpt) and checkpoint_step(ckpt) >= 8  # noqa: E731
        wait_for(trained, "the training step's checkpoint at step 8", proc=proc, log=log, poll_s=0.05)
        cluster.remove_node(slice_node, allow_graceful=False)  # the slice vanishes mid-step
        preempted_at = checkpoint_step(ckpt)
        time.sleep(2)
        assert proc.poll() is None, "the executor gave up instead of waiting for capacity"
        assert read_events(training_out(gcs_prefix, calls))[-1]["state"] == "RUNNING"
        cluster.add_node(num_cpus=1, resources={TPU_RESOURCE: 1})  # capacity returns
        assert proc.wait() == 0, log.read_text()[-3000:]  # the rest of the run: work
    finally:
        cluster.shutdown()

    out = training_out(gcs_prefix, calls)
    attempts = read_trace(str(calls), "train")
    assert len(attempts) == 2, attempts
    assert attempts[0]["resumed_from"] == 0 and attempts[1]["resumed_from"] >= preempted_at >= 8
    assert attempts[0]["node"] != attempts[1]["node"]
    assert read_text(join(out, "result.json")) == f'{{"state": "{final_state(40)}"}}'  # as if never interrupted
    assert [e["state"] for e in read_events(out)] == ["WAITING", "RUNNING", "SUCCESS"]


def training_out(prefix, calls):
    from marin.execution.plan import plan_steps

    return plan_steps([training_step(str(calls))], prefix).steps[0].output_path


def checkpoint_step(url):
    import json

    return json.loads(read_text(url))["step"]
