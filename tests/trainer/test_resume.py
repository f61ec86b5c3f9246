"""Bitwise resume: a run SIGKILLed at a random step after a checkpoint, then resumed, ends with exactly
the parameters and optimizer state (and EMA, step, PRNG) of a run that was never interrupted."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax.numpy as jnp
import pytest

from marin.trainer.checkpoint import _read_array, list_checkpoints

SCRIPT = Path(__file__).with_name("resume_script.py")
ROOT = Path(__file__).resolve().parents[2]
STEPS = 24
FIRST_CHECKPOINT = 4  # resume_script.py: permanent checkpoints every 4 steps (+ temporaries every 0.2 s)


def _launch(output: Path, *extra: str, steps: int = STEPS) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, str(SCRIPT), str(output), str(steps), *extra],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _logged_step(output: Path) -> int:
    try:
        lines = (output / "metrics.jsonl").read_text().splitlines()
    except FileNotFoundError:
        return 0
    return max((json.loads(line)["step"] for line in lines if line.endswith("}")), default=0)


def _final_leaves(output: Path) -> dict[str, bytes]:
    step, url = list_checkpoints(str(output / "checkpoints"))[-1]
    assert step == STEPS
    manifest = json.loads(Path(url, "manifest.json").read_text())
    leaves = {}
    for name, meta in manifest["leaves"].items():
        array = _read_array(f"{url}/{name}", jnp.dtype(meta["dtype"]), tuple(meta["shape"]))
        leaves[name] = meta["dtype"].encode() + array.tobytes()
    return leaves


@pytest.mark.slow  # three training processes: ~20 s on an idle 2-core machine, > 60 s on a busy one
@pytest.mark.timeout(600)
def test_killed_and_resumed_run_is_bitwise_identical(tmp_path):
    _kill_and_resume(tmp_path)


@pytest.mark.slow  # three training processes
@pytest.mark.timeout(600)
@pytest.mark.parametrize("kind", ["muon", "schedule_free_adamw"])
def test_killed_and_resumed_run_of_another_optimizer_is_bitwise_identical(kind, tmp_path):
    """Muon's momentum (and AdamW's moments of the embedding, head and norms), or schedule-free's z, its
    weights and its average x, checkpointed and restored."""
    _kill_and_resume(tmp_path, kind)


@pytest.mark.slow  # four training processes
@pytest.mark.timeout(900)
def test_killed_and_resumed_sft_run_is_bitwise_identical(tmp_path):
    """The same for SFT: an SFT cache (assistant masks) and a run initialised from a pretraining run."""
    from marin.chat import CHAT_SPECIAL_TOKENS, SftTokenizeConfig, tokenize_chat
    from tests.chat.conftest import CONVERSATIONS, train_bpe

    tokenizer = train_bpe(("<|endoftext|>", "<|pad|>", *CHAT_SPECIAL_TOKENS))
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "chat.jsonl").write_text("".join(json.dumps({"messages": c}) + "\n" for c in CONVERSATIONS * 40))
    tokenize_chat(
        SftTokenizeConfig(
            train_paths=[str(tmp_path / "chat.jsonl")],
            tokenizer=str(tmp_path / "tokenizer.json"),
            output_path=str(tmp_path / "sft"),
        )
    )
    init = _launch(tmp_path / "init", "init", steps=8)
    init_log, _ = init.communicate()
    assert init.returncode == 0, init_log[-3000:]
    full_log = _kill_and_resume(tmp_path, "sft", str(tmp_path / "sft" / "train"), str(tmp_path / "init"))
    assert f"initialising parameters from {tmp_path / 'init'} (step 8)" in full_log


def _kill_and_resume(tmp_path: Path, *extra: str) -> str:
    """Run to the end; run again, SIGKILL it past a checkpoint, resume it: both end bitwise equal. Returns the
    uninterrupted run's log."""
    seed = int.from_bytes(os.urandom(4), "little")
    kill_at = random.Random(seed).randint(FIRST_CHECKPOINT + 1, STEPS - 2)
    note = f"(kill_at={kill_at}, seed={seed})"

    full = _launch(tmp_path / "full", *extra)
    full_log, _ = full.communicate()
    assert full.returncode == 0, full_log[-3000:]

    def killable() -> bool:  # past kill_at, with a complete checkpoint past the first (they are written async)
        done = list_checkpoints(str(tmp_path / "killed" / "checkpoints"))
        return _logged_step(tmp_path / "killed") >= kill_at and bool(done) and done[-1][0] >= FIRST_CHECKPOINT

    victim = _launch(tmp_path / "killed", *extra)
    while not killable():
        assert victim.poll() is None, f"run finished before the kill {note}:\n{victim.stdout.read()[-3000:]}"
        time.sleep(0.005)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    victim.stdout.close()
    killed_at = _logged_step(tmp_path / "killed")
    checkpoints = [s for s, _ in list_checkpoints(str(tmp_path / "killed" / "checkpoints"))]
    assert victim.returncode == -signal.SIGKILL and killed_at < STEPS and STEPS not in checkpoints, note
    assert checkpoints and max(checkpoints) >= FIRST_CHECKPOINT, note

    resumed = _launch(tmp_path / "killed", *extra)
    resumed_log, _ = resumed.communicate()
    assert resumed.returncode == 0, resumed_log[-3000:]
    # The newest complete checkpoint (a temporary one being written at the kill has no manifest yet).
    assert f"resuming from step {max(checkpoints)}\n" in resumed_log, note

    full_leaves, resumed_leaves = _final_leaves(tmp_path / "full"), _final_leaves(tmp_path / "killed")
    assert sorted(full_leaves) == sorted(resumed_leaves)
    assert any(n.startswith("opt_state/") for n in full_leaves) and any(n.startswith("ema/") for n in full_leaves)
    differing = [n for n in full_leaves if full_leaves[n] != resumed_leaves[n]]
    assert not differing, f"leaves differ after resume {note}: {differing[:10]}"

    # The metrics logs agree step by step too (losses are recomputed identically after the resume).
    def losses(path):
        return [
            (m["step"], m["train/loss"])
            for m in map(json.loads, (path / "metrics.jsonl").read_text().splitlines())
            if "train/loss" in m
        ]

    assert losses(tmp_path / "full") == losses(tmp_path / "killed")
    return full_log
