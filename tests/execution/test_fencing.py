"""Fencing against live "zombie" lease holders, on local disk, the GCS server and the S3 server.

A zombie is an executor whose lease was taken over while its step's task still runs. The scenarios:

- the executor is paused (SIGSTOP) mid-step: its heartbeats stop, the task's own fence stops the task
  before the lease can be taken over, a second executor takes over and commits, and the paused executor,
  resumed, finds its lease lost, writes no status and reuses the new holder's result;
- the lease file is deleted under a running step (no grace period at all): the executor cancels the task
  within a heartbeat, and the step runs once more, by whichever executor takes the free lease first;
- executor *and* task are paused (a frozen VM) across the whole take-over and commit: resumed, the task
  writes nothing more;
- files that appear or change in a committed output afterwards (a write that was in flight across such a
  pause) are removed, or refuse the dependent step, by the output manifest.

The three scenarios with live processes run on local disk and on one object store each (the paused executor
on S3, the deleted lease and the frozen VM on GCS: the stores' conditional writes are what differ, and
each is exercised by the others' cheap tests); the rest on all three. Every final output is compared with
what an undisturbed run writes (``writer_files``: the step's files depend only on its config). Lease
timings: heartbeat 0.25 s, stale after 3 s, so the task re-reads its lease every 0.25 s and stops itself at
a heartbeat age of 2.5 s.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from marin.execution import (
    Executor,
    ExecutorStep,
    LeaseConfig,
    StepsFailed,
    this_output_path,
)
from marin.execution.fence import FENCED_PREFIX
from marin.execution.manifest import (
    MANIFEST_FILE,
    OutputChanged,
    list_output,
    verify_output,
)
from marin.execution.plan import plan_steps
from marin.execution.status import LEASE_FILE, read_events
from marin.storage import (
    delete,
    join,
    local_lock,
    local_path,
    read_bytes,
    read_text,
    read_versioned,
    write_atomic,
)
from tests.chaos.fault_steps import ReaderConfig, read_trace, reader_step
from tests.execution.zombie_dag import PART_S, PARTS, writer_files, writer_step
from tests.stores import on_stores
from tests.waiting import wait_for

pytestmark = pytest.mark.usefixtures("ray_address")
ROOT = Path(__file__).resolve().parents[2]
FAST = LeaseConfig(heartbeat_s=0.25, stale_after_s=3.0)
FLAGS = ("--lease_heartbeat_s", "0.25", "--lease_stale_after_s", "3", "--poll_s", "0.1")
CANCEL_BOUND_S = FAST.fence_stop_after_s + FAST.fence_check_s + 1.5
"""Heartbeat age at which a paused executor's task is gone: the fence's stop age, one more check, and
slack for a loaded 2-core machine (Ray's kill, the store's latency)."""


def launch(ray_address, prefix, calls, log, freeze_in_lock=""):
    env = {**os.environ, "RAY_ADDRESS": ray_address, "ZOMBIE_CALLS": str(calls), "PYTHONPATH": str(ROOT)}
    env["ZOMBIE_FREEZE_IN_LOCK"] = str(freeze_in_lock)
    return subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "execution" / "zombie_dag.py"), "--prefix", prefix, *FLAGS],
        cwd=ROOT,
        env=env,
        stdout=open(log, "w"),
        stderr=subprocess.STDOUT,
    )


def pause(pids):
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)


def freeze_inside_the_lease_lock(proc, trigger, output_path, log):
    """Make the executor ``proc`` (launched with ``freeze_in_lock=trigger``) stop itself while it holds the
    local store's lock on its lease, mid-heartbeat: the others must still take the lease over (issue 36)."""
    Path(trigger).touch()
    wait_for(lambda: stopped(proc.pid), "the executor to stop inside its lease's lock", proc=proc, log=log)
    assert os.path.isdir(local_path(join(output_path, LEASE_FILE)) + ".lock")


def stopped(pid):
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"


def output_of(prefix, calls):
    return plan_steps([writer_step(str(calls))], prefix).steps[0].output_path


