"""Dense vs MoE (issue 45): equal active parameters and equal FLOPs as declared, and a tiny one end to end on the
bundled books."""

import json
from pathlib import Path

import pytest

from experiments import exp_dense_vs_moe
from marin.execution import Executor


def test_the_two_models_have_equal_active_parameters_and_get_equal_flops():
    models = exp_dense_vs_moe.models()
    dense, moe = models["dense"], models["moe"]
    router = dense.num_layers * dense.hidden_dim * moe.num_experts
    assert moe.active_param_count == dense.active_param_count + router
    assert moe.param_count > 1.8 * dense.param_count  # the experts a token does not pay for
    study = exp_dense_vs_moe.STUDY
    flops = {}
    for step in study["runs"]:
        trainer, model = step.config.trainer.value, step.config.model.value
        flops[step.name] = model.flops_per_token() * trainer.num_train_steps * trainer.batch_size * model.seq_len
        assert (model.num_experts > 0) == ("-moe-" in step.name)
    assert max(flops.values()) / min(flops.values()) < 1.001
    assert len(study["runs"]) == 2 * len(exp_dense_vs_moe.LEARNING_RATES)


@pytest.mark.slow
def test_tiny_comparison_runs_both_models_and_reports_their_best(books_store, ray_address):
    study = exp_dense_vs_moe.build(learning_rates=(1e-2,), tokens_per_param=0.05, bundled=True)
    result = Executor(prefix=str(books_store)).run([study["comparison"]])
    path = next(p.output_path for p in result.plan.steps if p.name == study["comparison"].name)
    record = json.loads((Path(path) / "comparison.json").read_text())
    assert set(record["best"]) == {"dense", "moe"} and len(record["runs"]) == 2
    assert all(0 < r["bpb"] < 8 for r in record["runs"])
    assert record["moe_minus_dense_bpb"] == pytest.approx(record["best"]["moe"]["bpb"] - record["best"]["dense"]["bpb"])
    assert "MoE best minus dense best" in (Path(path) / "comparison.md").read_text()
