"""Bitwise resume of an RL run: SIGKILLed at a random iteration past a checkpoint and resumed, it ends with
exactly the parameters and optimizer state of a run never interrupted, and logged the same rewards. Its
rollouts are regenerated after the resume from the restored policy with the same seeds (a function of run
seed, iteration, prompt and sample), so nothing about them is stored."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from marin.trainer.checkpoint import _read_array, list_checkpoints

SCRIPT = Path(__file__).with_name("rl_resume_script.py")
ROOT = Path(__file__).resolve().parents[3]
ITERATIONS = 9
FIRST_CHECKPOINT = 3


def _launch(root: Path, output: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, str(SCRIPT), str(root), str(output), str(ITERATIONS)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _logged(output: Path) -> list[dict]:
    try:
        lines = (output / "metrics.jsonl").read_text().splitlines()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in lines if line.endswith("}")]


def _final_leaves(output: Path) -> dict[str, bytes]:
    import numpy as np

    step, url = list_checkpoints(str(output / "checkpoints"))[-1]
    assert step == ITERATIONS
    manifest = json.loads(Path(url, "manifest.json").read_text())
    return {
        name: meta["dtype"].encode()
        + _read_array(f"{url}/{name}", np.dtype(meta["dtype"]), tuple(meta["shape"])).tobytes()
        for name, meta in manifest["leaves"].items()
    }


@pytest.mark.slow  # three RL processes of a tiny model
@pytest.mark.timeout(900)
def test_killed_and_resumed_rl_run_is_bitwise_identical(tmp_path):
    seed = int.from_bytes(os.urandom(4), "little")
    kill_at = random.Random(seed).randint(FIRST_CHECKPOINT + 1, ITERATIONS - 2)
    note = f"(kill_at={kill_at}, seed={seed})"

    full = _launch(tmp_path, tmp_path / "full")
    log, _ = full.communicate()
    assert full.returncode == 0, log[-3000:]

    def killable() -> bool:
        done = list_checkpoints(str(tmp_path / "killed" / "checkpoints"))
        return len(_logged(tmp_path / "killed")) >= kill_at and bool(done) and done[-1][0] >= FIRST_CHECKPOINT

    victim = _launch(tmp_path, tmp_path / "killed")
    while not killable():
        assert victim.poll() is None, f"run finished before the kill {note}:\n{victim.stdout.read()[-3000:]}"
        time.sleep(0.005)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    victim.stdout.close()
    checkpoints = [s for s, _ in list_checkpoints(str(tmp_path / "killed" / "checkpoints"))]
    assert ITERATIONS not in checkpoints and max(checkpoints) >= FIRST_CHECKPOINT, note

    resumed = _launch(tmp_path, tmp_path / "killed")
    log, _ = resumed.communicate()
    assert resumed.returncode == 0, log[-3000:]
    assert f"resuming RL from iteration {max(checkpoints)}\n" in log, note

    full_leaves, resumed_leaves = _final_leaves(tmp_path / "full"), _final_leaves(tmp_path / "killed")
    assert sorted(full_leaves) == sorted(resumed_leaves) and any(n.startswith("opt_state/") for n in full_leaves)
    differing = [n for n in full_leaves if full_leaves[n] != resumed_leaves[n]]
    assert not differing, f"leaves differ after resume {note}: {differing[:10]}"

    def curve(output):
        return [(m["step"], m["rl/reward_mean"], m["rl/kl"], m["train/loss"]) for m in _logged(output)]

    assert curve(tmp_path / "full") == curve(tmp_path / "killed")
    assert len(curve(tmp_path / "full")) == ITERATIONS and curve(tmp_path / "full")[-1][2] > 0  # KL was in play
