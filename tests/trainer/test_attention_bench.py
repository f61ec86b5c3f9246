"""``benchmarks/attention_bench.py`` runs as docs/trainer.md shows it, on tiny shapes: the workers, the
memory numbers and the table (the measured table itself is in docs/trainer.md and the issue)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # ~10 s: a platform probe and four worker processes
@pytest.mark.timeout(240)
def test_attention_bench_prints_a_table_with_ratios_to_reference(tmp_path):
    out = tmp_path / "bench.json"
    cmd = [
        sys.executable,
        str(ROOT / "benchmarks" / "attention_bench.py"),
        "--dtype",
        "bfloat16",
        "--seqs",
        "128",
        "256",
        "--backends",
        "reference",
        "xla",
        "--reps",
        "1",
        "--out",
        str(out),
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=230)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "platform cpu" in proc.stdout and "fwd+bwd ms" in proc.stdout and "XLA temp MiB" in proc.stdout
    rows = json.loads(out.read_text())["rows"]
    assert [(r["backend"], r["seq"]) for r in rows] == [
        ("reference", 128),
        ("xla", 128),
        ("reference", 256),
        ("xla", 256),
    ]
    for r in rows:
        assert "error" not in r, r
        assert r["step_ms"] > 0 and r["xla_temp_bytes"] > 0 and r["peak_rss_delta_bytes"] > 0
    assert "1.00x" in proc.stdout  # reference against itself
