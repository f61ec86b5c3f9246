"""The executor on real Ray tasks in a temp prefix: reruns, failures, force, run_only, dry run, fencing.

Tests taking ``store_prefix`` run three times: on local disk, on the GCS server and on the S3 server
(tests/conftest.py); outputs are read back through ``marin.storage`` so the same assertions hold on each."""

import json
import os

import pytest

from marin.execution import (
    Executor,
    ExecutorStep,
    LeaseConfig,
    PreviouslyFailed,
    ResourceConfig,
    StepsFailed,
    this_output_path,
    versioned,
)
from marin.execution.status import read_events
from marin.storage import exists, filesystem, join, read_text
from tests.execution.steps_lib import TraceConfig, call_counts, trace_step

pytestmark = pytest.mark.usefixtures("ray_address")


def trace(calls, label, *inputs, fail=False, sleep_s=0.0, payload=None, **step_kwargs):
    config = TraceConfig(
        calls_dir=str(calls),
        label=label,
        output_path=this_output_path(),
        inputs=tuple(i / "result.json" for i in inputs),
        payload=versioned(payload),
        sleep_s=sleep_s,
        fail=fail,
    )
    return ExecutorStep(name=label, fn=trace_step, config=config, **step_kwargs)


def read_json(url):
    return json.loads(read_text(url))


def all_files(prefix):
    """Every file under ``prefix`` (any backend), for "touched nothing" checks."""
    fs, path = filesystem(prefix)
    return sorted(fs.find(path)) if fs.exists(path) else []


def states(plan):
    return {p.name: read_events(p.output_path)[-1]["state"] if read_events(p.output_path) else None for p in plan.steps}


def test_three_step_dag_runs_then_rerun_skips(tmp_path, store_prefix):
    calls = tmp_path / "calls"
    a = trace(calls, "a")
    b = trace(calls, "b", a)
    c = trace(calls, "c", a, b)
    ex = Executor(prefix=store_prefix, poll_s=0.05)
    result = ex.run([c])
    assert sorted(result.ran) == sorted(p.identity for p in result.plan.steps)
    assert call_counts(calls) == {"a": 1, "b": 1, "c": 1}
    out_c = result.plan.steps[-1].output_path
    assert out_c.startswith(store_prefix + "/c-")
    assert [u["label"] for u in read_json(join(out_c, "result.json"))["upstream"]] == ["a", "b"]
    info = read_json(join(out_c, ".executor_info"))
    assert info["name"] == "c" and info["fn"].endswith("trace_step") and info["output_path"] == out_c
    assert info["config"]["output_path"] == out_c and len(info["dependencies"]) == 2
    assert [e["state"] for e in read_events(out_c)] == ["WAITING", "RUNNING", "SUCCESS"]

    again = Executor(prefix=store_prefix).run([c])
    assert again.ran == [] and len(again.skipped) == 3
    assert call_counts(calls) == {"a": 1, "b": 1, "c": 1}


def test_failure_marks_dependents_and_lets_independent_branches_finish(tmp_path, store_prefix):
    calls = tmp_path / "calls"
    root = trace(calls, "root")
    bad = trace(calls, "bad", root, fail=True)
    after_bad = trace(calls, "after_bad", bad)
    after_after = trace(calls, "after_after", after_bad)
    good = trace(calls, "good", root, sleep_s=0.3)
    ex = Executor(prefix=store_prefix, poll_s=0.05)
    with pytest.raises(StepsFailed) as err:
        ex.run([after_after, good])
    assert set(err.value.failed) == {
        p.identity for p in ex.plan([after_after]).steps if p.name in ("bad", "after_bad", "after_after")
    }
    assert "told to fail" in err.value.failed[next(i for i in err.value.failed if i.startswith("bad-"))]
    st = states(ex.plan([after_after, good]))
    assert st == {
        "root": "SUCCESS",
        "bad": "FAILED",
        "after_bad": "DEP_FAILED",
        "after_after": "DEP_FAILED",
        "good": "SUCCESS",
    }
    assert "after_bad" not in call_counts(calls)


