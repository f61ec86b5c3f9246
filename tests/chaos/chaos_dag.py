"""The 20-step experiment the chaos tests run, kill and rerun; every attempt of every step leaves a trace.

    CHAOS_CALLS=/tmp/calls python tests/chaos/chaos_dag.py --prefix gs://bucket/lab --poll_s 0.1

Shape (5 + 5 + 5 + 4 + 1 steps), so that kills land on fan-in, fan-out and long chains alike:

    src/i            no inputs                          i = 0..4
    mid/i            src/i, src/(i+1)%5
    join/i           mid/i, mid/(i+2)%5
    top/i            join/i, join/i+1                   i = 0..3
    final            top/0..3

Each step's output ``result.json`` holds a digest of its label and its inputs' digests, so the final
outputs are a pure function of the DAG and any rerun must reproduce them byte for byte. Traces go to
local files under ``CHAOS_CALLS`` (one line per event, appended with O_APPEND):

    <label>.start    "<owner> <pid> <time>"   the attempt began (owner: the executor that launched it)
    <label>.done     "<owner> <pid> <time>"   the attempt wrote its output and returned

``owner`` is read from the step's last status event, which the executor writes (RUNNING, with its
owner id ``host:pid:nonce``) just before it submits the task.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time

from marin.execution import ExecutorStep, executor_main, this_output_path
from marin.execution.status import read_events
from marin.storage import join, read_text, write_atomic


@dataclasses.dataclass(frozen=True)
class ChaosConfig:
    calls_dir: str
    label: str
    output_path: str
    inputs: tuple = ()
    sleep_s: float = 0.0


def chaos_step(config: ChaosConfig) -> None:
    owner = read_events(config.output_path)[-1]["owner"]
    _trace(config, "start", owner)
    time.sleep(config.sleep_s)
    upstream = [json.loads(read_text(path))["digest"] for path in config.inputs]
    digest = hashlib.sha256(json.dumps([config.label, upstream]).encode()).hexdigest()
    write_atomic(join(config.output_path, "result.json"), json.dumps({"label": config.label, "digest": digest}))
    _trace(config, "done", owner)


def _trace(config: ChaosConfig, kind: str, owner: str) -> None:
    os.makedirs(config.calls_dir, exist_ok=True)
    path = os.path.join(config.calls_dir, f"{config.label.replace('/', '_')}.{kind}")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{owner} {os.getpid()} {time.time()}\n".encode())
    finally:
        os.close(fd)


def build(calls_dir: str, sleep_s: float) -> list[ExecutorStep]:
    def step(label, *inputs):
        config = ChaosConfig(
            calls_dir=calls_dir,
            label=label,
            output_path=this_output_path(),
            inputs=tuple(i / "result.json" for i in inputs),
            sleep_s=sleep_s,
        )
        return ExecutorStep(name=f"chaos/{label}", fn=chaos_step, config=config, resources={"num_cpus": 0.25})

    src = [step(f"src{i}") for i in range(5)]
    mid = [step(f"mid{i}", src[i], src[(i + 1) % 5]) for i in range(5)]
    joins = [step(f"join{i}", mid[i], mid[(i + 2) % 5]) for i in range(5)]
    top = [step(f"top{i}", joins[i], joins[i + 1]) for i in range(4)]
    return [step("final", *top)]


LABELS = [f"{kind}{i}" for kind, n in (("src", 5), ("mid", 5), ("join", 5), ("top", 4)) for i in range(n)] + ["final"]


def traces(calls_dir: str, label: str, kind: str) -> list[tuple[str, int, float]]:
    """(owner, pid, time) of every ``kind`` ("start" / "done") event of ``label``."""
    path = os.path.join(calls_dir, f"{label}.{kind}")
    if not os.path.exists(path):
        return []
    out = []
    for line in open(path).read().splitlines():
        owner, pid, t = line.split(" ")
        out.append((owner, int(pid), float(t)))
    return out


if __name__ == "__main__":
    executor_main(steps=build(os.environ["CHAOS_CALLS"], float(os.environ.get("CHAOS_SLEEP", "0.05"))))
