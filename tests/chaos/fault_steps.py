"""Step functions for the Ray fault tests, and the experiment a preemption test runs in a subprocess.

    RAY_ADDRESS=... FAULT_CALLS=/tmp/calls python tests/chaos/fault_steps.py --prefix gs://bucket/lab

``victim_step`` writes half of its output, then (on its first attempt only) blocks so the test can kill
its Ray worker. ``checkpointed_training`` stands in for a training run: it advances a state one step at a
time, checkpoints after every step and, when restarted, resumes from the last checkpoint. Both leave one
trace line per attempt in ``FAULT_CALLS`` so the tests can see every (re)start.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time

from marin.execution import ExecutorStep, ResourceConfig, executor_main, this_output_path
from marin.storage import join, read_text, write_atomic

TPU_RESOURCE = "fake-tpu-slice"


def trace(calls_dir: str, name: str, **fields) -> int:
    """Append one JSON line to ``<calls_dir>/<name>.jsonl``; returns the attempt number (1-based)."""
    os.makedirs(calls_dir, exist_ok=True)
    path = os.path.join(calls_dir, f"{name}.jsonl")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps({"pid": os.getpid(), "time": time.time(), **fields}) + "\n").encode())
    finally:
        os.close(fd)
    return len(read_trace(calls_dir, name))


def read_trace(calls_dir: str, name: str) -> list[dict]:
    path = os.path.join(calls_dir, f"{name}.jsonl")
    if not os.path.exists(path):
        return []
    return [json.loads(line) for line in open(path).read().splitlines()]


@dataclasses.dataclass(frozen=True)
class VictimConfig:
    calls_dir: str
    output_path: str
    hold_s: float = 120.0


def victim_step(config: VictimConfig) -> None:
    attempt = len(read_trace(config.calls_dir, "victim")) + 1
    write_atomic(join(config.output_path, "part-0.json"), json.dumps({"attempt": attempt}))
    trace(config.calls_dir, "victim")  # after part-0: the test kills us once it sees this line
    if attempt == 1:
        time.sleep(config.hold_s)  # the test SIGKILLs this worker in here
    write_atomic(join(config.output_path, "part-1.json"), json.dumps({"attempt": attempt}))
    write_atomic(join(config.output_path, "result.json"), json.dumps({"parts": 2, "attempt": attempt}))


@dataclasses.dataclass(frozen=True)
class ReaderConfig:
    calls_dir: str
    input_path: str
    output_path: str


def reader_step(config: ReaderConfig) -> None:
    upstream = json.loads(read_text(config.input_path))
    trace(config.calls_dir, "reader", upstream=upstream)
    write_atomic(join(config.output_path, "seen.json"), json.dumps(upstream))


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    calls_dir: str
    output_path: str
    num_steps: int = 40
    step_s: float = 0.1


def advance(state: str, step: int) -> str:
    """One deterministic "training step"."""
    return hashlib.sha256(f"{state}:{step}".encode()).hexdigest()


def final_state(num_steps: int) -> str:
    state = "init"
    for step in range(num_steps):
        state = advance(state, step)
    return state


def checkpointed_training(config: TrainConfig) -> None:
    import ray

    ckpt_url = join(config.output_path, "checkpoint.json")
    try:
        ckpt = json.loads(read_text(ckpt_url))
    except FileNotFoundError:
        ckpt = {"step": 0, "state": "init"}
    trace(config.calls_dir, "train", resumed_from=ckpt["step"], node=ray.get_runtime_context().get_node_id())
    state = ckpt["state"]
    for step in range(ckpt["step"], config.num_steps):
        time.sleep(config.step_s)
        state = advance(state, step)
        write_atomic(ckpt_url, json.dumps({"step": step + 1, "state": state}))
    write_atomic(join(config.output_path, "result.json"), json.dumps({"state": state}))


def training_step(calls_dir: str) -> ExecutorStep:
    return ExecutorStep(
        name="chaos/train",
        fn=checkpointed_training,
        config=TrainConfig(calls_dir=calls_dir, output_path=this_output_path()),
        resources=ResourceConfig(num_cpus=1, resources={TPU_RESOURCE: 1}, max_retries=3),
    )


if __name__ == "__main__":
    executor_main(steps=[training_step(os.environ["FAULT_CALLS"])])
