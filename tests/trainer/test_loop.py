"""The loop end to end: pulse, learning, eval metrics, NaN stop, resume, metrics log, train_lm outputs."""

import dataclasses
import json
import math

import jax
import numpy as np
import pytest

from marin.trainer import (
    CheckpointConfig,
    DataConfig,
    NonFiniteLoss,
    NumpySourceConfig,
    OptimizerConfig,
    SyntheticSourceConfig,
    TrackerConfig,
    TrainerConfig,
    TrainLmConfig,
    train,
    train_lm,
)
from marin.trainer.checkpoint import NoUsableCheckpoint, list_checkpoints
from marin.trainer.data import ArrayTokenSource, TrainBatches, write_numpy_source
from tests.trainer.conftest import tiny_model

VOCAB = 256


def _config(output_path, steps=2, **trainer_overrides) -> TrainLmConfig:
    trainer = dict(
        num_train_steps=steps,
        batch_size=8,
        log_every=5,
        checkpoint=CheckpointConfig(save_interval_minutes=None),
        tracker=TrackerConfig(wandb=False, progress_bar=False),
    )
    trainer.update(trainer_overrides)
    return TrainLmConfig(
        output_path=str(output_path),
        model=tiny_model(),
        data=DataConfig(train={"syn": SyntheticSourceConfig(vocab_size=VOCAB, num_tokens=100_000)}),
        optimizer=OptimizerConfig(learning_rate=1e-2, warmup=0.1, schedule="cosine", min_lr_ratio=0.1),
        trainer=TrainerConfig(**trainer),
    )


def _metrics(path):
    return [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]


def test_pulse_two_layers_two_steps(tmp_path):
    train_lm(_config(tmp_path))
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["step"] == 2 and math.isfinite(summary["train_loss"])
    assert [s for s, _ in list_checkpoints(str(tmp_path / "checkpoints"))] == [2]
    losses = [m for m in _metrics(tmp_path) if "train/loss" in m]
    assert [m["step"] for m in losses] == [1, 2]
    assert {"train/grad_norm", "train/learning_rate"} <= set(losses[0])
    assert any("throughput/tokens_per_s" in m and "throughput/mfu" in m for m in _metrics(tmp_path))


def test_loss_decreases_on_a_learnable_source_and_eval_reports_bpb(tmp_path):
    """Arithmetic-progression documents: after 60 steps the held-out loss is far below ln(vocab)."""
    val = SyntheticSourceConfig(vocab_size=VOCAB, num_tokens=10_000, seed=9).build()
    val_with_bytes = ArrayTokenSource(val.read(0, val.num_tokens), val.doc_starts(0, val.num_tokens), num_bytes=25_000)
    write_numpy_source(str(tmp_path / "val"), val_with_bytes)
    config = _config(tmp_path / "run", steps=60, eval_every=30, max_eval_sequences=64)
    config = dataclasses.replace(
        config,
        data=dataclasses.replace(config.data, validation={"held": NumpySourceConfig(path=str(tmp_path / "val"))}),
    )
    result = train(config)
    first = [m["train/loss"] for m in _metrics(tmp_path / "run") if "train/loss" in m][:3]
    assert min(first) > math.log(VOCAB) - 0.5
    loss = result.eval_metrics["eval/held/loss"]
    assert loss < 0.6 * math.log(VOCAB), loss
    assert result.eval_metrics["eval/held/ppl"] == pytest.approx(math.exp(loss))
    assert result.eval_metrics["eval/held/bpb"] == pytest.approx(loss / math.log(2) * 10_000 / 25_000)
    evals = [m for m in _metrics(tmp_path / "run") if "eval/held/loss" in m]
    assert [m["step"] for m in evals] == [30, 60] and evals[1]["eval/held/loss"] < evals[0]["eval/held/loss"]