def test_failed_step_errors_on_rerun_unless_forced(tmp_path, store_prefix):
    calls = tmp_path / "calls"
    bad = trace(calls, "bad", fail=True)
    prefix = store_prefix
    with pytest.raises(StepsFailed):
        Executor(prefix=prefix).run([bad])
    with pytest.raises(PreviouslyFailed, match=r"bad-.*told to fail.*--force_run_failed true"):
        Executor(prefix=prefix).run([bad])
    assert call_counts(calls) == {"bad": 1}  # the refusal ran nothing
    with pytest.raises(StepsFailed):
        Executor(prefix=prefix, force_run_failed=True).run([bad])
    assert call_counts(calls) == {"bad": 2}


def test_run_only_runs_matching_steps_and_unfinished_dependencies(tmp_path, store_prefix):
    calls = tmp_path / "calls"
    prefix = store_prefix
    a = trace(calls, "data/a")
    b = trace(calls, "data/b", a)
    t = trace(calls, "train/x", b)
    other = trace(calls, "eval/y", t)
    Executor(prefix=prefix, run_only=["^data/a$"]).run([other])
    assert call_counts(calls) == {"data_a": 1}
    Executor(prefix=prefix, run_only=["train/"]).run([other])
    assert call_counts(calls) == {"data_a": 1, "data_b": 1, "train_x": 1}  # a already succeeded: not rerun
    with pytest.raises(ValueError, match="matches no step"):
        Executor(prefix=prefix, run_only=["nothing"]).run([other])


def test_dry_run_explains_and_touches_nothing(tmp_path, store_prefix):
    calls = tmp_path / "calls"
    prefix = store_prefix
    a = trace(calls, "a", payload={"n": 1, "mode": "x"})
    b = trace(calls, "b", a)
    lines = Executor(prefix=prefix).dry_run([b])
    assert not exists(prefix) and all_files(prefix) == []
    assert len(lines) == 2 and all(line.startswith("run") for line in lines)
    assert "no output yet" in lines[0] and "payload={" in lines[0]

    Executor(prefix=prefix, caller_file="/x/exp.py").run([b])
    lines = Executor(prefix=prefix, caller_file="/x/exp.py").dry_run([b])
    assert all(line.startswith("skip") and "already succeeded" in line for line in lines)

    a2 = trace(calls, "a", payload={"n": 2, "mode": "x"})
    b2 = trace(calls, "b", a2)
    before = all_files(prefix)
    assert len(before) >= 7  # 2 steps x (info, status, result) + the experiment record
    lines = Executor(prefix=prefix, caller_file="/x/exp.py").dry_run([b2])
    assert all_files(prefix) == before
    assert 'payload: {"mode": "x", "n": 1} → {"mode": "x", "n": 2}' in lines[0]
    assert "output_path" not in lines[0].split("changed since")[1]  # only versioned fields are reported
    assert "inputs[0] (input): a-" in lines[1]


