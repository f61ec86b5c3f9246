"""Does the trainer's CPU speed depend on what the process ran before it? (issue 28)

    .venv/bin/python benchmarks/history_bench.py                    # nano, 5 rounds of the four starts below
    .venv/bin/python benchmarks/history_bench.py --configs small --rounds 3 --steps 8

Each round starts a fresh process per way of starting, in rotating order, and trains the same model
(``trainer_bench.py``'s configs: same batches, AdamW, fp32) the way ``train()`` sets up, i.e. after
``marin.trainer.loop.tune_host_allocator()``:

* ``fresh``: nothing ran before (the trainer's malloc policy goes in before JAX starts);
* ``jax_first``: a JAX computation ran first (as eval, a data step or a notebook cell would), so the policy
  comes after JAX's threads exist (``train()`` warns);
* ``import_first``: ``marin.trainer`` imported, then the JAX computation, then training (a notebook that
  imports the trainer first: the import applies the policy);
* ``jax_first_env``: the same, in a process started with ``marin.allocator.large_buffers_env()``, as the
  executor starts training steps' workers;
* ``engine_first``: what an RL process does (``train_rl``): the policy first, then the serving engine's
  rollouts on the same model (continuous batching, KV cache, sampling), then training steps;
* ``no_policy``: no malloc policy at all (``MARIN_MALLOC_DEFAULTS=1``), for scale.

Per start it reports tokens/s over ``--steps`` steps after two warm-up steps, and the minor page faults per
step (``getrusage``): the mechanism behind the difference, and what the test asserts on, being exact where
time is noisy. The table gives medians over rounds; the JSON goes to ``benchmarks/results/history_bench.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from host import cpu_model  # noqa: E402  benchmarks/ is the script's own directory

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
STARTS = ("fresh", "jax_first", "import_first", "jax_first_env", "engine_first", "no_policy")


def worker(start: str, config: str, steps: int) -> dict:
    import logging
    import resource

    logging.basicConfig(level=logging.WARNING)
    if start == "import_first":
        import marin.trainer  # noqa: F401
    if start.startswith(("jax_first", "import_first")):
        import jax
        import jax.numpy as jnp

        jax.jit(lambda x: jnp.tanh(x @ x).sum())(jnp.ones((512, 512))).block_until_ready()
    if start != "no_policy":
        from marin.trainer.loop import tune_host_allocator

        tune_host_allocator()
    import trainer_bench

    c = trainer_bench.CONFIGS[config]
    if start == "engine_first":
        rollouts(trainer_bench, c)
    step, to_float = trainer_bench.jax_worker(c, {"tune_malloc": False})
    to_float(step())
    to_float(step())
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    t0 = time.perf_counter()
    for _ in range(steps):
        loss = step()
    to_float(loss)
    seconds = time.perf_counter() - t0
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    return {"tokens_per_s": steps * c["batch"] * c["seq_len"] / seconds, "faults_per_step": faults / steps}


def rollouts(trainer_bench, c: dict) -> None:
    """An RL iteration's sampling: 32 prompts x 64 new tokens through the engine on the benchmark's model."""
    import jax
    import numpy as np

    from marin.inference.engine import Engine, EngineConfig
    from marin.inference.sampling_params import SamplingParams
    from marin.trainer.model import LlamaConfig, init_params

    cfg = LlamaConfig(**trainer_bench.model_dims(c))
    engine = Engine(cfg, init_params(cfg, jax.random.PRNGKey(1)), EngineConfig(slots=16, prefill_chunk=64))
    prompts = np.random.default_rng(0).integers(0, cfg.vocab_size, size=(32, 48)).tolist()
    engine.generate(prompts, [SamplingParams(max_tokens=64, temperature=1.0, seed=i) for i in range(32)])


def run(start: str, config: str, steps: int) -> dict:
    from marin.allocator import KEEP_DEFAULTS_ENV, large_buffers_env

    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{HERE}", "JAX_PLATFORMS": "cpu"}
    env.pop("GLIBC_TUNABLES", None)
    if start == "jax_first_env":
        env.update(large_buffers_env(env))
    if start == "no_policy":
        env[KEEP_DEFAULTS_ENV] = "1"
    cmd = [sys.executable, __file__, "--worker", start, "--configs", config, "--steps", str(steps)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"{start} worker failed:\n{proc.stderr[-2000:]}")
    warned = "applied after JAX already ran" in proc.stderr
    return {**json.loads(proc.stdout.strip().splitlines()[-1]), "warned": warned}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", choices=STARTS, help=argparse.SUPPRESS)
    parser.add_argument("--configs", nargs="+", default=["nano"])
    parser.add_argument("--starts", nargs="+", default=list(STARTS), choices=STARTS)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "history_bench.json")
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.configs[0], args.steps)), flush=True)
        return
    report = {"host": cpu_model(), "time": time.strftime("%F %T"), "steps": args.steps, "configs": {}}
    for config in args.configs:
        rows: dict[str, list[dict]] = {start: [] for start in args.starts}
        for r in range(args.rounds):
            order = args.starts[r % len(args.starts) :] + args.starts[: r % len(args.starts)]
            for start in order:
                rows[start].append(run(start, config, args.steps))
                print(f"[{config} round {r + 1}] {start}: {rows[start][-1]}", file=sys.stderr, flush=True)
        base = statistics.median(x["tokens_per_s"] for x in rows[args.starts[0]])
        print(f"\n{config} on {report['host']}: median over {args.rounds} rounds, {args.steps} steps each")
        print(f"  {'start':<14} {'tokens/s':>9} {'[min-max]':>15} {'vs ' + args.starts[0]:>9} {'faults/step':>12}")
        for start, xs in rows.items():
            tps = [x["tokens_per_s"] for x in xs]
            med = statistics.median(tps)
            faults = statistics.median(x["faults_per_step"] for x in xs)
            print(
                f"  {start:<14} {med:>9,.0f} {f'[{min(tps):,.0f}-{max(tps):,.0f}]':>15} {med / base:>8.3f}x "
                f"{faults:>12,.0f}{'  (warned)' if any(x['warned'] for x in xs) else ''}"
            )
        report["configs"][config] = rows
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