def test_non_finite_loss_stops_naming_the_step_before_saving_it(tmp_path):
    config = _config(
        tmp_path, steps=8, log_every=100, checkpoint=CheckpointConfig(keep_every=1, save_interval_minutes=None)
    )
    config = dataclasses.replace(
        config, optimizer=OptimizerConfig(learning_rate=1e12, warmup=0, schedule="constant", max_grad_norm=None)
    )
    with pytest.raises(NonFiniteLoss, match=r"training loss is (nan|inf) at step 1 "):
        train(config)
    # The state after the first update was fine and saved; the one that produced the NaN was not.
    assert [s for s, _ in list_checkpoints(str(tmp_path / "checkpoints"))] == [1]


def test_crash_then_resume_is_bitwise_equal_and_trims_the_log(tmp_path, monkeypatch):
    """In-process version of test_resume.py (which SIGKILLs a subprocess): a run that crashes while
    building batch 5 resumes from its step-4 checkpoint and ends bitwise equal to an uninterrupted run."""
    config = _config(
        tmp_path / "run", steps=6, log_every=1, checkpoint=CheckpointConfig(keep_every=2, save_interval_minutes=None)
    )
    straight = train(dataclasses.replace(config, output_path=str(tmp_path / "straight"))).state

    real_batch = TrainBatches.batch

    def crashing_batch(self, step, rows=None):
        if step == 5:
            raise RuntimeError("simulated crash while reading batch 5")
        return real_batch(self, step, rows)

    monkeypatch.setattr(TrainBatches, "batch", crashing_batch)
    with pytest.raises(RuntimeError, match="simulated crash"):
        train(config)
    monkeypatch.setattr(TrainBatches, "batch", real_batch)
    with open(tmp_path / "run" / "metrics.jsonl", "a") as f:  # as if the dead run had logged past its checkpoint
        f.write(json.dumps({"step": 5, "train/loss": 123.0}) + "\n")

    result = train(config)
    assert result.step == 6
    for a, b in zip(jax.tree.leaves(straight), jax.tree.leaves(result.state)):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
    steps = [m["step"] for m in _metrics(tmp_path / "run") if "train/loss" in m]
    assert steps == [1, 2, 3, 4, 5, 6] and all(m.get("train/loss") != 123.0 for m in _metrics(tmp_path / "run"))
    assert [s for s, _ in list_checkpoints(str(tmp_path / "run" / "checkpoints"))] == [2, 4, 6]
    # A finished run is not retrained: resuming at the last step does nothing but report.
    assert train(config).step == 6


def _damage_every_checkpoint(checkpoints):
    for manifest in checkpoints.glob("step-*/manifest.json"):
        manifest.write_text(manifest.read_text()[:40])  # cut mid-JSON


def test_a_run_whose_checkpoints_are_all_damaged_stops_instead_of_restarting(tmp_path, caplog):
    """Rerunning a finished run normally resumes at its end; with every checkpoint damaged it must not
    quietly train again from step 0 and report success (so the executor would record SUCCESS)."""
    train_lm(_config(tmp_path, steps=2))
    _damage_every_checkpoint(tmp_path / "checkpoints")
    with pytest.raises(NoUsableCheckpoint, match="every checkpoint is damaged"):
        train_lm(_config(tmp_path, steps=2))
    restart = CheckpointConfig(save_interval_minutes=None, restart_if_unusable=True)
    with caplog.at_level("WARNING"):
        result = train(_config(tmp_path, steps=2, checkpoint=restart))
    assert result.step == 2 and "starting over from step 0 (CheckpointConfig.restart_if_unusable)" in caplog.text


def test_trainer_config_validation():
    with pytest.raises(ValueError, match=r"batch_size \(6\) must be a multiple of num_microbatches \(4\)"):
        TrainerConfig(num_train_steps=1, batch_size=6, num_microbatches=4)
    with pytest.raises(ValueError, match="num_train_steps must be > 0, got 0"):
        TrainerConfig(num_train_steps=0, batch_size=8)
