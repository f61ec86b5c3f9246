"""Executor 101: a two-step DAG. Step one writes numbers, step two computes statistics over them.

    python experiments/hello_world.py                   # outputs under ./local_store
    python experiments/hello_world.py --dry_run true    # what would run, and why


Changing a `versioned(...)` value (say `n`) gives the step a new hash, so a new output directory, and
the stats step downstream moves with it. Unversioned fields (like `description`) change nothing.
"""

import dataclasses
import json
import random

from marin.execution import ExecutorStep, executor_main, this_output_path, versioned
from marin.storage import join, open_url, write_atomic


@dataclasses.dataclass(frozen=True)
class NumbersConfig:
    n: int
    seed: int
    output_path: str


def make_numbers(config: NumbersConfig) -> None:
    rng = random.Random(config.seed)
    with open_url(join(config.output_path, "numbers.jsonl"), "wt") as f:
        for i in range(config.n):
            f.write(json.dumps({"id": i, "value": rng.gauss(0, 1)}) + "\n")


@dataclasses.dataclass(frozen=True)
class StatsConfig:
    input_path: str
    output_path: str


def compute_stats(config: StatsConfig) -> None:
    with open_url(config.input_path, "rt") as f:
        values = [json.loads(line)["value"] for line in f]
    mean = sum(values) / len(values)
    var = sum((v - mean) ** 2 for v in values) / len(values)
    stats = {"count": len(values), "mean": mean, "std": var**0.5, "min": min(values), "max": max(values)}
    write_atomic(join(config.output_path, "stats.json"), json.dumps(stats, indent=2))


numbers = ExecutorStep(
    name="hello/numbers",
    fn=make_numbers,
    config=NumbersConfig(n=versioned(1000), seed=versioned(0), output_path=this_output_path()),
    description="1,000 standard-normal numbers",
)

stats = ExecutorStep(
    name="hello/stats",
    fn=compute_stats,
    config=StatsConfig(input_path=numbers / "numbers.jsonl", output_path=this_output_path()),
    description="mean / std / min / max of the numbers",
)

if __name__ == "__main__":
    executor_main(steps=[stats], description="Executor 101: numbers -> stats")
