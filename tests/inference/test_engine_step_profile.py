"""``benchmarks/engine_step_profile.py`` traces an engine program and accounts for its time by operation."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("program", ["decode", "mixed"])
def test_the_profile_accounts_for_a_steps_matrix_products(program):
    cmd = [sys.executable, str(ROOT / "benchmarks" / "engine_step_profile.py"), "--preset", "nano"]
    cmd += ["--slots", "4", "--rows", "4", "--span", "128", "--chunk", "16", "--steps", "3", "--program", program]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    header = re.search(r"([\d.]+) ms per step \(untraced\), operations sum to ([\d.]+) ms", done.stdout)
    assert header and float(header.group(1)) > 0 and float(header.group(2)) > 0, done.stdout
    rows = [line.split("|") for line in done.stdout.splitlines() if re.match(r"\| [\d.]+ \| \d+ \|", line)]
    assert rows, done.stdout
    # the step's logits: a [rows (+1 for the prompt's last position in a mixed step), vocab] product
    rows_out = 5 if program == "mixed" else 4
    assert any(f"f32[{rows_out},8192]" in row[4] for row in rows), done.stdout  # nano's vocabulary: 8,192
