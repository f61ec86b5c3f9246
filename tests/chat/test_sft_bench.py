"""benchmarks/sft_bench.py runs end to end (small sizes) and reports both comparisons with their ratios."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # one training compile per variant and transformers' tokenizer
def test_sft_bench_prints_both_tables_with_ratios(tmp_path):
    pytest.importorskip("transformers", reason="the rendering comparison needs transformers (export-test extra)")
    results = ROOT / "benchmarks" / "results" / "sft_bench.json"
    before = results.read_bytes() if results.exists() else None
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    try:
        out = subprocess.run(
            [
                sys.executable,
                "benchmarks/sft_bench.py",
                "--conversations",
                "200",
                "--steps",
                "2",
                "--repeat",
                "1",
                "--batch_size",
                "4",
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            check=False,
            text=True,
            timeout=600,
        )
        assert out.returncode == 0, out.stderr[-3000:]
        assert "ours / transformers with mask:" in out.stdout and "SFT / pretraining:" in out.stdout
        data = json.loads(results.read_text())
        assert data["rendering"]["conversations"] == 200 and data["rendering"]["ratio_vs_with_mask"] > 0
        share = data["training"]["share_of_targets_trained"]
        assert 0 < share["sft"] < share["pretraining"] <= 1  # the mask really masks, on the same tokens
    finally:  # keep the committed full-size results
        if before is not None:
            results.write_bytes(before)
