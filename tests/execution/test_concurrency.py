"""Exactly-once by racing real processes: several executors on one prefix, and a SIGKILLed executor.

Each test runs on local disk, on the GCS server and on the S3 server (``store_prefix``)."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from marin.execution.plan import plan_steps
from marin.execution.status import read_events
from marin.storage import exists, join, read_text
from tests.execution.race_script import build
from tests.execution.steps_lib import call_counts
from tests.stores import on_stores
from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "execution" / "race_script.py"
LABELS = ["race_raw", "race_left", "race_right", "race_joined", "race_tail", "race_side"]


def launch(ray_address, prefix, calls, *extra, **env):
    environment = {
        **os.environ,
        "RAY_ADDRESS": ray_address,
        "RACE_CALLS": str(calls),
        "PYTHONPATH": str(ROOT),
        **{k: str(v) for k, v in env.items()},
    }
    args = [sys.executable, str(SCRIPT), "--prefix", str(prefix), "--poll_s", "0.1", *extra]
    return subprocess.Popen(
        args, cwd=ROOT, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def final_states(prefix, calls):
    plan = plan_steps(build(str(calls), 0.0), str(prefix))
    return {p.name: read_events(p.output_path)[-1]["state"] for p in plan.steps}, plan


def succeeded(output_path) -> bool:
    events = read_events(output_path)
    return bool(events) and events[-1]["state"] == "SUCCESS"


@on_stores("local", "s3")  # GCS: eight executors at once in tests/chaos/test_executor_chaos.py
def test_six_executors_at_once_run_each_step_exactly_once(tmp_path, ray_address, store_prefix):
    prefix, calls = store_prefix, tmp_path / "calls"
    procs = [launch(ray_address, prefix, calls, RACE_SLEEP=0.3) for _ in range(6)]
    outputs = [p.communicate()[0] for p in procs]  # runs: bounded by the test's timeout
    for proc, out in zip(procs, outputs):
        assert proc.returncode == 0, out
    assert call_counts(calls) == {label: 1 for label in LABELS}
    states, plan = final_states(prefix, calls)
    assert set(states.values()) == {"SUCCESS"}
    tail = next(p for p in plan.steps if p.name == "race/tail")
    result = json.loads(read_text(join(tail.output_path, "result.json")))
    assert result["upstream"][0]["label"] == "race/joined"
    assert sum("reused" in out for out in outputs) >= 5  # the others waited for the winners' results


@on_stores("local", "s3")  # GCS: rounds of SIGKILLed executors in tests/chaos/test_executor_chaos.py
def test_sigkilled_executor_leaves_no_success_and_rerun_takes_over(tmp_path, ray_address, store_prefix):
    prefix, calls = store_prefix, tmp_path / "calls"
    lease_flags = ("--lease_heartbeat_s", "0.25", "--lease_stale_after_s", "3")  # robust on a loaded machine
    victim = launch(
        ray_address, prefix, calls, *lease_flags, RACE_SLEEP=0.05, RACE_SLOW_LABEL="race/joined", RACE_SLOW_S=60
    )
    plan = plan_steps(build(str(calls), 0.0), str(prefix))
    side = next(p for p in plan.steps if p.name == "race/side")
    # Kill while joined runs and everything else it does not wait on has committed: race/side has no inputs
    # and may still be committing when joined starts (seen on a loaded CI host), and a step killed mid-commit
    # rightly runs again.
    ready = lambda: "race_joined" in call_counts(calls) and succeeded(side.output_path)  # noqa: E731
    wait_for(ready, "race/joined to run with race/side committed", proc=victim, poll_s=0.1)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()

    states, plan = final_states(prefix, calls)
    joined = next(p for p in plan.steps if p.name == "race/joined")
    assert states["race/joined"] == "RUNNING"
    assert exists(join(joined.output_path, ".executor_lease"))
    assert not exists(join(joined.output_path, "result.json"))

    rerun = launch(ray_address, prefix, calls, *lease_flags, RACE_SLEEP=0.05)
    out = rerun.communicate()[0]
    assert rerun.returncode == 0, out
    assert "took over stale lease" in out
    states, _ = final_states(prefix, calls)
    assert set(states.values()) == {"SUCCESS"}
    counts = call_counts(calls)
    assert counts.pop("race_joined") == 2  # killed once, completed once
    assert counts.pop("race_tail") == 1 and set(counts.values()) == {1}
    assert [e["state"] for e in read_events(joined.output_path)][-2:] == ["RUNNING", "SUCCESS"]


def test_live_heartbeat_keeps_a_long_step_from_being_taken_over(tmp_path, ray_address):
    """A step running far longer than the stale period, while another executor waits on its lease: the
    holder's heartbeat keeps the lease fresh, so the waiter never takes over and the step runs once."""
    prefix, calls = tmp_path / "store", tmp_path / "calls"
    lease_flags = ("--lease_heartbeat_s", "0.25", "--lease_stale_after_s", "2")
    slow = dict(RACE_SLEEP=0.05, RACE_SLOW_LABEL="race/joined", RACE_SLOW_S=7)  # 3.5 stale periods
    holder = launch(ray_address, prefix, calls, *lease_flags, **slow)
    wait_for(lambda: "race_joined" in call_counts(calls), "race/joined to start", proc=holder, poll_s=0.1)
    waiter = launch(ray_address, prefix, calls, *lease_flags, **slow)
    outputs = [p.communicate()[0] for p in (holder, waiter)]
    assert holder.returncode == 0 and waiter.returncode == 0, outputs
    assert not any("took over stale lease" in out for out in outputs), outputs
    assert call_counts(calls) == {label: 1 for label in LABELS}
