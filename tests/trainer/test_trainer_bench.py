"""``benchmarks/trainer_bench.py`` runs as docs/trainer.md shows it, at its smallest: ``train()`` as a user
calls it and our bare step, each in fresh processes, with the host and matmul peaks recorded (the measured
side-by-side table with torch is in docs/trainer.md; torch's venv is not built here)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # ~50 s: two matmul-peak probes and eight training processes of nano
@pytest.mark.timeout(600)
def test_trainer_bench_times_train_and_the_step_in_fresh_processes(tmp_path):
    out = tmp_path / "bench.json"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "trainer_bench.py"), "--configs", "nano", "--rounds", "2"]
    proc = subprocess.run(
        [*cmd, "--steps", "2", "--peers", "train", "jax", "--out", str(out)]
        + ["--jax-variant", 'packed4={"peer": "jax", "docs_per_row": 4}']
        + ["--jax-variant", 'muon={"peer": "jax", "optimizer": {"kind": "muon", "learning_rate": 0.02}}'],
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
    assert set(rows) == {"train", "jax", "packed4", "muon"}  # variants of the bare step: packed rows, Muon
    for row in rows.values():
        assert row["rounds"] == 2 and row["timed_steps"] == 2
        assert 0 < row["tokens_per_s_min"] <= row["tokens_per_s"] <= row["tokens_per_s_max"]
        assert 0 < row["mfu"] < 1 and row["final_loss"] > 0
    assert "ours/jax" in proc.stdout  # the table gives train() against the bare step


def test_packed_segments_cut_each_row_into_that_many_documents():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from trainer_bench import CONFIGS, packed_segments

    c = CONFIGS["nano"]
    one = packed_segments(c, 1)
    assert one.shape == (c["batch"], c["seq_len"]) and not one.any()
    eight = packed_segments(c, 8)
    assert (eight[:, 0] == 0).all() and (eight[:, -1] == 7).all()
    assert (eight[:, 1:] - eight[:, :-1] >= 0).all() and ((eight[:, 1:] != eight[:, :-1]).sum(1) == 7).all()
