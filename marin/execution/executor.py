"""The executor: materialize a planned DAG under a prefix, idempotently and exactly once.

For each step, in dependency order:

    SUCCESS in .executor_status        -> skip (fn is not called, Ray is not even started)
    FAILED                             -> error, unless force_run_failed
    lease held by a live executor      -> wait for its result (poll), take over if its lease goes stale
    otherwise                          -> take the lease, write RUNNING, run fn(config) as a Ray task,
                                          then, if the lease is still ours, write the output manifest
                                          and SUCCESS

A lease lost while its step runs (the heartbeat finds it taken over or gone) cancels the step's task at
once; the executor writes no status over the new holder's and waits for the new holder's result instead.
The task also fences itself (``marin.execution.fence``).

A failed step marks everything downstream DEP_FAILED while independent branches go on; the run then
raises ``StepsFailed`` listing the failures.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
import time
from collections.abc import Sequence
from typing import Any

from marin.execution import experiment
from marin.execution.fence import FenceSpec, read_fenced_reason
from marin.execution.lease import Heartbeat, Lease, LeaseConfig, new_owner_id, read_lease, try_acquire
from marin.execution.manifest import OutputChanged, verify_output, write_manifest
from marin.execution.plan import Plan, PlannedStep, instantiate_config, plan_steps
from marin.execution.ray_runner import InfeasibleResources
from marin.execution.status import (
    StepState,
    append_event,
    current_state,
    last_message,
    mark_waiting,
    running_attempt,
    write_info,
)
from marin.execution.step import ExecutorStep
from marin.storage import check_prefix

logger = logging.getLogger(__name__)


_MAX_FENCE_RESUBMITS = 2
"""How often a step whose task fenced itself while its lease stayed ours is run again before it fails."""


class StepsFailed(RuntimeError):
    def __init__(self, failed: dict[str, str]):
        self.failed = failed
        lines = "\n".join(f"  {name}: {message}" for name, message in failed.items())
        super().__init__(f"{len(failed)} step(s) did not succeed:\n{lines}")


class PreviouslyFailed(RuntimeError):
    """Steps that failed in an earlier run; rerunning them needs ``force_run_failed``."""


@dataclasses.dataclass(frozen=True)
class Decision:
    action: str  # "run" | "skip" | "wait"
    reason: str


@dataclasses.dataclass
class RunResult:
    plan: Plan
    ran: list[str]
    skipped: list[str]
    waited: list[str]
    record_url: str | None
    lease_losses: dict[str, str] = dataclasses.field(default_factory=dict)
    """Steps whose lease this executor lost while running them (their task was cancelled), and why."""


class Executor:
    """Plans and runs steps under ``prefix``. ``runner`` is created on demand (Ray) unless given."""

    def __init__(
        self,
        prefix: str,
        *,
        force_run_failed: bool = False,
        run_only: Sequence[str] | None = None,
        max_concurrent: int | None = None,
        lease: LeaseConfig = LeaseConfig(),
        poll_s: float = 1.0,
        description: str | None = None,
        caller_file: str | None = None,
        runner: Any = None,
    ):
        self.prefix = prefix
        self.force_run_failed = force_run_failed
        self.run_only = list(run_only or [])
        self.max_concurrent = max_concurrent
        self.lease_config = lease
        self.poll_s = poll_s
        self.description = description
        self.caller_file = caller_file
        self._runner = runner
        self.owner = new_owner_id()

    # -- planning (pure) ---------------------------------------------------------------------------
    def plan(self, steps: Sequence[ExecutorStep]) -> Plan:
        return plan_steps(steps, self.prefix)

    def decide(self, plan: Plan) -> dict[str, Decision]:
        """What a run would do with each selected step, reading only status and lease files."""
        decisions: dict[str, Decision] = {}
        for p in self._select(plan):
            decisions[p.identity] = self._decide_one(p)
        return decisions

    def _decide_one(self, p: PlannedStep) -> Decision:
        state = current_state(p.output_path)
        if state == StepState.SUCCESS:
            return Decision("skip", "already succeeded")
        if state == StepState.FAILED:
            why = f"failed before ({last_message(p.output_path)})"
            if self.force_run_failed:
                return Decision("run", f"{why}; rerun by force_run_failed")
            return Decision("error", f"{why}; rerun with --force_run_failed true")
        lease = read_lease(p.output_path)
        if lease is not None:
            age = time.time() - lease["heartbeat"]
            if age < self.lease_config.stale_after_s:
                return Decision("wait", f"running in executor {lease['owner']} (heartbeat {age:.0f}s ago)")
            return Decision("run", f"previous holder {lease['owner']} is gone (lease stale for {age:.0f}s)")
        if state == StepState.DEP_FAILED:
            return Decision("run", "a dependency failed in an earlier run")
        if state == StepState.RUNNING:
            return Decision("run", "an earlier run stopped without finishing")
        return Decision("run", "no output yet")

    def _select(self, plan: Plan) -> list[PlannedStep]:
        """All steps, or with ``run_only`` the matching ones plus dependencies that have not succeeded."""
        if not self.run_only:
            return plan.steps
        patterns = [re.compile(r) for r in self.run_only]
        wanted = {p.identity for p in plan.steps if any(r.search(p.name) for r in patterns)}
        if not wanted:
            raise ValueError(f"--run_only {self.run_only} matches no step; steps are {[p.name for p in plan.steps]}")
        stack = [p for p in plan.steps if p.identity in wanted]
        while stack:
            for dep in stack.pop().deps:
                if dep.identity not in wanted and current_state(dep.output_path) != StepState.SUCCESS:
                    wanted.add(dep.identity)
                    stack.append(dep)
        return [p for p in plan.steps if p.identity in wanted]

    # -- dry run -----------------------------------------------------------------------------------
    def dry_run(self, steps: Sequence[ExecutorStep]) -> list[str]:
        """One line per step (action, output path, reason, identity fields); touches nothing."""
        plan = self.plan(steps)
        check_prefix(self.prefix, write=False)
        script = experiment.script_name(self.caller_file)
        previous = experiment.previous_record(plan, script, exclude=experiment.record_url(plan, script))
        old_steps = {}
        if previous:
            for s in previous.get("steps", []):
                old_steps.setdefault(s["name"], []).append(s)
        lines = []
        for identity, decision in self.decide(plan).items():
            p = plan.by_identity()[identity]
            line = f"{decision.action:5s} {p.output_path}  ({decision.reason})"
            fields = ", ".join(f"{k}={experiment._short(v, 40)}" for k, v in sorted(p.version["config"].items()))
            line += f"\n      identity: {fields or 'no versioned fields'}"
            olds = old_steps.get(p.name, [])
            if len(olds) == 1 and olds[0]["identity"] != p.identity:
                changes = experiment.changed_fields(olds[0]["version"], p.version)
                line += f"\n      changed since {olds[0]['identity']}: " + "; ".join(changes)
            lines.append(line)
        return lines

    # -- running -----------------------------------------------------------------------------------
    def run(self, steps: Sequence[ExecutorStep]) -> RunResult:
        plan = self.plan(steps)
        check_prefix(self.prefix, write=True)  # bad endpoint / bucket / permissions: one line, nothing run
        decisions = self.decide(plan)
        errors = {i: d.reason for i, d in decisions.items() if d.action == "error"}
        if errors:
            lines = "\n".join(f"  {i}: {r}" for i, r in errors.items())
            raise PreviouslyFailed(f"{len(errors)} step(s) failed in an earlier run:\n{lines}")
        skipped = [i for i, d in decisions.items() if d.action == "skip"]
        todo = [p for p in plan.steps if p.identity in decisions and decisions[p.identity].action != "skip"]
        record_url = self._write_record(plan)
        if not todo:
            logger.info("nothing to run: all %d steps already succeeded", len(skipped))
            return RunResult(plan, [], skipped, [], record_url)
        runner = self._start_runner()
        problems = []
        for p in todo:  # report every step the cluster can never run, before running anything
            try:
                runner.check_feasible(p.name, p.step.resource_config)
            except InfeasibleResources as e:
                problems.append(str(e))
        if problems:
            raise InfeasibleResources("\n".join(problems))
        for p in todo:  # lets the browser show the whole DAG at once
            mark_waiting(p.output_path, self.owner)
        # Steps outside the selection are SUCCESS by construction of _select (or not needed).
        todo_ids = {p.identity for p in todo}
        run = _Run(self, plan, todo, {p.identity for p in plan.steps} - todo_ids, runner)
        run.loop()
        if run.failed:
            raise StepsFailed(run.failed)
        return RunResult(plan, run.ran, skipped, run.waited, record_url, run.lease_losses)

    def _start_runner(self):
        if self._runner is None:
            from marin.execution.ray_runner import RayRunner

            self._runner = RayRunner()
        self._runner.start()
        return self._runner

    def _write_record(self, plan: Plan) -> str:
        script = experiment.script_name(self.caller_file)
        url = experiment.record_url(plan, script)
        experiment.write_record(url, experiment.build_record(plan, self.caller_file, self.description))
        return url


def _critical_path_first(todo: list[PlannedStep]) -> list[PlannedStep]:
    """``todo`` (topological) reordered so that, among steps ready together, the one heading the longest
    chain of dependent steps is submitted first: on a full cluster it gets the free slot (the quickstart's
    SFT run no longer queues behind the base model's evaluation). Still topological: a step heads a longer
    chain than any step that depends on it."""
    height = {p.identity: 0 for p in todo}
    for p in reversed(todo):  # dependents come after their dependencies
        for d in p.deps:
            if d.identity in height:
                height[d.identity] = max(height[d.identity], height[p.identity] + 1)
    rank = {p.identity: i for i, p in enumerate(todo)}
    return sorted(todo, key=lambda p: (-height[p.identity], rank[p.identity]))


class _Run:
    """The state of one run's event loop: what is pending, in flight, watched, done or failed."""

    def __init__(self, executor: Executor, plan: Plan, todo: list[PlannedStep], done: set[str], runner):
        self.ex = executor
        self.plan = plan
        self.pending = _critical_path_first(todo)
        self.done = set(done)
        self.failed: dict[str, str] = {}
        self.in_flight: dict[Any, tuple[PlannedStep, Lease]] = {}
        self.watching: list[PlannedStep] = []
        self.ran: list[str] = []
        self.waited: list[str] = []
        self.runner = runner
        self.lease_losses: dict[str, str] = {}
        self.verified: set[str] = set()
        self.resubmits: dict[str, int] = {}
        self.started_at: dict[str, float] = {}  # monotonic start of each step this run submitted
        self._task_of: dict[Lease, Any] = {}  # read by the heartbeat thread
        self._task_lock = threading.Lock()
        self.heartbeat = Heartbeat(executor.lease_config, on_lost=self._cancel_task_of)

    def loop(self) -> None:
        try:
            while self.pending or self.in_flight or self.watching:
                self._launch_ready()
                if self.pending and not (self.in_flight or self.watching):
                    stuck = ", ".join(p.identity for p in self.pending)
                    raise RuntimeError(f"executor bug: steps can never start: {stuck}")
                if self.in_flight:
                    timeout = self.ex.poll_s if self.watching else None
                    for ref in self.runner.wait(list(self.in_flight), timeout):
                        self._finish(ref)
                elif self.watching:
                    time.sleep(self.ex.poll_s)
                self._poll_watched()
        finally:
            self.heartbeat.stop()
            for ref, (_, lease) in self.in_flight.items():  # interrupted: stop the task, let others take over
                self._cancel(ref)
                lease.release()

    def _launch_ready(self) -> None:
        for p in list(self.pending):
            blocked_by = [d for d in p.deps if d.identity in self.failed]
            if blocked_by:
                self.pending.remove(p)
                self._mark_dep_failed(p, blocked_by[0])
            elif all(d.identity in self.done for d in p.deps):
                if self.ex.max_concurrent and len(self.in_flight) >= self.ex.max_concurrent:
                    return
                self.pending.remove(p)
                problem = self._verify_deps(p)
                if problem is not None:
                    self._failed(p, problem)
                    continue
                self._start(p)

    def _verify_deps(self, p: PlannedStep) -> str | None:
        """Check each dependency against its manifest once per run (``marin.execution.manifest``)."""
        for dep in p.deps:
            if dep.identity in self.verified:
                continue
            try:
                verify_output(dep.output_path)
            except OutputChanged as e:
                return f"dependency {dep.identity} is not its committed output: {e}"
            self.verified.add(dep.identity)
        return None

    def _start(self, p: PlannedStep) -> None:
        lease = try_acquire(p.output_path, self.ex.owner, self.ex.lease_config)
        if lease is None:
            if p not in self.watching:
                logger.info("waiting for %s: another executor is running it", p.identity)
                self.watching.append(p)
            return
        self.heartbeat.add(lease)  # from the moment we hold it: info/status writes and submission take time
        if p in self.watching:
            self.watching.remove(p)
        state = current_state(p.output_path)  # re-read under the lease: another executor may have finished
        if state == StepState.SUCCESS:
            self._drop(lease)
            self._succeeded(p, waited=True)
            return
        if state == StepState.FAILED and not self.ex.force_run_failed:
            self._drop(lease)
            self._failed(p, f"failed in another executor: {last_message(p.output_path)}")
            return
        config = instantiate_config(p)
        write_info(p.output_path, _info(p, config))
        if not append_event(
            p.output_path, StepState.RUNNING, owner=self.ex.owner, attempt=lease.attempt, expect=_not_succeeded
        ):  # a holder we just replaced finished after all
            self._drop(lease)
            self._succeeded(p, waited=True)
            return
        logger.info("start   %s -> %s", p.identity, p.output_path)
        self.started_at.setdefault(p.identity, time.monotonic())
        self._submit(p, config, lease)

    def _submit(self, p: PlannedStep, config: Any, lease: Lease) -> None:
        lc = self.ex.lease_config
        fence = FenceSpec(
            output_path=p.output_path,
            owner=self.ex.owner,
            attempt=lease.attempt,
            check_s=lc.fence_check_s,
            stop_after_s=lc.fence_stop_after_s,
        )
        try:
            ref = self.runner.submit(p.name, p.step.fn, config, p.step.resource_config, p.step.pip_extras, fence)
        except Exception as e:  # e.g. an unpicklable config or a bad runtime env
            message = f"could not submit: {type(e).__name__}: {e}"
            append_event(p.output_path, StepState.FAILED, message=message, owner=self.ex.owner, expect=_ours(lease))
            self._drop(lease)
            self._failed(p, message)
            return
        self.in_flight[ref] = (p, lease)
        with self._task_lock:
            self._task_of[lease] = ref
        if lease.lost:  # lost between submission and registration: the heartbeat could not cancel it
            self._cancel(ref)

    def _cancel_task_of(self, lease: Lease) -> None:
        """Heartbeat thread: ``lease`` was just found lost; stop its task now."""
        with self._task_lock:
            ref = self._task_of.get(lease)
        if ref is not None:
            logger.error("lease %s lost (%s); cancelling its task", lease.url, lease.lost_reason)
            self._cancel(ref)

    def _cancel(self, ref) -> None:
        try:
            self.runner.cancel(ref)
        except Exception:  # noqa: BLE001 - already finished, or the cluster is gone: nothing left to stop
            logger.debug("cancel failed", exc_info=True)

    def _drop(self, lease: Lease) -> None:
        self.heartbeat.remove(lease)
        lease.release()

    def _finish(self, ref) -> None:
        p, lease = self.in_flight.pop(ref)
        with self._task_lock:
            self._task_of.pop(lease, None)
        error = self.runner.outcome(ref)
        if not lease.lost:
            lease.refresh()  # fencing: only the lease holder may write the final status
        if lease.lost:
            self.heartbeat.remove(lease)
            self._lost(p, lease, error)
            return
        if error is not None:
            fenced = read_fenced_reason(p.output_path, lease.attempt)
            if fenced is not None and self.resubmits.get(p.identity, 0) < _MAX_FENCE_RESUBMITS:
                # The task stopped itself because our heartbeat was late (a starved or briefly cut-off
                # executor) although nobody took the lease over: the lease is still ours, run it again.
                self.resubmits[p.identity] = self.resubmits.get(p.identity, 0) + 1
                logger.warning("%s stopped itself (%s) but its lease is still ours; resubmitting", p.identity, fenced)
                self._submit(p, instantiate_config(p), lease)
                return
            if fenced is not None:
                error = f"stopped by its lease fence: {fenced}"
        self.heartbeat.remove(lease)
        if error is None:
            write_manifest(p.output_path, owner=self.ex.owner, attempt=lease.attempt)
            # Still ours after the manifest's listing, and nobody has started another attempt since.
            if lease.refresh() and append_event(
                p.output_path, StepState.SUCCESS, owner=self.ex.owner, expect=_ours(lease)
            ):
                lease.release()
                self.ran.append(p.identity)
                self._succeeded(p)
            else:
                self._lost(p, lease, None)
            return
        if not append_event(p.output_path, StepState.FAILED, message=error, owner=self.ex.owner, expect=_ours(lease)):
            self._lost(p, lease, error)
            return
        lease.release()
        self._failed(p, error)

    def _lost(self, p: PlannedStep, lease: Lease, outcome: str | None) -> None:
        """Our lease on ``p`` was taken over or removed: write nothing there, wait for the new holder."""
        reason = lease.lost_reason or "lease lost"
        self.lease_losses[p.identity] = reason
        logger.error(
            "LOST    %s: %s; its task was cancelled (outcome: %s); waiting for the new holder",
            p.identity,
            reason,
            outcome or "finished",
        )
        lease.release()
        self.watching.append(p)

    def _poll_watched(self) -> None:
        for p in list(self.watching):
            state = current_state(p.output_path)
            if state == StepState.SUCCESS:
                self.watching.remove(p)
                self._succeeded(p, waited=True)
            elif state == StepState.FAILED and read_lease(p.output_path) is None:
                self.watching.remove(p)
                self._failed(p, f"failed in another executor: {last_message(p.output_path)}")
            else:
                self._start(p)  # takes the lease over if its holder died

    def _succeeded(self, p: PlannedStep, waited: bool = False) -> None:
        self.done.add(p.identity)
        if waited:
            self.waited.append(p.identity)
            logger.info("reused  %s (completed by another executor)", p.identity)
        else:
            started = self.started_at.get(p.identity)
            took = f" ({time.monotonic() - started:.1f} s)" if started is not None else ""
            logger.info("done    %s%s", p.identity, took)

    def _failed(self, p: PlannedStep, message: str) -> None:
        self.failed[p.identity] = message
        logger.error("FAILED  %s: %s", p.identity, message)

    def _mark_dep_failed(self, p: PlannedStep, dep: PlannedStep) -> None:
        message = f"dependency {dep.identity} did not succeed"
        lease = try_acquire(p.output_path, self.ex.owner, self.ex.lease_config)
        if lease is not None:
            append_event(p.output_path, StepState.DEP_FAILED, message=message, owner=self.ex.owner)
            lease.release()
        self.failed[p.identity] = message
        logger.error("DEP_FAILED %s: %s", p.identity, message)


def _not_succeeded(events: list[dict[str, Any]]) -> bool:
    return not events or events[-1]["state"] != StepState.SUCCESS.value


def _ours(lease: Lease):
    """Guard for a final status: the last attempt started on this step is still the one holding ``lease``."""
    return lambda events: running_attempt(events) == lease.attempt and events[-1]["state"] == StepState.RUNNING.value


def _info(p: PlannedStep, config: Any) -> dict[str, Any]:
    return {
        "name": p.name,
        "fn": p.fn_name,
        "config": dataclasses.asdict(config) if dataclasses.is_dataclass(config) else config,
        "version": p.version,
        "identity": p.identity,
        "dependencies": [d.output_path for d in p.deps],
        "nonblocking_dependencies": [d.output_path for d in p.nonblocking_deps],
        "output_path": p.output_path,
        "description": p.step.description,
        "resources": dataclasses.asdict(p.step.resource_config),
        "pip_extras": list(p.step.pip_extras),
    }
