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
    write_atomic(join(config.output_path, "result.json"), _result(config.label, upstream))
    _trace(config, "done", owner)


def _result(label: str, upstream: list[str]) -> str:
    """A step's ``result.json``: a digest of its label and its inputs' digests."""
    digest = hashlib.sha256(json.dumps([label, upstream]).encode()).hexdigest()
    return json.dumps({"label": label, "digest": digest})


def _trace(config: ChaosConfig, kind: str, owner: str) -> None:
    os.makedirs(config.calls_dir, exist_ok=True)
    path = os.path.join(config.calls_dir, f"{config.label.replace('/', '_')}.{kind}")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{owner} {os.getpid()} {time.time()}\n".encode())
    finally:
        os.close(fd)


def _inputs() -> dict[str, list[str]]:
    """Each step's label -> its inputs' labels (the shape in the module docstring), inputs first."""
    inputs = {f"src{i}": [] for i in range(5)}
    inputs.update({f"mid{i}": [f"src{i}", f"src{(i + 1) % 5}"] for i in range(5)})
    inputs.update({f"join{i}": [f"mid{i}", f"mid{(i + 2) % 5}"] for i in range(5)})
    inputs.update({f"top{i}": [f"join{i}", f"join{i + 1}"] for i in range(4)})
    inputs["final"] = [f"top{i}" for i in range(4)]
    return inputs


INPUTS = _inputs()
LABELS = list(INPUTS)


def build(calls_dir: str, sleep_s: float) -> list[ExecutorStep]:
    steps: dict[str, ExecutorStep] = {}
    for label, inputs in INPUTS.items():
        config = ChaosConfig(
            calls_dir=calls_dir,
            label=label,
            output_path=this_output_path(),
            inputs=tuple(steps[i] / "result.json" for i in inputs),
            sleep_s=sleep_s,
        )
        steps[label] = ExecutorStep(name=f"chaos/{label}", fn=chaos_step, config=config, resources={"num_cpus": 0.25})
    return [steps["final"]]


def expected_results() -> dict[str, str]:
    """label -> the ``result.json`` every complete run writes (the outputs are a pure function of the DAG)."""
    results: dict[str, str] = {}
    for label, inputs in INPUTS.items():
        results[label] = _result(label, [json.loads(results[i])["digest"] for i in inputs])
    return results


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
