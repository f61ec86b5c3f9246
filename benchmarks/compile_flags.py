"""What the test suite's XLA:CPU flags (``tests/compile_cache.py``'s ``TEST_XLA_FLAGS``) buy and cost, against XLA's
defaults, side by side in fresh processes:

    PYTHONPATH=. .venv/bin/python benchmarks/compile_flags.py --rounds 2

Each round runs one fresh process per flag set, in rotating order, and each process measures:

* ``tiny``: the trainer tests' 2-layer model (``tests/trainer/conftest.py``): its jitted parameter init
  (compile and run), the train step's lowering and compilation in fp32 and in bf16 compute, and the fp32
  step's run time (median of 20 after the first);
* ``nano``: the quickstart's pretraining model (``experiments.models.llama_nano``, vocabulary 2,048, 256
  tokens, batch 16, fp32): init, first step (compile and run) and the step's run time (median of 10).

The suite's programs are tiny, so compile time is what the suite pays; the quickstart's run time is what a
long test (and a user, who keeps XLA's defaults) pays. Also printed: whether the tiny model's parameters after
21 steps are bitwise those of the defaults' run. Results go to ``benchmarks/results/compile_flags.json``.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.compile_cache import TEST_XLA_FLAGS  # noqa: E402

FLAG_SETS = {"defaults": "", "test_flags": TEST_XLA_FLAGS}


def _measure() -> dict:
    import hashlib

    import jax
    import jax.numpy as jnp
    import numpy as np

    from experiments.models import llama_nano
    from marin.trainer.model import param_axes
    from marin.trainer.optim import OptimizerConfig
    from marin.trainer.step import PrecisionPolicy, StepConfig, init_state, make_train_step
    from tests.trainer.conftest import tiny_model
    from tests.trainer.test_step import _batch

    def timed(fn, *args):
        start = time.perf_counter()
        out = jax.block_until_ready(fn(*args))
        return out, time.perf_counter() - start

    out: dict = {}
    for name, cfg, batch_size, runs in (("tiny", tiny_model(), 8, 20), ("nano", llama_nano(2048, 256), 16, 10)):
        opt = OptimizerConfig(learning_rate=1e-3, schedule="constant", warmup=0)
        tx = opt.build(100, param_axes(cfg))
        fp32 = PrecisionPolicy(compute_dtype="float32")
        init = jax.jit(functools.partial(init_state, cfg, tx, ema=False, policy=fp32))
        state, init_s = timed(init, jax.random.PRNGKey(0))
        row = {"init_s": init_s}
        if name == "tiny":
            batch = jax.tree.map(jnp.asarray, _batch(cfg, batch_size))
            for dtype in ("float32", "bfloat16"):
                policy = PrecisionPolicy(compute_dtype=dtype)
                step = make_train_step(cfg, tx, opt.lr_schedule(100), StepConfig(precision=policy))
                start = time.perf_counter()
                lowered = step.lower(state, batch)
                row[f"lower_{dtype}_s"] = time.perf_counter() - start
                start = time.perf_counter()
                lowered.compile()
                row[f"compile_{dtype}_s"] = time.perf_counter() - start
        else:
            tokens = jnp.asarray(np.random.default_rng(0).integers(0, cfg.vocab_size, (batch_size, cfg.seq_len)))
            ones = jnp.ones((batch_size, cfg.seq_len))
            batch = {
                "input_ids": tokens,
                "targets": jnp.roll(tokens, -1, axis=1),
                "segment_ids": ones.astype(jnp.int32),
                "loss_mask": ones,
            }
        step = make_train_step(cfg, tx, opt.lr_schedule(100), StepConfig(precision=fp32))
        (state, _), row["first_step_s"] = timed(step, state, batch)
        times = []
        for _ in range(runs):
            (state, metrics), seconds = timed(step, state, batch)
            times.append(seconds)
        row["step_ms"] = 1e3 * float(np.median(times))
        row["loss"] = float(metrics["loss"])
        leaves = jax.tree.leaves(jax.device_get(state.params))
        row["params_sha1"] = hashlib.sha1(b"".join(np.asarray(x).tobytes() for x in leaves)).hexdigest()[:12]
        out[name] = row
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "compile_flags.json"))
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(_measure()))
        return

    names = list(FLAG_SETS)
    rounds = []
    for r in range(args.rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            env = {**os.environ, "XLA_FLAGS": FLAG_SETS[name], "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}
            env.pop("JAX_COMPILATION_CACHE_DIR", None)
            proc = subprocess.run(
                [sys.executable, __file__, "--worker"], env=env, capture_output=True, text=True, check=True
            )
            result = json.loads(proc.stdout.strip().splitlines()[-1])
            rounds.append({"round": r, "flags": name, **result})
            print(name, json.dumps(result), flush=True)

    summary = {}
    for name in names:
        mine = [row for row in rounds if row["flags"] == name]
        summary[name] = {
            f"{model}/{key}": sorted(row[model][key] for row in mine)
            for model in ("tiny", "nano")
            for key in mine[0][model]
            if key != "params_sha1"
        }
    bitwise = {model: len({row[model]["params_sha1"] for row in rounds}) == 1 for model in ("tiny", "nano")}
    print(json.dumps({"summary": summary, "bitwise_equal_to_defaults": bitwise}, indent=1))
    Path(args.out).write_text(json.dumps({"flag_sets": FLAG_SETS, "rounds": rounds, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
