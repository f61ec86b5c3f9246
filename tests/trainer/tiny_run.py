"""The tiny training run the subprocess scripts share (sharding across meshes, multi-host): no side
effects on import, so each script sets ``XLA_FLAGS``/``JAX_PLATFORMS`` for itself first."""

from pathlib import Path

from marin.trainer import (
    CheckpointConfig,
    DataConfig,
    OptimizerConfig,
    PrecisionPolicy,
    SyntheticSourceConfig,
    TrackerConfig,
    TrainerConfig,
    TrainLmConfig,
)
from marin.trainer.mesh import MeshConfig, ShardingSpec
from marin.trainer.model import LlamaConfig

STEPS = 5


def tiny_config(
    output_path: Path,
    mesh: MeshConfig,
    sharding: ShardingSpec,
    evaluate: bool = False,
    optimizer: str = "adamw",
    moe: bool = False,
) -> TrainLmConfig:
    """``optimizer``: adamw (the settings below) or another ``OptimizerConfig.kind`` at its usual scale;
    ``moe``: 4 experts of width 64, top-2, with both router losses, instead of the dense MLP."""
    validation = {"held": SyntheticSourceConfig(vocab_size=256, num_tokens=5_000, seed=7)} if evaluate else {}
    experts = dict(mlp_dim=64, num_experts=4, experts_per_token=2, router_z_loss_coef=1e-3) if moe else {}
    model = LlamaConfig(
        **{"mlp_dim": 128, **experts},
        vocab_size=256,
        hidden_dim=64,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        seq_len=32,
    )
    return TrainLmConfig(
        output_path=str(output_path),
        model=model,
        data=DataConfig(train={"syn": SyntheticSourceConfig(vocab_size=256, num_tokens=50_000)}, validation=validation),
        # Adam's update g / (sqrt(v) + eps) amplifies the summation-order rounding of an entry whose
        # gradient is near eps: with eps 1e-8 and lr 1e-2 one w_gate entry (gradient ~1e-9) moved 7e-5
        # between the 1-device and 8-device runs (measured). eps 1e-6 and lr 1e-3 keep every entry away
        # from that regime, so the 1e-5 comparison measures the sharding, not Adam's conditioning.
        optimizer=OptimizerConfig(
            kind=optimizer,
            learning_rate={"muon": 0.02, "lion": 1e-4}.get(optimizer, 1e-3),
            soap_precondition_frequency=2,
            muon_adam_learning_rate=1e-3 if optimizer == "muon" else None,
            epsilon=1e-6,
            schedule="cosine",
            warmup=1,
            ema_decay=None if optimizer == "schedule_free_adamw" else 0.9,  # it keeps its own average
        ),
        trainer=TrainerConfig(
            num_train_steps=STEPS,
            batch_size=16,
            num_microbatches=2,
            log_every=1,
            max_eval_sequences=40,
            precision=PrecisionPolicy(compute_dtype="float32"),
            checkpoint=CheckpointConfig(save_interval_minutes=None),
            tracker=TrackerConfig(wandb=False, progress_bar=False),
            mesh=mesh,
            sharding=sharding,
        ),
    )
