"""The optimizer study (issue 44): its runs as steps, and a tiny version end to end on the bundled books."""

import json
from pathlib import Path

import pytest

from experiments import exp_optimizers
from marin.execution import Executor


def test_the_study_declares_every_sweep_point_and_the_seed_reruns_of_the_best():
    study = exp_optimizers.STUDY
    sweeps = sum(len(rates) for rates in exp_optimizers.SWEEPS.values())
    swept = sweeps * len(exp_optimizers.WIDTHS) * len(exp_optimizers.RATIOS)
    assert len(study["runs"]) == len(study["evals"]) == swept + len(exp_optimizers.BEST_LR)
    kinds, widths = set(exp_optimizers.SWEEPS), set(exp_optimizers.WIDTHS)
    assert len(exp_optimizers.BEST_LR) == len(kinds) * len(widths) * len(exp_optimizers.RATIOS)  # every best
    for (kind, width, ratio), lr in exp_optimizers.BEST_LR.items():  # a swept rate, rerun with seed 1
        assert lr in exp_optimizers.SWEEPS[kind] and width in widths and ratio in exp_optimizers.RATIOS
        assert any(s.name.startswith(f"checkpoints/opt-{kind}-h{width}-{ratio}x-lr{lr:g}-s1") for s in study["runs"])
    assert len({s.name for s in study["runs"]}) == len(study["runs"])
    muon = next(s for s in study["runs"] if "opt-muon-h24-4x" in s.name)
    optimizer = muon.config.optimizer.value
    assert (optimizer.kind, optimizer.muon_lr_scaling, optimizer.weight_decay) == ("muon", "moonlight", 0.1)
    trainer = muon.config.trainer.value
    model = muon.config.model.value
    tokens = trainer.num_train_steps * trainer.batch_size * model.seq_len
    assert tokens == pytest.approx(4 * 20 * model.flops_per_token() / 6, rel=0.01)  # 4x Chinchilla
    seeded = exp_optimizers.build(best_lr={("lion", 16, 1): 1e-3})
    assert len(seeded["runs"]) == swept + 1
    assert any(s.name.startswith("checkpoints/opt-lion-h16-1x-lr0.001-s1") for s in seeded["runs"])
    plan = Executor(prefix="/lab").plan([study["analysis"]])
    assert {s.name for s in plan.steps} >= {s.name for s in study["evals"]}


@pytest.mark.slow
def test_tiny_study_picks_learning_rates_and_measures_speedups(books_store, ray_address):
    """Two data sizes of one width, AdamW at two learning rates, Muon at one (its best rerun with a second
    seed): every speedup is computed from AdamW's own runs at that width."""
    study = exp_optimizers.build(
        widths=(16,),
        ratios=(0.02, 0.08),
        sweeps={"adamw": (1e-2, 2e-2), "muon": (1e-2,)},
        best_lr={("muon", 16, 0.08): 1e-2},
        bundled=True,
        heldout_books=1,
    )
    result = Executor(prefix=str(books_store)).run([study["analysis"]])
    path = next(p.output_path for p in result.plan.steps if p.name == study["analysis"].name)
    record = json.loads((Path(path) / "study.json").read_text())
    settings = {(s["kind"], s["ratio"]): s for s in record["settings"]}
    assert set(settings) == {(k, r) for k in ("adamw", "muon") for r in (0.02, 0.08)}
    assert settings[("adamw", 0.02)]["speedup"] == pytest.approx(1.0)
    assert settings[("adamw", 0.08)]["speedup"] == pytest.approx(1.0)
    assert settings[("adamw", 0.08)]["loss"] < settings[("adamw", 0.02)]["loss"]  # more data, lower loss
    assert len(settings[("muon", 0.08)]["losses"]) == 2 and settings[("muon", 0.08)]["speedup"] > 0
    assert all(0 < s["loss"] < 8 for s in record["settings"])  # bits per byte of a model that learned something
    assert "| speedup over AdamW |" in (Path(path) / "study.md").read_text()
    assert (Path(path) / "speedup.png").exists() and record["plots"] == ["speedup.png"]


def test_the_precision_comparison_reuses_the_study_s_fp32_runs_and_adds_bf16_ones():
    """exp44_muon_ns_dtype: its fp32 runs are the study's own (muon_ns_dtype at its default is not hashed),
    its bf16 runs are new steps that differ only in that field."""
    from experiments import exp44_muon_ns_dtype as ab

    evals = ab.build()
    plan = Executor(prefix="/lab").plan(evals)
    runs = [s for s in plan.steps if s.name.startswith("checkpoints/")]
    assert len({s.output_path for s in runs}) == len(evals) == 4
    study = {
        Executor(prefix="/lab").plan([s]).steps[-1].output_path
        for s in exp_optimizers.STUDY["runs"]
        if s.name.startswith(f"checkpoints/opt-muon-h{ab.WIDTH}-{ab.RATIO}x-lr{ab.LEARNING_RATE:g}")
    }
    by_dtype = {}
    for step in runs:
        by_dtype.setdefault(step.step.config.optimizer.value.muon_ns_dtype, set()).add(step.output_path)
    assert by_dtype["float32"] == study  # seed 0 and the seed-1 rerun of the best setting: the study's runs
    assert len(by_dtype["bfloat16"]) == 2 and not by_dtype["bfloat16"] & study
