"""train_sft's own rules: steps from epochs, masks required, the tokenizer fits the model; and a short run."""

import dataclasses
import json

import pytest

from marin.trainer import (
    CheckpointConfig,
    DataConfig,
    OptimizerConfig,
    SyntheticSourceConfig,
    TrackerConfig,
    TrainerConfig,
)
from marin.trainer.data import TokenCacheSourceConfig
from marin.trainer.loop import TrainLmConfig
from marin.trainer.model import LlamaConfig
from marin.trainer.sft import TrainSftConfig, resolve_sft, train_sft
from marin.trainer.train_lm import train_lm

MODEL = LlamaConfig(vocab_size=512, hidden_dim=32, mlp_dim=64, num_layers=2, num_heads=4, num_kv_heads=2, seq_len=32)
TRAINER = TrainerConfig(
    num_train_steps=1,
    batch_size=4,
    log_every=1,
    checkpoint=CheckpointConfig(save_interval_minutes=None),
    tracker=TrackerConfig(wandb=False, progress_bar=False),
)


def sft_config(tmp_path, sft_dir, **overrides) -> TrainSftConfig:
    data = DataConfig(
        train={"chat": TokenCacheSourceConfig(path=str(sft_dir / "train"))},
        validation={"chat": TokenCacheSourceConfig(path=str(sft_dir / "validation"))},
    )
    fields = {
        "output_path": str(tmp_path / "run"),
        "model": MODEL,
        "trainer": TRAINER,
        "data": data,
        "initialize_from": str(tmp_path / "base"),
    }
    return TrainSftConfig(**{**fields, **overrides})


def test_num_epochs_sets_the_number_of_steps(tmp_path, sft_dir):
    ledger = json.loads((sft_dir / "train" / "cache.json").read_text())
    sequences = (ledger["num_tokens"] - 1) // MODEL.seq_len
    resolved = resolve_sft(sft_config(tmp_path, sft_dir, num_epochs=2.5))
    assert type(resolved) is TrainLmConfig
    assert resolved.trainer.num_train_steps == -(-int(2.5 * sequences) // TRAINER.batch_size)
    assert resolve_sft(sft_config(tmp_path, sft_dir)).trainer.num_train_steps == 1


def test_empty_validation_sets_are_left_out(tmp_path, sft_dir, reserved_chat):
    from marin.chat.cache import build_sft_cache

    (tmp_path / "empty.jsonl").write_text("")
    build_sft_cache([str(tmp_path / "empty.jsonl")], str(tmp_path / "empty"), str(sft_dir / "tokenizer"))
    config = sft_config(tmp_path, sft_dir)
    data = dataclasses.replace(
        config.data, validation={**config.data.validation, "none": TokenCacheSourceConfig(path=str(tmp_path / "empty"))}
    )
    assert list(resolve_sft(dataclasses.replace(config, data=data)).data.validation) == ["chat"]


def test_refuses_unmasked_sources_small_vocabularies_and_no_initialization(tmp_path, sft_dir):
    unmasked = DataConfig(train={"syn": SyntheticSourceConfig(vocab_size=512, num_tokens=10_000)})
    with pytest.raises(ValueError, match="'syn' stores no loss mask"):
        resolve_sft(sft_config(tmp_path, sft_dir, data=unmasked))
    assert resolve_sft(sft_config(tmp_path, sft_dir, data=unmasked, require_masks=False)).data.train == unmasked.train
    with pytest.raises(ValueError, match=r"its tokenizer has \d+ tokens but the model only 256 embeddings"):
        resolve_sft(sft_config(tmp_path, sft_dir, model=dataclasses.replace(MODEL, vocab_size=256)))
    with pytest.raises(ValueError, match="initialize_from must name"):
        sft_config(tmp_path, sft_dir, initialize_from=None)


@pytest.mark.slow  # two training runs: ~30 s of CPU, more on a busy machine
def test_sft_run_starts_from_the_base_and_lowers_the_assistant_loss(tmp_path, sft_dir):
    base = TrainLmConfig(
        output_path=str(tmp_path / "base"),
        model=MODEL,
        trainer=TRAINER,
        data=DataConfig(train={"syn": SyntheticSourceConfig(vocab_size=512, num_tokens=10_000)}),
    )
    train_lm(base)
    trainer = dataclasses.replace(TRAINER, num_train_steps=20, eval_every=20)
    optimizer = OptimizerConfig(learning_rate=1e-2, schedule="constant", warmup=0)
    train_sft(sft_config(tmp_path, sft_dir, trainer=trainer, optimizer=optimizer))
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    losses = [m["train/loss"] for m in metrics if "train/loss" in m]
    assert len(losses) == 20 and losses[-1] < 0.6 * losses[0]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["step"] == 20 and summary["eval/chat/loss"] < 0.6 * losses[0]
    assert "eval/chat/bpb" not in summary  # an SFT cache stores no text bytes: no bits-per-byte
