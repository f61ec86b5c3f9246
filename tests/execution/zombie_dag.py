"""A slow writer step for the fencing tests, and the experiment an executor runs it from in a subprocess.

    RAY_ADDRESS=... ZOMBIE_CALLS=/tmp/calls python tests/execution/zombie_dag.py --prefix gs://bucket/lab

``slow_writer`` writes ``part-NN.json`` one at a time, then ``result.json``; the content depends only on
the config, so every complete run writes the same files (``writer_files``). Each write leaves a trace line
(pid, time, part) in ``<ZOMBIE_CALLS>/writes.jsonl`` *after* it returned, so the test can tell who wrote
what, and when. With ``ZOMBIE_FREEZE_IN_LOCK=<file>`` the executor stops itself inside its lease's lock
(local store) once that file exists.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time

from marin.execution import ExecutorStep, executor_main, this_output_path
from marin.execution.status import LEASE_FILE
from marin.storage import join, write_atomic
from tests.chaos.fault_steps import read_trace, trace
from tests.storage.frozen_holder import stop_inside_the_lock

PARTS = 24
PART_S = 0.25


@dataclasses.dataclass(frozen=True)
class WriterConfig:
    calls_dir: str
    output_path: str
    parts: int = PARTS
    part_s: float = PART_S


def writer_files(parts: int = PARTS) -> dict[str, bytes]:
    """What a complete ``slow_writer`` run leaves in its output, in the order it writes it."""
    files = {f"part-{i:02d}.json": json.dumps({"part": i}).encode() for i in range(parts)}
    return {**files, "result.json": json.dumps({"parts": parts}).encode()}


def slow_writer(config: WriterConfig) -> None:
    trace(config.calls_dir, "starts")
    files = writer_files(config.parts)
    for i in range(config.parts):
        time.sleep(config.part_s)
        write_atomic(join(config.output_path, f"part-{i:02d}.json"), files[f"part-{i:02d}.json"])
        trace(config.calls_dir, "writes", part=i)
    write_atomic(join(config.output_path, "result.json"), files["result.json"])
    trace(config.calls_dir, "writes", part="result")


def writer_step(calls_dir: str) -> ExecutorStep:
    return ExecutorStep(
        name="fence/writer",
        fn=slow_writer,
        config=WriterConfig(calls_dir=calls_dir, output_path=this_output_path()),
        resources={"num_cpus": 0.5},
    )


def freeze_in_the_lease_lock_once(trigger: str) -> None:
    """Once ``trigger`` exists, stop this process inside the local store's lock on a lease, in a heartbeat
    that has read the lease it is about to rewrite (the trigger is removed first: one stop)."""

    def triggered(url: str) -> bool:
        if not url.endswith(LEASE_FILE) or not os.path.exists(trigger):
            return False
        os.remove(trigger)
        return True

    stop_inside_the_lock(triggered)


if __name__ == "__main__":
    if os.environ.get("ZOMBIE_FREEZE_IN_LOCK"):
        freeze_in_the_lease_lock_once(os.environ["ZOMBIE_FREEZE_IN_LOCK"])
    executor_main(steps=[writer_step(os.environ["ZOMBIE_CALLS"])])


@dataclasses.dataclass(frozen=True)
class GangConfig:
    calls_dir: str
    output_path: str
    first_attempt_s: float = 60.0


def gang_writer(config: GangConfig) -> None:
    """One host of a gang: writes a part every 0.1 s; the first attempt runs long enough to be fenced."""
    first = len(read_trace(config.calls_dir, "gang-starts")) < 2  # both hosts of attempt 1 trace first
    trace(config.calls_dir, "gang-starts")
    deadline = time.time() + (config.first_attempt_s if first else 0.5)
    i = 0
    while time.time() < deadline:
        time.sleep(0.1)
        write_atomic(join(config.output_path, f"host-{os.getpid()}-{i:03d}.json"), "{}")
        trace(config.calls_dir, "gang-writes")
        i += 1