def test_lost_lease_cancels_the_task_and_writes_nothing_over_the_new_holder(tmp_path, store_prefix):
    """Fencing: another owner takes the lease over mid-step. This executor cancels its task, writes no
    status, and waits for the new holder; this "thief" never heartbeats, so once its lease is stale the
    executor takes it back and runs the step again, to one SUCCESS."""
    calls = tmp_path / "calls"
    slow = trace(calls, "slow", sleep_s=1.5)
    ex = Executor(prefix=store_prefix, poll_s=0.05, lease=LeaseConfig(heartbeat_s=0.1, stale_after_s=1.0))
    out = ex.plan([slow]).steps[0].output_path
    import threading
    import time

    from marin.storage import read_versioned, replace_if_version

    stolen = threading.Event()

    def steal():
        lease_url = join(out, ".executor_lease")
        for _ in range(400):
            blob = read_versioned(lease_url)
            if blob is not None and call_counts(calls):  # the step's task is running
                thief = json.dumps(
                    {"owner": "thief", "attempt": "t", "acquired": time.time(), "heartbeat": time.time()}
                ).encode()
                if replace_if_version(lease_url, thief, blob.version) is not None:
                    stolen.set()
                    return
                continue  # a heartbeat rewrote the lease between our read and our write: read it again
            time.sleep(0.02)

    thread = threading.Thread(target=steal)
    thread.start()
    result = ex.run([slow])
    thread.join()
    assert stolen.is_set(), "the thief never won the lease"
    identity = result.plan.steps[0].identity
    assert "taken over" in result.lease_losses[identity]
    events = read_events(out)
    assert [e["state"] for e in events] == ["WAITING", "RUNNING", "RUNNING", "SUCCESS"], events
    assert events[1]["attempt"] != events[2]["attempt"] and events[-1]["owner"] == ex.owner
    assert call_counts(calls) == {"slow": 2}  # the first attempt was cancelled mid-sleep, never finished
    assert json.loads(read_text(join(out, "result.json")))["label"] == "slow"


def test_infeasible_resources_fail_fast_naming_step_and_resource(tmp_path):
    calls = tmp_path / "calls"
    tpu = trace(calls, "train/tpu", resources=ResourceConfig(resources={"TPU-v5e-256-head": 1}))
    with pytest.raises(Exception, match=r"'train/tpu'.*TPU-v5e-256-head: needs 1, largest node has 0"):
        Executor(prefix=str(tmp_path / "store")).run([tpu])
    big = trace(calls, "big", resources={"num_cpus": 512})
    with pytest.raises(Exception, match=r"'big'.*CPU: needs 512"):
        Executor(prefix=str(tmp_path / "store")).run([big])
    assert call_counts(calls) == {}


def test_max_concurrent_limits_steps_in_flight(tmp_path):
    calls = tmp_path / "calls"
    steps = [trace(calls, f"w/{i}", sleep_s=0.4) for i in range(4)]
    Executor(prefix=str(tmp_path / "store"), max_concurrent=1, poll_s=0.05).run(steps)
    spans = []
    for i in range(4):
        start = float(open(calls / f"w_{i}.calls").read().split()[1])
        spans.append(start)
    spans.sort()
    assert all(b - a >= 0.35 for a, b in zip(spans, spans[1:]))  # strictly one after another


@pytest.mark.slow
def test_pip_extras_run_the_step_in_a_runtime_env_with_those_extras(tmp_path):
    """Ray builds a virtualenv for the task and pip-installs the extra's requirements into it."""
    from tests.execution.steps_lib import ProbeConfig, probe_environment

    step = ExecutorStep(
        name="probe/bench",
        fn=probe_environment,
        config=ProbeConfig(output_path=this_output_path(), distribution="psutil"),
        pip_extras=("bench",),  # the smallest extra: keeps the runtime-env build short
    )
    result = Executor(prefix=str(tmp_path / "store")).run([step])
    probe = json.loads(open(os.path.join(result.plan.steps[0].output_path, "probe.json")).read())
    assert "runtime_resources/pip" in probe["python"]  # not the driver's interpreter
    assert probe["version"]


def test_ready_steps_start_longest_chain_first(tmp_path):
    """With one slot free, the ready step heading the longest chain of dependents goes first (the
    quickstart's SFT run before the base model's evaluation), whatever order the targets are listed in."""
    calls = tmp_path / "calls"
    root = trace(calls, "root")
    leaf = trace(calls, "leaf", root)  # nothing depends on it
    head = trace(calls, "head", root)
    tail = trace(calls, "tail", head)
    Executor(prefix=str(tmp_path / "store"), max_concurrent=1, poll_s=0.05).run([leaf, tail])
    start = {n: float(open(calls / f"{n}.calls").read().split()[1]) for n in ("root", "leaf", "head", "tail")}
    assert start["root"] < start["head"] < start["leaf"], start
    assert start["head"] < start["tail"], start