def contents(output_path):
    """{relative path: bytes} of the step's files (the executor's own excluded)."""
    return {rel: read_bytes(join(output_path, rel)) for rel in list_output(output_path)}


def fenced_markers(output_path):
    """The ``.executor_fenced-<attempt>`` records of every attempt that ran (by the RUNNING events)."""
    attempts = [e["attempt"] for e in read_events(output_path) if e["state"] == "RUNNING"]
    found = [read_versioned(join(output_path, FENCED_PREFIX + a)) for a in attempts]
    return [json.loads(blob.data) for blob in found if blob is not None]


def store_name(prefix):
    return prefix.split("://")[0] if "://" in prefix else "local"


def is_gone(pid):
    """True once ``pid`` has exited: no ``/proc`` entry, or one that vanishes while read, or a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


@on_stores("local", "s3")
def test_a_paused_executors_task_stops_before_takeover_and_the_executor_writes_nothing_after(
    tmp_path, ray_address, store_prefix, monkeypatch
):
    """On local disk the executor is paused at the worst moment: inside the store's lock on its lease, in a
    heartbeat about to rewrite it. The new holder breaks that lock (after ``LOCK_BREAK_AFTER_S``, 1 s here)."""
    monkeypatch.setattr(local_lock, "LOCK_BREAK_AFTER_S", 1.0)
    expected = writer_files()  # what an undisturbed run writes
    calls, log = tmp_path / "calls", tmp_path / "a.log"
    out = output_of(store_prefix, calls)
    local = store_name(store_prefix) == "local"
    trigger = tmp_path / "freeze-now" if local else ""
    a = launch(ray_address, store_prefix, calls, log, freeze_in_lock=trigger)
    try:
        wait_for(lambda: len(read_trace(str(calls), "writes")) >= 2, "the first writes", proc=a, log=log)
        zombie = read_trace(str(calls), "starts")[0]["pid"]
        if local:  # a long pause: heartbeats stop, the task runs on
            freeze_inside_the_lease_lock(a, trigger, out, log)
        else:
            pause([a.pid])
        stopped_at = time.time()
        result = Executor(prefix=store_prefix, lease=FAST, poll_s=0.1).run([writer_step(str(calls))])
        assert result.ran == [result.plan.steps[0].identity]
    finally:
        os.kill(a.pid, signal.SIGCONT)
    assert a.wait() == 0, log.read_text()[-3000:]  # the rest of its run: work, bounded by the test's timeout

    events = read_events(out)
    takeover = next(e for e in events if e["state"] == "RUNNING" and e["owner"] == result_owner(events))
    [marker] = fenced_markers(out)
    assert "heartbeat" in marker["reason"] and marker["pid"] == zombie
    assert marker["time"] < takeover["time"], "the zombie task must be gone before the new holder starts"
    assert marker["time"] - stopped_at < CANCEL_BOUND_S, marker["time"] - stopped_at
    assert is_gone(zombie)
    zombie_writes = [w for w in read_trace(str(calls), "writes") if w["pid"] == zombie]
    assert zombie_writes and max(w["time"] for w in zombie_writes) < takeover["time"]
    assert [e["state"] for e in events] == ["WAITING", "RUNNING", "RUNNING", "SUCCESS"], events
    assert events[-1]["owner"] == takeover["owner"] != events[1]["owner"]
    assert "LOST" in log.read_text() and "reused" in log.read_text()
    assert contents(out) == expected
    print(json.dumps({"stop_to_fenced_s": round(marker["time"] - stopped_at, 3), "store": store_name(store_prefix)}))


def result_owner(events):
    return [e for e in events if e["state"] == "SUCCESS"][-1]["owner"]


@on_stores("local", "gcs")
def test_deleting_the_lease_cancels_the_running_task_within_a_heartbeat(tmp_path, store_prefix):
    expected = writer_files()  # what an undisturbed run writes
    calls = tmp_path / "calls"
    out = output_of(store_prefix, calls)
    outcome = {}
    a = Executor(prefix=store_prefix, lease=FAST, poll_s=0.1)
    thread = threading.Thread(target=lambda: outcome.update(result=a.run([writer_step(str(calls))])))
    thread.start()
    wait_for(lambda: len(read_trace(str(calls), "writes")) >= 2, "the first writes", proc=thread)
    zombie = read_trace(str(calls), "starts")[0]["pid"]
    delete(join(out, LEASE_FILE))  # an operator "unsticking" a step, or a store losing the object
    deleted_at = time.time()
    result = Executor(prefix=store_prefix, lease=FAST, poll_s=0.1).run([writer_step(str(calls))])
    thread.join(60)
    assert not thread.is_alive()

    identity = result.plan.steps[0].identity
    a_result = outcome["result"]
    assert identity in a_result.lease_losses
    # The deleted lease leaves the step free: usually the second executor takes it, but the first one,
    # once its task is cancelled, polls and may create the lease again before the second has planned
    # (a loaded machine). Either is correct; exactly one of them runs the step again, the other reuses it.
    runner, reuser = (result, a_result) if result.ran else (a_result, result)
    assert runner.ran == [identity] and reuser.ran == [] and reuser.waited == [identity], (result, a_result)
    zombie_writes = [w["time"] for w in read_trace(str(calls), "writes") if w["pid"] == zombie]
    assert max(zombie_writes) - deleted_at < FAST.heartbeat_s + 1.0, "the zombie kept writing"
    wait_for(lambda: is_gone(zombie), "the zombie's worker to die", timeout=5)
    events = read_events(out)
    assert [e["state"] for e in events] == ["WAITING", "RUNNING", "RUNNING", "SUCCESS"], events
    assert contents(out) == expected


@pytest.mark.slow
@on_stores("local", "gcs")
def test_a_frozen_executor_and_task_resume_after_the_commit_and_write_nothing(tmp_path, ray_address, store_prefix):
    """The hard case: the task itself is paused (with its executor) across the take-over and the new
    holder's commit. Resumed, its next write re-reads the lease first (the last read is older than a check)
    and the fence stops it."""
    expected = writer_files()  # what an undisturbed run writes
    calls, log = tmp_path / "calls", tmp_path / "a.log"
    out = output_of(store_prefix, calls)
    a = launch(ray_address, store_prefix, calls, log)
    zombie = None
    try:
        # Stop right after a write returned (the trace line follows it), i.e. inside the step's sleep: a
        # write in flight across the pause is the case the manifest test covers.
        wait_for(lambda: len(read_trace(str(calls), "writes")) >= 2, "the first writes", proc=a, log=log)
        zombie = read_trace(str(calls), "starts")[0]["pid"]
        pause([zombie, a.pid])
        result = Executor(prefix=store_prefix, lease=FAST, poll_s=0.1).run([writer_step(str(calls))])
        committed = contents(out)
        resumed_at = time.time()
        os.kill(zombie, signal.SIGCONT)
        wait_for(lambda: is_gone(zombie), "the resumed zombie to stop", timeout=10)
        stopped_after = time.time() - resumed_at
    finally:
        for pid in (zombie, a.pid):
            if pid is not None and not is_gone(pid):
                os.kill(pid, signal.SIGCONT)
    assert a.wait() == 0, log.read_text()[-3000:]  # the rest of its run: work, bounded by the test's timeout
    assert result.ran == [result.plan.steps[0].identity]
    assert all(w["time"] < resumed_at for w in read_trace(str(calls), "writes") if w["pid"] == zombie)
    [marker] = fenced_markers(out)
    assert marker["pid"] == zombie and "gone" in marker["reason"], marker
    assert contents(out) == committed == expected
    assert verify_output(out).extra == []
    print(json.dumps({"resume_to_stopped_s": round(stopped_after, 3), "store": store_name(store_prefix)}))


def test_late_writes_into_a_committed_output_are_removed_or_refuse_the_dependent_step(tmp_path, store_prefix):
    calls = tmp_path / "calls"
    writer = writer_step(str(calls))
    executor = Executor(prefix=store_prefix, lease=FAST, poll_s=0.1)
    executor.run([writer])
    out = output_of(store_prefix, calls)
    manifest = json.loads(read_text(join(out, MANIFEST_FILE)))
    assert sorted(manifest["files"]) == sorted([f"part-{i:02d}.json" for i in range(PARTS)] + ["result.json"])
    committed = contents(out)

    write_atomic(join(out, "part-99.json"), '{"part": 99}')  # a zombie's late new file
    reader = ExecutorStep(
        name="fence/reader",
        fn=reader_step,
        config=ReaderConfig(calls_dir=str(calls), input_path=writer / "result.json", output_path=this_output_path()),
    )
    executor.run([reader])
    assert contents(out) == committed  # removed before anyone read the dependency

    write_atomic(join(out, "part-03.json"), '{"part": "zombie"}')  # a zombie's late overwrite
    other = ExecutorStep(
        name="fence/reader2",
        fn=reader_step,
        config=ReaderConfig(calls_dir=str(calls), input_path=writer / "result.json", output_path=this_output_path()),
    )
    with pytest.raises(StepsFailed, match=r"changed \['part-03.json'\]"):
        executor.run([other])
    with pytest.raises(OutputChanged, match="part-03.json"):
        verify_output(out)
    assert len(read_trace(str(calls), "reader")) == 1  # the second reader never ran


def test_a_copied_store_verifies_as_committed_and_a_changed_copy_does_not(store_prefix):
    """A store copied as its docs say (GCS and S3 bucket to bucket, server side; local with ``cp -a``'s kept
    mtimes) reads as committed: on GCS every copied object has a new generation, and the manifest's CRC32C
    recognises it. A copy whose file then changes (same size) still fails."""
    import shutil

    from marin.execution.manifest import write_manifest
    from marin.storage import filesystem

    out = join(store_prefix, "copied/step-1a2b")
    for i in range(3):
        write_atomic(join(out, f"part-{i}.json"), json.dumps({"part": i}))
    write_atomic(join(out, "ckpt/params"), "x" * 1000)
    manifest = write_manifest(out, owner="host:1:abc", attempt="a1")
    copy = join(store_prefix + "-copy", "copied/step-1a2b")
    fs, root = filesystem(out)
    if store_name(store_prefix) == "local":
        shutil.copytree(root, filesystem(copy)[1])  # copy2: mtimes kept, as cp -a does
    else:
        fs.copy(root, filesystem(copy)[1], recursive=True)  # a server-side copy (rewrite / CopyObject)
    copied = list_output(copy)
    assert sorted(copied) == sorted(manifest["files"])
    if store_name(store_prefix) == "gcs":  # the case the checksum is for: every object is a new generation
        assert all(copied[f]["version"] != manifest["files"][f]["version"] for f in copied)
        assert all(copied[f]["checksum"] == manifest["files"][f]["checksum"] for f in copied)
    check = verify_output(copy)
    assert check is not None and check.extra == check.changed == check.missing == []

    write_atomic(join(copy, "part-1.json"), json.dumps({"part": 7}))  # same size, other content
    with pytest.raises(OutputChanged, match=r"changed \['part-1.json'\]"):
        verify_output(copy)


def test_outputs_written_before_manifests_existed_stay_readable(tmp_path):
    out = str(tmp_path / "old-step")
    write_atomic(join(out, "result.json"), "{}")
    assert verify_output(out) is None and os.path.exists(join(out, "result.json"))


def test_timing_constants_keep_the_zombie_ahead_of_the_takeover():
    for config in (FAST, LeaseConfig(), LeaseConfig(heartbeat_s=1, stale_after_s=1.5)):
        assert config.heartbeat_s < config.fence_stop_after_s
        assert config.fence_stop_after_s + config.fence_check_s < config.stale_after_s
    # The step outlives the window the tests open (2 parts, then a pause of stop_after + a check) with room.
    assert PART_S * (PARTS - 2) >= 2 * (FAST.fence_stop_after_s + FAST.fence_check_s)


def fence_spec(out):
    """A fresh lease on ``out`` and the spec of a fence on it (re-read every 0.05 s; stops at 2.5 s)."""
    from marin.execution.fence import FenceSpec
    from marin.execution.lease import new_owner_id, try_acquire

    lease = try_acquire(out, new_owner_id(), FAST)
    return FenceSpec(output_path=out, owner=lease.owner, attempt=lease.attempt, check_s=0.05, stop_after_s=2.5)


def take_over(out):
    """Another executor takes the lease of ``out`` over: its process has no guard, so straight to the store's
    compare-and-swap."""
    from marin.storage import conditional

    lease_url = join(out, LEASE_FILE)
    thief = json.dumps({"owner": "thief", "attempt": "other", "acquired": time.time(), "heartbeat": time.time()})
    version = read_versioned(lease_url).version
    assert conditional._backend(lease_url).replace(lease_url, thief.encode(), version) is not None


def test_step_fence_refuses_writes_once_the_lease_is_taken_over(store_prefix):
    """In process, no Ray: the storage guard and the verdicts of ``StepFence`` on each store."""
    from marin.execution.fence import StepFence, read_fenced_reason
    from marin.storage import LeaseLost

    out = join(store_prefix, "fenced-step")
    spec = fence_spec(out)
    stopped = []
    with StepFence(spec, on_lost=lambda: stopped.append(time.time())) as fence:
        write_atomic(join(out, "part-0.json"), "{}")  # ours: allowed
        take_over(out)
        time.sleep(0.1)  # the last proof is now older than check_s: the next write re-reads the lease
        with pytest.raises(LeaseLost, match="attempt other"):
            write_atomic(join(out, "part-1.json"), "{}")
        with pytest.raises(LeaseLost):
            delete(join(out, "part-0.json"))
        with pytest.raises(PermissionError, match="belong to the executor"):  # never a step's to write
            write_atomic(join(out, ".executor_status"), "{}")
        write_atomic(join(store_prefix, "elsewhere.json"), "{}")  # nor is anything outside the step
        assert fence.lost and len(stopped) == 1
    assert "attempt other" in read_fenced_reason(out, spec.attempt)
    write_atomic(join(out, "part-1.json"), "{}")  # the guard ends with the task
    with pytest.raises(LeaseLost, match="not starting"), StepFence(spec, on_lost=lambda: stopped.append(0)):
        pass  # a retry of the lost attempt does not start, and is not killed (Ray would retry it again)
    assert len(stopped) == 1


def test_a_lost_lease_stops_every_host_of_a_gang(tmp_path):
    """Two hosts; the lease is deleted under them. The executor's heartbeat cancels the gang, which kills
    both hosts (each host's own fence would too); then, the lease being free, it takes it again."""
    from marin.execution import ResourceConfig
    from tests.execution.zombie_dag import GangConfig, gang_writer

    calls = tmp_path / "calls"
    step = ExecutorStep(
        name="fence/gang",
        fn=gang_writer,
        config=GangConfig(calls_dir=str(calls), output_path=this_output_path()),
        resources=ResourceConfig(num_cpus=0.5, hosts=2),
    )
    executor = Executor(prefix=str(tmp_path / "store"), lease=FAST, poll_s=0.1)
    out = executor.plan([step]).steps[0].output_path
    outcome = {}
    thread = threading.Thread(target=lambda: outcome.update(result=executor.run([step])))
    thread.start()
    # both hosts writing (on a loaded machine the second host's worker can start seconds after the first's)
    writers = lambda: {t["pid"] for t in read_trace(str(calls), "gang-writes")}  # noqa: E731
    wait_for(lambda: len(writers()) == 2, "both hosts to write", proc=thread)
    hosts = {t["pid"] for t in read_trace(str(calls), "gang-starts")}
    assert len(hosts) == 2
    delete(join(out, LEASE_FILE))
    deleted_at = time.time()
    wait_for(lambda: all(is_gone(pid) for pid in hosts), "both hosts to stop", timeout=10)
    stopped_after = time.time() - deleted_at
    thread.join()  # the executor takes the lease again and reruns the gang: work, bounded by the test's timeout
    result = outcome["result"]
    assert result.plan.steps[0].identity in result.lease_losses
    late = [t for t in read_trace(str(calls), "gang-writes") if t["pid"] in hosts and t["time"] > deleted_at + 1.0]
    assert late == [], late
    assert stopped_after < FAST.heartbeat_s + FAST.fence_check_s + 2.0, stopped_after
    assert [e["state"] for e in read_events(out)] == ["WAITING", "RUNNING", "RUNNING", "SUCCESS"]
    print(json.dumps({"gang_hosts_stopped_after_s": round(stopped_after, 3)}))


def test_a_fence_kills_nothing_once_its_call_has_returned(store_prefix):
    """A process can outlive its step (a reused Ray worker, as a gang's task is): a verdict that comes after the
    fenced call returned (the watcher's last read) records the loss but must not kill the process, which may
    be running another step. A call that leaves with its lease lost is killed on the way out."""
    from marin.execution.fence import StepFence, read_fenced_reason
    from marin.storage import LeaseLost

    out = join(store_prefix, "fenced-then-returned")
    spec = fence_spec(out)
    stopped = []
    with StepFence(spec, on_lost=lambda: stopped.append("killed")) as fence:
        write_atomic(join(out, "part-0.json"), "{}")
    delete(join(out, LEASE_FILE))
    with pytest.raises(LeaseLost, match="gone"):
        fence.confirm()  # what the watcher thread does on its last wake-up
    assert stopped == [] and "gone" in read_fenced_reason(out, spec.attempt)

    spec = fence_spec(out)
    with StepFence(spec, on_lost=lambda: stopped.append("killed")) as fence:
        take_over(out)
        with pytest.raises(LeaseLost, match="attempt other"):
            fence.confirm()
    assert stopped == ["killed"]  # inside the call, a verdict kills (once: leaving the fence does not kill again)

    out = join(store_prefix, "fenced-left-lost")
    fence = StepFence(fence_spec(out), on_lost=lambda: stopped.append("killed on the way out"))
    with pytest.raises(LeaseLost), fence:
        fence.lost = "taken over"  # a guarded write saw the loss first; the watcher's kill had not come yet
        raise LeaseLost("taken over")
    assert stopped == ["killed", "killed on the way out"]  # a call that leaves with its lease lost still ends


def test_a_call_leaving_with_its_lease_lost_is_killed_only_after_the_loss_is_recorded(store_prefix, monkeypatch):
    """The watcher sets ``lost`` and then writes ``.executor_fenced-<attempt>`` (slowly, on an object store);
    a guarded write in the call sees ``lost`` meanwhile and the call leaves the fence. The kill on the way out
    waits for the record: the executor reads it to tell a fenced task from a crashed one (CI once lost it)."""
    from marin.execution import fence as fence_module
    from marin.execution.fence import StepFence, read_fenced_reason
    from marin.storage import LeaseLost

    def slow_write(url, data):
        time.sleep(0.5)
        write_atomic(url, data)

    monkeypatch.setattr(fence_module, "write_atomic", slow_write)
    out = join(store_prefix, "fenced-while-recording")
    spec = fence_spec(out)
    records_at_kill = []
    fence = StepFence(spec, on_lost=lambda: records_at_kill.append(read_fenced_reason(out, spec.attempt)))
    with pytest.raises(LeaseLost, match="attempt other"), fence:
        take_over(out)
        deadline = time.monotonic() + 10
        while fence.lost is None and time.monotonic() < deadline:  # the watcher's verdict; its write is slow
            time.sleep(0.01)
        assert read_fenced_reason(out, spec.attempt) is None  # still being written
        fence.check()  # a guarded write: raises LeaseLost, and the call leaves the fence
    assert len(records_at_kill) == 1 and "attempt other" in (records_at_kill[0] or ""), records_at_kill
