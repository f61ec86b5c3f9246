"""Synthetic executor workload, run unchanged by our `marin.execution` and the peer (PyPI `marin-core`).

    python benchmarks/executor_workload.py --mode run|dry_run|plan --impl ours|peer \
        --shape chain|fan|chains_and_fan --n 200 --prefix /tmp/some/prefix

`run`/`dry_run` call `executor_main` (draccus argv `--prefix P [--dry_run true]`); `plan` times only the in-process
planning call (ours: `Executor(prefix=p).plan(steps)`; peer: `Executor.compute_version` over every step: names,
versions, hashes, output paths, no storage access). Prints `BENCH_JSON {...}` as its last stdout line.
"""

import time

_T0 = time.perf_counter()

if __name__ == "__main__":
    # Re-import under the real module name so `write_marker`/`StepConfig` pickle by reference
    # as `executor_workload.*` (importable in Ray workers via PYTHONPATH), not `__main__.*`.
    import executor_workload

    raise SystemExit(executor_workload.main())

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402

from marin.execution import (  # noqa: E402  (same public names in ours and the peer)
    Executor,
    ExecutorStep,
    executor_main,
    output_path_of,
    this_output_path,
    versioned,
)

IMPORT_S = time.perf_counter() - _T0
SHAPES = ("chain", "fan", "chains_and_fan")
N_CHAINS = 10  # chains_and_fan: this many parallel chains feeding one final step


@dataclass(frozen=True)
class StepConfig:
    output_path: str
    inputs: list = field(default_factory=list)  # output paths of upstream steps (InputName placeholders)
    index: int = 0  # versioned(...) when built
    shape: str = ""  # versioned(...) when built


def write_marker(config: StepConfig) -> None:
    """Step body: write a ~100-byte JSON file into the step's output path."""
    os.makedirs(config.output_path, exist_ok=True)
    record = {"index": config.index, "shape": config.shape, "n_inputs": len(config.inputs), "pad": "x" * 32}
    with open(os.path.join(config.output_path, "data.json"), "w") as f:
        json.dump(record, f)


def _step(name: str, i: int, shape: str, deps: list) -> ExecutorStep:
    config = StepConfig(
        output_path=this_output_path(),
        inputs=[output_path_of(d) for d in deps],
        index=versioned(i),
        shape=versioned(shape),
    )
    return ExecutorStep(name=name, fn=write_marker, config=config, description=f"bench {shape} step {i}")


def build_steps(shape: str, n: int) -> list:
    """Return `n` steps in topological order (dependencies before dependents)."""
    if shape == "chain":  # step i depends on step i-1
        steps: list = []
        for i in range(n):
            steps.append(_step(f"bench/chain/s{i:05d}", i, shape, steps[-1:]))
        return steps
    if shape == "fan":  # one root, n-1 children depending on it
        root = _step("bench/fan/root", 0, shape, [])
        return [root] + [_step(f"bench/fan/c{i:05d}", i, shape, [root]) for i in range(1, n)]
    if shape == "chains_and_fan":  # N_CHAINS chains sharing n-1 steps, plus a final step on all tails
        n_chains = min(N_CHAINS, max(n - 1, 1))
        steps, tails, i = [], [], 0
        for c in range(n_chains):
            length = (n - 1) // n_chains + (1 if c < (n - 1) % n_chains else 0)
            prev: list = []
            for j in range(length):
                prev = [_step(f"bench/cf/c{c:02d}/s{j:05d}", i, shape, prev)]
                steps.append(prev[0])
                i += 1
            tails += prev
        return steps + [_step("bench/cf/final", i, shape, tails)]
    raise ValueError(f"unknown shape {shape!r}; expected one of {SHAPES}")


def plan(impl: str, steps: list, prefix: str) -> int:
    """The in-process plan+hash call for each implementation; returns the number of planned steps."""
    if impl == "ours":
        return len(Executor(prefix=prefix).plan(steps).steps)
    executor = Executor(prefix=prefix, executor_info_base_path=os.path.join(prefix, "experiments"))
    for step in steps:
        executor.compute_version(step, is_pseudo_dep=False)
    return len(executor.steps)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=("run", "dry_run", "plan"), required=True)
    ap.add_argument("--impl", choices=("ours", "peer"), required=True)
    ap.add_argument("--shape", choices=SHAPES, required=True)
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--prefix", required=True)
    args = ap.parse_args()
    steps = build_steps(args.shape, args.n)
    out = {"import_s": IMPORT_S, "n": len(steps)}
    if args.mode == "plan":
        t = time.perf_counter()
        out["planned"] = plan(args.impl, steps, args.prefix)
        out["plan_s"] = time.perf_counter() - t
    else:
        sys.argv = [sys.argv[0], "--prefix", args.prefix] + (["--dry_run", "true"] if args.mode == "dry_run" else [])
        t = time.perf_counter()
        executor_main(steps=steps, description=f"executor bench {args.shape} n={args.n}")
        out["executor_main_s"] = time.perf_counter() - t
    print("BENCH_JSON " + json.dumps(out), flush=True)
