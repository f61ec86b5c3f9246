"""``benchmarks/trainer_bench.py`` runs as docs/trainer.md shows it, at its smallest: ``train()`` as a user
calls it and our bare step, each in fresh processes, with the host and matmul peaks recorded (the measured
side-by-side table with torch is in docs/trainer.md; torch's venv is not built here)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # ~40 s: two matmul-peak probes and four training processes of nano
@pytest.mark.timeout(600)
def test_trainer_bench_times_train_and_the_step_in_fresh_processes(tmp_path):
    out = tmp_path / "bench.json"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "trainer_bench.py"), "--configs", "nano", "--rounds", "2"]
    proc = subprocess.run(
        [*cmd, "--steps", "2", "--peers", "train", "jax", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["host"]["cpu_model"] and report["host"]["jax"]
    assert set(report["matmul_peaks"]) == {"jax_float32"}  # no torch peer: no torch venv, no torch peak
    assert report["peak_flops"] == report["matmul_peaks"]["jax_float32"]
    rows = report["configs"]["nano"]
    assert set(rows) == {"train", "jax"}
    for row in rows.values():
        assert row["rounds"] == 2 and row["timed_steps"] == 2
        assert 0 < row["tokens_per_s_min"] <= row["tokens_per_s"] <= row["tokens_per_s_max"]
        assert 0 < row["mfu"] < 1 and row["final_loss"] > 0
    assert "ours/jax" in proc.stdout  # the table gives train() against the bare step
