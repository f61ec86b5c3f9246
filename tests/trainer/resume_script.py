"""A tiny training run for the bitwise-resume test: ``python resume_script.py OUTPUT_PATH NUM_STEPS``.

``python resume_script.py OUTPUT_PATH NUM_STEPS muon`` trains with Muon;
``python resume_script.py OUTPUT_PATH NUM_STEPS sft CACHE INIT`` is the SFT variant: ``train_sft`` on an SFT
token cache (assistant masks) starting from the run in ``INIT``; ``... init`` writes such a run (vocab 512).

Checkpoints every 4 steps (permanent) and every ~0.2 s (temporary), logs every step. Reading data
sleeps a little per sequence so the parent can SIGKILL the run at a step of its choosing.
"""

import dataclasses
import logging
import os
import sys
import time

os.environ["JAX_PLATFORMS"] = "cpu"

from marin.trainer import (  # noqa: E402
    CheckpointConfig,
    DataConfig,
    OptimizerConfig,
    PrecisionPolicy,
    SyntheticSourceConfig,
    TrackerConfig,
    TrainerConfig,
    TrainLmConfig,
    train_lm,
)
from marin.trainer.data import (
    TokenCacheSourceConfig,  # noqa: E402
    TokenSourceConfig,  # noqa: E402
)
from marin.trainer.model import LlamaConfig  # noqa: E402
from marin.trainer.sft import TrainSftConfig, train_sft  # noqa: E402


@TokenSourceConfig.register_subclass("slow_synthetic")
@dataclasses.dataclass(frozen=True, kw_only=True)
class SlowSyntheticConfig(SyntheticSourceConfig):
    delay_s: float = 0.01

    def build(self):
        source = super().build()
        delay, read = self.delay_s, source.read

        def slow_read(start, length):
            time.sleep(delay)
            return read(start, length)

        source.read = slow_read
        return source


@TokenSourceConfig.register_subclass("slow_cache")
@dataclasses.dataclass(frozen=True, kw_only=True)
class SlowCacheConfig(TokenCacheSourceConfig):
    delay_s: float = 0.01

    def build(self):
        source = super().build()
        delay, read = self.delay_s, source.read

        def slow_read(start, length):
            time.sleep(delay)
            return read(start, length)

        source.read = slow_read
        return source


def config(
    output_path: str, num_steps: int, vocab_size: int = 256, train=None, optimizer: str = "adamw"
) -> TrainLmConfig:
    model = LlamaConfig(
        vocab_size=vocab_size, hidden_dim=64, mlp_dim=128, num_layers=2, num_heads=4, num_kv_heads=2, seq_len=32
    )
    train = train or {
        "a": SlowSyntheticConfig(vocab_size=vocab_size, num_tokens=30_000, seed=1),
        "b": SlowSyntheticConfig(vocab_size=vocab_size, num_tokens=20_000, seed=2),
    }
    return TrainLmConfig(
        output_path=output_path,
        model=model,
        data=DataConfig(train=train, mixture_block_size=16),
        optimizer=OptimizerConfig(
            kind=optimizer,
            learning_rate=0.02 if optimizer == "muon" else 3e-3,
            muon_adam_learning_rate=3e-3 if optimizer == "muon" else None,
            schedule="constant" if optimizer == "schedule_free_adamw" else "wsd",
            warmup=3,
            decay=None if optimizer == "schedule_free_adamw" else 0.25,
            ema_decay=None if optimizer == "schedule_free_adamw" else 0.9,  # schedule-free keeps its own average
        ),
        trainer=TrainerConfig(
            num_train_steps=num_steps,
            batch_size=8,
            num_microbatches=2,
            z_loss=1e-4,
            log_every=1,
            precision=PrecisionPolicy(compute_dtype="bfloat16"),
            checkpoint=CheckpointConfig(keep_every=4, save_interval_minutes=0.2 / 60),
            tracker=TrackerConfig(wandb=False, progress_bar=False),
        ),
    )


def sft_config(output_path: str, num_steps: int, cache: str, init: str) -> TrainSftConfig:
    base = config(output_path, num_steps, vocab_size=512, train={"chat": SlowCacheConfig(path=cache)})
    fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(TrainLmConfig)}
    return TrainSftConfig(**{**fields, "initialize_from": init})


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    output, steps, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else "pretrain"
    if mode == "sft":
        train_sft(sft_config(output, steps, cache=sys.argv[4], init=sys.argv[5]))
    elif mode in ("muon", "schedule_free_adamw"):
        train_lm(config(output, steps, optimizer=mode))
    else:
        train_lm(config(output, steps, vocab_size=512 if mode == "init" else 256))
