"""The quickstart's post-training gains across seeds and CPU kernels: the spread its tests' margins come from.
Issue #80.

XLA:CPU rounds differently on different processors (an AMD EPYC and an Intel Xeon printed different quickstart
numbers from the same commit), and training amplifies it. This host cannot be another processor, but it can
run other kernels: each variant below runs ``exp47_quickstart_seeds.py`` (the whole quickstart, then the
post-training phases under seeds 1 and 2) in a store of its own, in a fresh process tree whose XLA:CPU code
differs from the default's, as another host's would.

    python experiments/exp80_quickstart_spread.py --root /tmp/spread                  # ~50 minutes on 2 cores
    python experiments/exp80_quickstart_spread.py --root /tmp/spread --variants default one_core

It writes ``<root>/spread.json`` (every variant and seed's ``quickstart.post_training_gains`` rows) and prints
the table of docs/quickstart.md, with each quantity's range over everything run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = {
    "default": {"seeds": (0, 1, 2)},
    # one core: one process and one XLA thread (the quickstart's host_processes follows the cores it may use)
    "one_core": {"cores": 1, "seeds": (0,)},
    # XLA's older elemental emitters with LLVM's optimizations off: other fused code, other rounding
    "no_fusion_O0": {"XLA_FLAGS": "--xla_cpu_use_fusion_emitters=false --xla_backend_optimization_level=0"},
    # reassociation and approximate transcendentals (exp, log, tanh) in the generated code
    "fast_math": {"XLA_FLAGS": "--xla_cpu_enable_fast_math=true"},
}


def run_variant(name: str, root: Path) -> None:
    """exp47 in ``root/name`` under the variant's kernels (a no-op where the store already holds it)."""
    variant = VARIANTS[name]
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MARIN_PREFIX", "XLA_FLAGS")}
    if "XLA_FLAGS" in variant:
        env["XLA_FLAGS"] = variant["XLA_FLAGS"]
    cores = sorted(os.sched_getaffinity(0))[: variant.get("cores", len(os.sched_getaffinity(0)))]
    seeds = variant.get("seeds", (0,))
    code = f"import sys; from experiments import exp47_quickstart_seeds as e; e.main({tuple(seeds)!r}, sys.argv[1:])"
    log = root / f"{name}.log"
    with open(log, "w") as out:
        proc = subprocess.run(
            [sys.executable, "-c", code, "--prefix", str(root / name)],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=lambda: os.sched_setaffinity(0, cores),
        )
    if proc.returncode != 0:
        raise RuntimeError(f"variant {name!r} failed (exit {proc.returncode}); its output is in {log}")


def collect(name: str, root: Path) -> list[dict]:
    """The variant's rows (``exp47_quickstart_seeds.summary_rows``), read from its store."""
    from experiments import exp47_quickstart_seeds as e
    from marin.execution import Executor

    phases = e.build(VARIANTS[name].get("seeds", (0,)))
    plan = Executor(prefix=str(root / name)).plan(e.targets(phases))
    gains = e.gains_by_seed(phases, {p.name: p.output_path for p in plan.steps})
    return [{"variant": name, **row} for row in e.summary_rows(gains)]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", required=True, help="directory holding one store per variant")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    args = parser.parse_args(argv)
    root = Path(args.root)
    root.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.variants:
        print(f"variant {name}: {VARIANTS[name]}", flush=True)
        run_variant(name, root)
        rows += collect(name, root)
    from experiments import exp47_quickstart_seeds as e

    e.print_rows(rows)
    record = {"host": _cpu_model(), "python": platform.python_version(), "variants": VARIANTS, "rows": rows}
    (root / "spread.json").write_text(json.dumps(record, indent=2, default=list))
    print(f"\nwrote {root / 'spread.json'}")
    return record


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


if __name__ == "__main__":
    main()
