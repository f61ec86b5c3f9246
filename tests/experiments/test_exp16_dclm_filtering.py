"""The full-size DCLM filtering recipe plans offline: every step would run, inputs are pinned."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_dclm_filtering_dry_runs_anywhere(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("MARIN_PREFIX", "RAY_ADDRESS")}
    out = subprocess.run(
        [sys.executable, "experiments/exp16_dclm_filtering.py", "--dry_run", "true", "--prefix", str(tmp_path / "s")],
        check=False,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    actions = [line.split()[1].split("/")[-2] for line in out.stdout.splitlines() if line.startswith("run ")]
    assert sorted(actions) == [
        "attributes",
        "attributes",
        "classifiers",
        "documents",
        "documents",
        "extracted",
        "extracted",
        "filtered",
        "raw",
    ]
    assert "input_path=s3://commoncrawl/crawl-data/CC-MAIN-202" in out.stdout and "revision=b820378" in out.stdout
    assert not (tmp_path / "s").exists()
