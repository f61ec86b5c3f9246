"""The quickstart end to end (fewer training steps than `make quickstart`), its learning criteria, and a
rerun that executes nothing."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from experiments import quickstart
from marin.execution import Executor

ROOT = Path(__file__).resolve().parents[2]
SFT_FLOOR = 0.7
"""Held-out exact match every seed and kernel variation of the SFT phase (and of the RL phase after it) reached,
with a margin (docs/quickstart.md)."""


@pytest.mark.slow
def test_quickstart_learns_exports_and_reruns_as_a_no_op(quickstart_run, tmp_path):
    result, paths, steps = quickstart_run["result"], quickstart_run["paths"], quickstart_run["steps"]
    assert len(result.ran) == len(result.plan.steps) == len(steps)
    web = json.loads((Path(paths["filtered"]) / "summary.json").read_text())
    # The web chain kept the English high-quality pages and dropped the rest, for a reason each.
    assert 0.6 < web["kept_fraction"] < 0.7 and set(web["dropped"]) == {"lang.en<0.5", "quality.hq<0.1"}, web

    results = json.loads((Path(paths["evaluation"]) / "results.json").read_text())
    for name, r in results["validation"].items():
        assert r["bits_per_byte"] < 0.5 * r["unigram_bits_per_byte"], (name, r)
    above_chance = [name for name, r in results["tasks"].items() if r["acc"]["ci95"][0] > r["chance"]]
    assert len(above_chance) >= 2, results["tasks"]

    lines = (Path(paths["checkpoints"]) / "metrics.jsonl").read_text().splitlines()
    losses = [m["train/loss"] for m in map(json.loads, lines) if "train/loss" in m]
    assert losses[-1] < 0.5 * losses[0]
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(os.listdir(paths["export"]))

    again = Executor(prefix=quickstart_run["prefix"]).run(quickstart.TARGETS)
    assert again.ran == [] and len(again.skipped) == len(steps)


@pytest.mark.slow
def test_instruct_phase_beats_the_base_model_on_held_out_instructions(quickstart_run):
    paths = quickstart_run["paths"]
    base = json.loads((Path(paths["instruct_eval_base"]) / "results.json").read_text())["instruct"]["instructions"]
    sft = json.loads((Path(paths["instruct_eval_sft"]) / "results.json").read_text())["instruct"]["instructions"]
    assert base["items"] == sft["items"] == 200
    # exact match: the base model never answers in the format; the instruct model does, on questions phrased anew.
    # SFT_FLOOR is below what every seed reached (0.77-0.85 over seeds 0-2, AMD EPYC host, 2026-11-27; the
    # 100-step recipe before it gave 0.29-0.60 depending on host and seed: docs/quickstart.md)
    assert sft["exact_match"]["value"] >= SFT_FLOOR > base["exact_match"]["value"] + 0.5, (base, sft)
    assert sft["loglik_acc"]["value"] >= base["loglik_acc"]["value"] + 0.15, (base, sft)
    assert sft["assistant_loss"] < 0.3 * base["assistant_loss"], (base, sft)
    summary = json.loads((Path(paths["sft_data"]) / "summary.json").read_text())
    assert summary["train"]["num_documents"] == 4000 and summary["validation"]["num_documents"] == 200
    assert 0 < summary["train"]["num_masked_tokens"] < summary["train"]["num_tokens"]
    export = Path(paths["export_instruct"])
    assert "chat_template" in json.loads((export / "tokenizer_config.json").read_text())


@pytest.mark.slow
def test_preference_phase_raises_the_held_out_margin_and_keeps_the_accuracy(quickstart_run):
    """Mechanics, on verifiable pairs: DPO from the SFT model against itself moves held-out preferences the way
    the labels point. What moves on every host and seed is the margin (docs/dpo.md); the accuracy starts at
    0.96-0.99 on near misses, so the test bounds its change item by item: no significant loss at 95%."""
    paths = quickstart_run["paths"]
    before, after = (
        json.loads((Path(paths[key]) / "results.json").read_text())["preference"]["instruction_pairs"]
        for key in ("preference_eval_sft", "preference_eval_dpo")
    )
    assert before["pairs"] == after["pairs"] == 200
    assert before["reward_accuracy"]["value"] == 0.0  # the SFT model is its own reference: every reward is 0
    assert after["reward_accuracy"]["value"] > 0.75 and after["reward_margin"] > 0.1, after
    assert after["mean_margin"] > before["mean_margin"] + 1.0 and after["accuracy"]["value"] >= 0.9, (before, after)
    change = quickstart.post_training_gains(paths)["preference"]["dpo_vs_sft"]
    assert change["ci95"][1] >= 0, change  # DPO does not lower the held-out accuracy beyond chance
    metrics = [json.loads(line) for line in (Path(paths["dpo"]) / "metrics.jsonl").read_text().splitlines()]
    final = [m for m in metrics if "eval/validation/rewards/accuracies" in m][-1]
    assert final["step"] == 40 and final["eval/validation/pairs"] == 200
    summary = json.loads((Path(paths["preferences"]) / "summary.json").read_text())
    assert summary["pairs"] == {"train": 640, "validation": 200} and summary["skipped"] == 0
    reference = json.loads((Path(paths["reference"]) / "reference.json").read_text())
    assert reference["checkpoint"] == paths["sft"] and reference["sets"]["train"]["pairs"] == 640


@pytest.mark.slow
def test_chat_command_line_answers_with_the_instruct_model(quickstart_run):
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "marin.inference.chat",
            "--checkpoint",
            quickstart_run["paths"]["sft"],
            "--message",
            "What does the owl say?",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert len(out.stdout.strip().splitlines()) == 1 and "<|" not in out.stdout


@pytest.mark.slow
def test_generate_and_export_command_lines_on_the_trained_model(quickstart_run, tmp_path):
    paths = quickstart_run["paths"]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "marin.inference.sample",
            "--checkpoint",
            paths["export"],
            "--prompt",
            "Once upon a time",
            "--max_new_tokens",
            "20",
            "--temperature",
            "0",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("Once upon a time") and len(out.stdout.split()) > 6
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "marin.export",
            "--checkpoint_path",
            paths["checkpoints"],
            "--output_path",
            str(tmp_path / "hf"),
            "--tokenizer",
            paths["tokenizer"],
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    a = (tmp_path / "hf" / "model.safetensors").read_bytes()
    b = (Path(paths["export"]) / "model.safetensors").read_bytes()
    assert a == b  # the CLI and the export step write the same weights


def run_quickstart(*args: str, env: dict) -> subprocess.CompletedProcess:
    """``python experiments/quickstart.py *args`` from the repository root, output captured. No wall-clock bound of
    its own: the test's timeout bounds a hung run (tests/waiting.py), and kills the child with the test."""
    return subprocess.run(
        [sys.executable, "experiments/quickstart.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )


def test_default_quickstart_is_the_full_run_and_dry_runs(tmp_path):
    assert quickstart.STEPS["checkpoints"].config.trainer.value.num_train_steps == 200
    env = {k: v for k, v in os.environ.items() if k not in ("MARIN_PREFIX", "RAY_ADDRESS")}
    out = run_quickstart("--dry_run", "true", "--prefix", str(tmp_path / "s"), env=env)
    assert out.returncode == 0, out.stderr
    actions = [line.split()[0] for line in out.stdout.splitlines() if line[:5] in ("run  ", "skip ", "wait ")]
    assert actions == ["run"] * len(quickstart.STEPS) and not (tmp_path / "s").exists()


def test_run_only_a_data_step_runs_it_and_summarizes_nothing_it_did_not_run(tmp_path, ray_address):
    """``--run_only`` plans no evaluation: the script must finish (it used to raise in ``summarize``)."""
    env = {**{k: v for k, v in os.environ.items() if k != "MARIN_PREFIX"}, "RAY_ADDRESS": ray_address}
    store = tmp_path / "s"
    out = run_quickstart("--prefix", str(store), "--run_only", "corpus/instructions", env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "quickstart results" not in out.stdout and "held-out instructions" not in out.stdout
    ran = sorted(p.name for p in (store / "corpus").iterdir())
    assert len(ran) == 1 and ran[0].startswith("instructions-"), ran  # that step only, no other corpus
