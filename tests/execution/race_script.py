"""An experiment used by the multi-process tests: a 6-step DAG whose steps record every call.

    RACE_CALLS=/tmp/calls RACE_SLEEP=0.3 python tests/execution/race_script.py --prefix /tmp/store

Sleep time is unversioned, so a rerun with a different RACE_SLEEP targets the same outputs.
"""

import os

from marin.execution import ExecutorStep, executor_main, this_output_path
from tests.execution.steps_lib import TraceConfig, trace_step


def build(calls: str, sleep_s: float, slow_label: str | None = None, slow_s: float = 0.0) -> list[ExecutorStep]:
    def step(label, *inputs):
        config = TraceConfig(
            calls_dir=calls,
            label=label,
            output_path=this_output_path(),
            inputs=tuple(i / "result.json" for i in inputs),
            sleep_s=slow_s if label == slow_label else sleep_s,
        )
        return ExecutorStep(name=label, fn=trace_step, config=config, resources={"num_cpus": 0.5})

    raw = step("race/raw")
    left = step("race/left", raw)
    right = step("race/right", raw)
    joined = step("race/joined", left, right)
    tail = step("race/tail", joined)
    side = step("race/side")
    return [tail, side]


if __name__ == "__main__":
    executor_main(
        steps=build(
            os.environ["RACE_CALLS"],
            float(os.environ.get("RACE_SLEEP", "0.2")),
            os.environ.get("RACE_SLOW_LABEL"),
            float(os.environ.get("RACE_SLOW_S", "0")),
        )
    )
