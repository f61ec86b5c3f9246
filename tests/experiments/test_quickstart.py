"""The quickstart end to end (fewer training steps than `make quickstart`), its learning criteria, and a
rerun that executes nothing."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from marin.execution import Executor

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from experiments import quickstart  # noqa: E402


@pytest.mark.slow
def test_quickstart_learns_and_reruns_as_a_no_op(tmp_path, ray_address):
    steps = quickstart.build(num_train_steps=120, stage_change_step=60)
    prefix = str(tmp_path / "store")
    result = Executor(prefix=prefix).run([steps["evaluation"], steps["export"]])
    assert len(result.ran) == len(result.plan.steps) == 10

    evaluation = next(p for p in result.plan.steps if p.name == steps["evaluation"].name)
    results = json.loads((Path(evaluation.output_path) / "results.json").read_text())
    for name, r in results["validation"].items():
        assert r["bits_per_byte"] < 0.5 * r["unigram_bits_per_byte"], (name, r)
    above_chance = [name for name, r in results["tasks"].items() if r["acc"]["ci95"][0] > r["chance"]]
    assert len(above_chance) >= 2, results["tasks"]

    checkpoints = next(p for p in result.plan.steps if p.name == steps["checkpoints"].name)
    metrics = [json.loads(line) for line in (Path(checkpoints.output_path) / "metrics.jsonl").read_text().splitlines()]
    losses = [m["train/loss"] for m in metrics if "train/loss" in m]
    assert losses[-1] < 0.5 * losses[0]
    export = next(p for p in result.plan.steps if p.name == steps["export"].name)
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(os.listdir(export.output_path))

    again = Executor(prefix=prefix).run([steps["evaluation"], steps["export"]])
    assert again.ran == [] and len(again.skipped) == 10


def test_default_quickstart_is_the_full_run_and_dry_runs(tmp_path):
    assert quickstart.STEPS["checkpoints"].config.trainer.value.num_train_steps == 200
    env = {k: v for k, v in os.environ.items() if k not in ("MARIN_PREFIX", "RAY_ADDRESS")}
    out = subprocess.run([sys.executable, "experiments/quickstart.py", "--dry_run", "true", "--prefix",
                          str(tmp_path / "s")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("\nrun ") == 10 and not (tmp_path / "s").exists()
