"""Training speed on CPU does not depend on what the process ran first, when it starts as the executor
starts training steps (``benchmarks/history_bench.py``, docs/trainer.md).

Asserted on page faults per steady-state step, the mechanism, not on time (noisy here): with the
trainer's malloc policy in force, large buffers are reused from the heap; applied only after JAX's
threads exist, they are mapped and faulted in again every step (measured on nano: ~2,400 against
~71,000 faults per step over 30 steps, and 0.85x the tokens/s)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # four fresh processes each compiling and running the nano step: ~40 s
@pytest.mark.timeout(600)
def test_jax_first_process_started_with_the_tunables_or_the_trainer_imported_trains_like_a_fresh_one(tmp_path):
    out = tmp_path / "history.json"
    starts = ("fresh", "jax_first", "jax_first_env", "import_first")
    cmd = [sys.executable, "benchmarks/history_bench.py", "--rounds", "1", "--steps", "6", "--out", str(out)]
    proc = subprocess.run([*cmd, "--starts", *starts], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [fresh], [late], [env], [imported] = (json.loads(out.read_text())["configs"]["nano"][s] for s in starts)
    # The policy applied after JAX ran re-faults the large buffers every step, and train() says so ...
    assert late["faults_per_step"] > 3 * fresh["faults_per_step"], (late, fresh)
    assert late["warned"] and not fresh["warned"] and not env["warned"] and not imported["warned"]
    # ... while a process started with the tunables does not, whatever ran first, nor one that imported
    # the trainer before running JAX (a notebook's first cell).
    assert env["faults_per_step"] < 0.4 * late["faults_per_step"], (env, late)
    assert imported["faults_per_step"] < 0.4 * late["faults_per_step"], (imported, late)
