"""``train_sft``: supervised fine-tuning, i.e. ``train_lm`` on masked chat caches from a pretrained checkpoint.

    step = ExecutorStep(name="checkpoints/nano-instruct", fn=train_sft, config=TrainSftConfig(
        output_path=this_output_path(), model=..., initialize_from=pretraining_step,
        data=DataConfig(train={"chat": TokenCacheSourceConfig(path=sft / "train")}, ...),
        trainer=TrainerConfig(num_train_steps=1, batch_size=16), num_epochs=3.0))

Nothing here is a second trainer: the sources of an SFT cache carry a loss mask (1 on assistant tokens),
the loader multiplies it into the batch's ``loss_mask``, and the one jitted step sums the loss over masked
targets and divides by their count. Checkpoints, bitwise resume, mixtures, schedules and tracking are
those of pretraining. What this module adds: ``num_epochs`` (the number of steps is known only once the
caches exist: ``ceil(num_epochs * sequences of all training sources / batch_size)``), a required
``initialize_from`` and checks that the caches fit the model's vocabulary and carry masks.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math

from marin.storage import join, write_atomic
from marin.trainer import distributed
from marin.trainer.data.loader import num_sequences
from marin.trainer.loop import TrainLmConfig
from marin.trainer.train_lm import train_lm

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainSftConfig(TrainLmConfig):
    num_epochs: float | None = None
    """If set, replaces ``trainer.num_train_steps`` by ``ceil(num_epochs * sequences / batch_size)``, counting
    the sequences of all training sources together (the mixture weights decide how they share the steps)."""
    require_masks: bool = True
    """Refuse a training source without a stored loss mask (it would train on prompts as well)."""

    def __post_init__(self):
        super().__post_init__()
        if not self.initialize_from:
            raise ValueError("TrainSftConfig.initialize_from must name a pretraining run's output directory")
        # An experiment may wrap num_epochs in a placeholder (versioned); it is checked once concrete.
        if isinstance(self.num_epochs, (int, float)) and not self.num_epochs > 0:
            raise ValueError(f"TrainSftConfig.num_epochs must be > 0, got {self.num_epochs}")


def resolve_sft(config: TrainSftConfig) -> TrainLmConfig:
    """The ``TrainLmConfig`` this SFT run is: sources checked, the step count derived from epochs."""
    sources = {name: src.build() for name, src in config.data.train.items()}
    for name, source in sources.items():
        ledger = getattr(getattr(source, "cache", None), "ledger", {})
        if ledger.get("vocab_size", 0) > config.model.vocab_size:
            raise ValueError(
                f"training source {name!r}: its tokenizer has {ledger['vocab_size']} tokens but the model "
                f"only {config.model.vocab_size} embeddings (chat tokens added to a tokenizer need a "
                f"model whose vocab_size covers them)"
            )
        read_mask = getattr(source, "read_mask", None)
        if config.require_masks and (read_mask is None or read_mask(0, min(1, source.num_tokens)) is None):
            raise ValueError(
                f"training source {name!r} stores no loss mask (not an SFT cache from marin.chat); "
                "set require_masks=False to train on all of its tokens"
            )
    trainer = config.trainer
    if config.num_epochs is not None:
        total = sum(num_sequences(s, config.model.seq_len) for s in sources.values())
        steps = max(1, math.ceil(config.num_epochs * total / trainer.batch_size))
        logger.info(
            "%g epochs of %d sequences at batch %d: %d steps", config.num_epochs, total, trainer.batch_size, steps
        )
        trainer = dataclasses.replace(trainer, num_train_steps=steps)
    # A held-out split may be empty (no validation_fraction): nothing to evaluate there, so it is left out.
    validation = {}
    for name, src in config.data.validation.items():
        if num_sequences(src.build(), config.model.seq_len) > 0:
            validation[name] = src
        else:
            logger.info("validation set %r holds no full sequence: not evaluated", name)
    data = dataclasses.replace(config.data, validation=validation)
    fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(TrainLmConfig)}
    return TrainLmConfig(**{**fields, "trainer": trainer, "data": data})


SFT_INFO = "sft.json"
"""Beside the checkpoints: the chat tokenizer the SFT caches were rendered with (for the chat CLI and evals)."""


def train_sft(config: TrainSftConfig) -> None:
    distributed.initialize()  # before is_primary (a no-op on one host)
    resolved = resolve_sft(config)
    tokenizers = {}  # path -> (fingerprint, template): SFT sets tokenized apart render alike if these agree
    for src in config.data.train.values():
        ledger = getattr(getattr(src.build(), "cache", None), "ledger", {})
        if ledger.get("tokenizer"):
            tokenizers[ledger["tokenizer"]] = (ledger["tokenizer_fingerprint"], ledger.get("chat_template_sha256"))
    if distributed.is_primary():
        same = len(set(tokenizers.values())) == 1
        info = {
            "chat_tokenizer": min(tokenizers) if same else None,
            "tokenizers": sorted(tokenizers),
            "num_train_steps": resolved.trainer.num_train_steps,
            "initialize_from": config.initialize_from,
        }
        write_atomic(join(config.output_path, SFT_INFO), json.dumps(info, indent=2))
    train_lm(resolved)
