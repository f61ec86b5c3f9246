"""The Tootsie 8B DAG: structure, stable versions, phase chaining, and a dry run that works on a laptop."""

import os
import subprocess
import sys
from pathlib import Path

from marin.execution import Executor

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from experiments import tootsie_8b  # noqa: E402


def plan():
    return Executor(prefix="gs://bucket/lab").plan([*tootsie_8b.evals, *tootsie_8b.exports])


def test_dag_structure_and_phase_chaining():
    p = plan()
    by_name = {s.name: s for s in p.steps}
    phase1, phase2, cooldown = (by_name[f"checkpoints/tootsie-8b-{n}"] for n in ("phase1", "phase2", "cooldown"))
    assert {d.name for d in phase1.deps} >= {"tokenized/dclm_baseline", "tokenized/starcoderdata", "tokenized/proofpile_2"}
    assert phase2.inputs["initialize_from"] == phase1.output_path
    assert cooldown.inputs["initialize_from"] == phase2.output_path
    assert phase1 in phase2.deps and phase2 in cooldown.deps
    assert {d.name for d in cooldown.deps} >= {"tokenized/finemath_3plus", "tokenized/dolmino_flan"}
    for name in ("phase1", "phase2", "cooldown"):
        assert by_name[f"evaluation/tootsie-8b-{name}"].deps[0].name == f"checkpoints/tootsie-8b-{name}"
        assert by_name[f"exports/tootsie-8b-{name}"].deps[0].name == f"checkpoints/tootsie-8b-{name}"
    trainer1 = phase1.version["config"]["trainer"]
    assert trainer1["batch_size"] == 1024 and phase2.version["config"]["trainer"]["batch_size"] == 3072
    assert phase1.version["config"]["optimizer"]["learning_rate"] == 1e-3
    assert phase2.version["config"]["optimizer"]["ema_decay"] is not None
    downloads = [s for s in p.steps if s.name.startswith("raw/")]
    assert downloads and all(s.version["config"]["revision"] for s in downloads)
    assert (phase1.step.resource_config.hosts, phase1.step.resource_config.tpu.slices) == (128, 2)


def test_versions_are_stable_across_processes():
    here = {s.identity for s in plan().steps}
    code = ("import sys; sys.path.insert(0, '.'); from experiments import tootsie_8b; from marin.execution import Executor;"
            "print('\\n'.join(sorted(s.identity for s in Executor(prefix='gs://x').plan([*tootsie_8b.evals, "
            "*tootsie_8b.exports]).steps)))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert set(out.split()) == here


def test_dry_run_on_a_laptop_prints_plan_params_and_tokens(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("MARIN_PREFIX", "RAY_ADDRESS")}
    out = subprocess.run([sys.executable, "experiments/tootsie_8b.py", "--dry_run", "true", "--prefix",
                          str(tmp_path / "lab")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "8.03B parameters" in out.stdout
    assert "phase1" in out.stdout and "T tokens" in out.stdout and "2 x v5litepod 16x16 (128 hosts)" in out.stdout
    assert out.stdout.count("\nrun ") >= 20 and "checkpoints/tootsie-8b-cooldown-" in out.stdout
    assert not (tmp_path / "lab").exists()


def test_running_without_tpus_fails_fast_saying_what_is_missing(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("MARIN_PREFIX", "RAY_ADDRESS")}
    out = subprocess.run([sys.executable, "experiments/tootsie_8b.py", "--prefix", str(tmp_path / "lab"),
                          "--run_only", "checkpoints/tootsie-8b-phase1"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=180)
    assert out.returncode == 1
    assert "'checkpoints/tootsie-8b-phase1" in out.stderr and "TPU: needs 4, largest node has 0" in out.stderr
    assert "RAY_ADDRESS" in out.stderr and "MARIN_AUTOSCALING" in out.stderr
