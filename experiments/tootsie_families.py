"""Tootsie-style pretraining of the other architectures: a Qwen3 32B (Marin's 32B architecture) and an OLMoE-style
mixture of experts, on Tootsie's phase-1 data. Issue #45.

    python experiments/tootsie_families.py --dry_run true     # steps, shardings and memory per device
    RAY_ADDRESS=... MARIN_PREFIX=gs://my-bucket/lab python experiments/tootsie_families.py

Both read the DCLM mixture that ``tootsie_8b``'s phase 1 tokenizes (the same steps: nothing is tokenized twice)
with the Llama 3 tokenizer, so both models take its 128,256-token vocabulary in place of their families' own:

1. **qwen3-32b**: the ``qwen3_32b`` preset (QK-norm per head, head_dim 128, 64 layers, 64/8 heads, SwiGLU
   25,600) at seq 4096, batch 1024, AdamW lr 7e-4 with warmup-stable-decay, full rematerialisation, on a TPU
   v4-2048 (1,024 chips) split as fsdp 256 x tensor 4.
2. **olmoe-1b-7b**: the ``olmoe_1b_7b`` preset (64 experts of 1,024, top-8, load balancing 0.01, router z-loss
   0.001) at OLMoE's published recipe (Muennighoff et al. 2024, table 9: batch 1024 x 4096, lr 4e-4, cosine to
   a tenth, weight decay 0.1, 5T tokens), on a TPU v4-2048 split as fsdp 128 x expert 8: each device holds 8 of
   the 64 experts of every layer, and tokens travel to them all-to-all (``marin/trainer/model/moe.py``).

The dry run prints, per run, its parameters (total and active), tokens, the mesh, every parameter's placement
and the memory per device (``marin.trainer.memory``: parameters, gradients and optimizer state exactly;
activations and logits estimated) against the chip's 32 GiB.
"""

import dataclasses
import sys

from experiments.defaults import default_train
from experiments.models import SimpleTrainConfig
from experiments.tootsie_8b import PHASE1_SOURCES, SEQ_LEN, phase1_data, token_weights, validation
from marin.execution import ResourceConfig, executor_main
from marin.execution.step import TPU_POD_TYPES
from marin.trainer.memory import memory_plan
from marin.trainer.mesh import MeshConfig
from marin.trainer.model import model_preset

LLAMA3_VOCAB = 128_256
POD = "v4-2048"
CHIPS = TPU_POD_TYPES[POD][2] * TPU_POD_TYPES[POD][3]
HBM_GIB = 32  # a TPU v4 chip
TPU = ResourceConfig.tpu_pod(POD, max_retries=1000)

qwen3 = dataclasses.replace(model_preset("qwen3_32b"), vocab_size=LLAMA3_VOCAB, seq_len=SEQ_LEN)
olmoe = dataclasses.replace(model_preset("olmoe_1b_7b"), vocab_size=LLAMA3_VOCAB, seq_len=SEQ_LEN, remat="full")

RUNS = {
    "qwen3-32b": (
        qwen3,
        SimpleTrainConfig(
            num_train_steps=1_000_000,  # ~4.2T tokens
            batch_size=1024,
            learning_rate=7e-4,
            weight_decay=0.05,
            schedule="wsd",
            warmup=5000,
            decay=0.1,
            min_lr_ratio=0.1,
            compute_dtype="bfloat16",
            mesh=MeshConfig(data=1, fsdp=256, tensor=4),
            sharding="fsdp_tp",
            eval_every=10_000,
            keep_every=10_000,
            wandb=True,
            resources=TPU,
        ),
    ),
    "olmoe-1b-7b": (
        olmoe,
        SimpleTrainConfig(
            num_train_steps=1_220_000,  # 1024 x 4096 x 1.22M = 5.1T tokens
            batch_size=1024,
            learning_rate=4e-4,
            weight_decay=0.1,
            schedule="cosine",
            warmup=2500,
            min_lr_ratio=0.1,
            compute_dtype="bfloat16",
            mesh=MeshConfig(data=1, fsdp=128, expert=8),
            sharding="fsdp",
            eval_every=10_000,
            keep_every=10_000,
            wandb=True,
            resources=TPU,
        ),
    ),
}

runs = {
    name: default_train(
        f"tootsie-{name}", phase1_data, model, config, weights=token_weights(PHASE1_SOURCES), validation=validation
    )
    for name, (model, config) in RUNS.items()
}


def describe() -> str:
    lines = []
    for name, step in runs.items():
        model, trainer, optimizer = (step.config.model.value, step.config.trainer.value, step.config.optimizer.value)
        tokens = trainer.num_train_steps * trainer.batch_size * model.seq_len
        lines.append(
            f"{name}: {model.param_count / 1e9:.2f}B parameters ({model.active_param_count / 1e9:.2f}B active), "
            f"{trainer.num_train_steps:,} steps x {trainer.batch_size} x {model.seq_len} = {tokens / 1e12:.2f}T "
            f"tokens on {POD} ({CHIPS} chips, {HBM_GIB} GiB each)"
        )
        lines.append(memory_plan(model, trainer, optimizer, CHIPS).describe())
    return "\n".join(lines)


if __name__ == "__main__":
    if "--dry_run" in " ".join(sys.argv):
        print(describe())
    executor_main(steps=list(runs.values()), description="Tootsie-style Qwen3 32B and OLMoE 1B-7B")
