"""Marin 8B ("Tootsie"): the multi-phase run as a DAG, the recipe written as code.

    python experiments/tootsie_8b.py --dry_run true        # the plan, parameter count, tokens per phase
    RAY_ADDRESS=... MARIN_PREFIX=gs://my-bucket/lab python experiments/tootsie_8b.py   # on a TPU cluster

Marin trained its 8B model in phases, adapting the recipe as evidence came in ("tootsie roll": keep
rolling). This file records the three phases the way they ran, at their real sizes:

1. **Phase 1** (the "kestrel"/DCLM phase): Llama-3-8B shape, batch 1024 × 4096 tokens, AdamW lr 1e-3,
   weight decay 0.05, 1,000 warmup steps, WSD-S (cyclic warmup-stable-decay, so checkpoints along the way
   are usable), on the DCLM mixture: DCLM baseline + StarCoder data + Proof-Pile 2, weighted by tokens.
   Ran on 2 × TPU v5e-256 (multislice).
2. **Phase 2** ("ocelot"): initialised from phase 1's parameters, batch 3072 (≈12.6M tokens per step), lr
   1.7e-3, an EMA of the parameters, same mixture. Ran on a TPU v4-2048.
3. **Cooldown**: initialised from phase 2, the mixture shifts to high-quality sources (math, code, papers,
   encyclopedic and Q&A text) and the learning rate decays linearly to zero.

Every phase is evaluated (bits-per-byte on held-out Paloma-style sets + multiple-choice tasks) and exported.

4. **Instruct** (Marin-8B-Instruct): supervised fine-tuning of the cooldown's parameters on a mixture of
   public chat data sets (pinned revisions, weighted by their number of conversations as Marin's release
   SFT was), rendered with the Llama 3 chat template, loss on assistant tokens only. See ``instruct_phase``.
5. **DPO**: preference optimization of the instruct model against itself (frozen) on UltraFeedback-binarized
   (pinned), as Marin's ``dpo_ultrafeedback.py``: sigmoid DPO, beta 0.01, lr 5e-7 decaying linearly, batch 128
   pairs at 4096 tokens, 2,150 steps; held-out ``test_prefs`` pairs scored before and after. See
   ``preference_phase``.
6. **RL** (GRPO with verifiable rewards, issue 38): from the instruct model, on GSM8K's training problems
   (MIT, pinned commit), rewarded for the right final number (and a little for marking it ``#### n``),
   rollouts through the lab's engine on Ray workers one iteration ahead of the update. See ``rl_phase``.
Data steps run on CPU workers; download revisions pin exactly what was read. Token counts are the public
sizes of each source after Marin's filtering, rounded; they set the mixture weights.
"""

import dataclasses
import sys

from experiments.defaults import (
    default_chat_data,
    default_dedupe,
    default_download,
    default_dpo,
    default_environment,
    default_eval,
    default_export,
    default_instruct_eval,
    default_preference_data,
    default_preference_eval,
    default_preference_tokenize,
    default_prompt_set,
    default_rl,
    default_sft,
    default_sft_tokenize,
    default_tokenize,
    default_train,
)
from experiments.models import TPU_V4_2048, SimpleTrainConfig, llama_8b
from experiments.real_text import real_text_validation
from marin.environments import GSM8K_URLS
from marin.execution import ResourceConfig, executor_main
from marin.posttrain import PreferenceLossConfig
from marin.posttrain.rl.config import GrpoConfig, RolloutConfig
from marin.posttrain.rl.loss import LossConfig
from marin.posttrain.rl.rollout import SamplingConfig
from marin.trainer.optim import OptimizerConfig
from marin.trainer.step import PrecisionPolicy

LLAMA3_TOKENIZER = "meta-llama/Meta-Llama-3.1-8B"
SEQ_LEN = 4096

# (hub data set, pinned revision, file globs, tokens) -- revisions are the commits Marin's runs read (as
# recorded in its experiments/pretraining_datasets.py); token counts (NeoX tokenizer) set the weights.
PHASE1_SOURCES = {
    "dclm_baseline": (
        "hf://datasets/mlfoundations/dclm-baseline-1.0",
        "a3b142c",
        ("global-shard_*/local-shard_*/*.jsonl.zst",),
        3.8e12,
    ),
    "starcoderdata": ("hf://datasets/bigcode/starcoderdata", "9fc30b5", ("*/train-*.parquet",), 2.5e11),
    "proofpile_2": (
        "hf://datasets/EleutherAI/proof-pile-2",
        "901a927",
        ("algebraic-stack/train/*.jsonl.zst", "arxiv/train/*.jsonl.zst", "open-web-math/train/*.jsonl.zst"),
        5.5e10,
    ),
}
# High-quality sources for the cooldown (math, code with explanations, papers, encyclopedic text, Q&A).
COOLDOWN_SOURCES = {
    "finemath_3plus": (
        "hf://datasets/HuggingFaceTB/finemath",
        "e92b25a616738fe95dc186b64dfb19f9c8525594",
        ("finemath-3plus/*.parquet",),
        3.4e10,
    ),
    "dolmino_wiki": ("hf://datasets/allenai/dolmino-mix-1124", "bb54cab", ("data/wiki/*.json.gz",), 3.7e9),
    "dolmino_stackexchange": (
        "hf://datasets/allenai/dolmino-mix-1124",
        "bb54cab",
        ("data/stackexchange/*.json.gz",),
        1.3e9,
    ),
    "dolmino_pes2o": ("hf://datasets/allenai/dolmino-mix-1124", "bb54cab", ("data/pes2o/*.json.gz",), 5.9e10),
    "dolmino_flan": ("hf://datasets/allenai/dolmino-mix-1124", "bb54cab", ("data/flan/*.json.gz",), 1.7e10),
}
# Held-out text for bits-per-byte (Paloma's subsets) and multiple-choice tasks, pinned like the data.
PALOMA = (
    "hf://datasets/allenai/paloma",
    "65cd6fc",
    ("c4_en/val/val*.jsonl.gz", "dolma_100_subreddits/val/val*.jsonl.gz", "m2d2_wikipedia_unsplit/val/val*.jsonl.gz"),
)

CPU_BIG = ResourceConfig(num_cpus=16, memory=64 << 30)
# Training runs on every host of its slices (one jax.distributed process per host); preemptible slices
# restart the whole job from its newest checkpoint, up to 1000 times.
TPU_V5E_256_X2 = ResourceConfig.tpu_pod("v5e-256", slices=2, max_retries=1000)  # 128 hosts x 4 chips
TPU_V4_2048_PREEMPTIBLE = dataclasses.replace(TPU_V4_2048, max_retries=1000)  # 256 hosts x 4 chips

PHASE1_STEPS = 660_000  # 1024 x 4096 tokens per step: ~2.77T tokens
PHASE2_STEPS = 110_000  # 3072 x 4096: ~1.38T tokens
COOLDOWN_STEPS = 30_000  # 3072 x 4096: ~0.38T tokens


def data_pipeline(name: str, source: tuple, validation_from=None):
    url, revision, patterns, _tokens = source
    raw = default_download(name, url, revision=revision, patterns=patterns)
    documents = dataclasses.replace(default_dedupe(name, raw), resources=CPU_BIG)  # CPU-bound, many workers
    tokenized = default_tokenize(
        name,
        train=[documents / "documents"],
        validation=[validation_from] if validation_from is not None else [],
        tokenizer=LLAMA3_TOKENIZER,
        num_workers=64,
    )
    return dataclasses.replace(tokenized, resources=CPU_BIG)


paloma = default_download("paloma", PALOMA[0], revision=PALOMA[1], patterns=PALOMA[2])
phase1_data = {name: data_pipeline(name, src) for name, src in PHASE1_SOURCES.items()}
cooldown_data = {name: data_pipeline(name, src) for name, src in COOLDOWN_SOURCES.items()}
paloma_tokenized = dataclasses.replace(
    default_tokenize("paloma", train=[paloma / "c4_en"], validation=[paloma], tokenizer=LLAMA3_TOKENIZER),
    resources=CPU_BIG,
)
validation = {"paloma": paloma_tokenized / "validation"}


def token_weights(sources: dict) -> dict[str, float]:
    total = sum(src[3] for src in sources.values())
    return {name: src[3] / total for name, src in sources.items()}


model = llama_8b(seq_len=SEQ_LEN)

phase1 = default_train(
    "tootsie-8b-phase1",
    phase1_data,
    model,
    SimpleTrainConfig(
        num_train_steps=PHASE1_STEPS,
        batch_size=1024,
        learning_rate=1e-3,
        weight_decay=0.05,
        schedule="wsd_s",
        warmup=1000,
        decay=0.1,
        cycles=(200_000, 400_000),
        rewarmup=1000,
        min_lr_ratio=0.1,
        compute_dtype="bfloat16",
        eval_every=10_000,
        keep_every=10_000,
        wandb=True,
        resources=TPU_V5E_256_X2,
    ),
    weights=token_weights(PHASE1_SOURCES),
    validation=validation,
)
phase2 = default_train(
    "tootsie-8b-phase2",
    phase1_data,
    model,
    SimpleTrainConfig(
        num_train_steps=PHASE2_STEPS,
        batch_size=3072,
        learning_rate=1.7e-3,
        weight_decay=0.05,
        schedule="constant",
        warmup=1000,
        decay=None,
        ema_decay=0.995,
        compute_dtype="bfloat16",
        eval_every=5_000,
        keep_every=5_000,
        wandb=True,
        resources=TPU_V4_2048_PREEMPTIBLE,
    ),
    weights=token_weights(PHASE1_SOURCES),
    validation=validation,
    initialize_from=phase1,
)
# The cooldown keeps 30% web (DCLM) so the model does not forget general text while it anneals.
cooldown_weights = {"dclm_baseline": 0.3, **{k: 0.7 * w for k, w in token_weights(COOLDOWN_SOURCES).items()}}
cooldown = default_train(
    "tootsie-8b-cooldown",
    {"dclm_baseline": phase1_data["dclm_baseline"], **cooldown_data},
    model,
    SimpleTrainConfig(
        num_train_steps=COOLDOWN_STEPS,
        batch_size=3072,
        learning_rate=1.7e-3,
        weight_decay=0.05,
        schedule="linear",
        warmup=0,
        min_lr_ratio=0.0,
        ema_decay=0.995,
        compute_dtype="bfloat16",
        eval_every=2_000,
        keep_every=5_000,
        wandb=True,
        resources=TPU_V4_2048_PREEMPTIBLE,
    ),
    weights=cooldown_weights,
    validation=validation,
    initialize_from=phase2,
)

PHASES = {"phase1": (phase1, 1024), "phase2": (phase2, 3072), "cooldown": (cooldown, 3072)}
# Multiple-choice tasks as lm-eval scores them, read from the hub by datasets.load_dataset (relative paths:
# a Ray job's working directory is the submitted checkout, and the path is part of the eval's identity).
TASKS = [f"experiments/tasks/{name}.yaml" for name in ("arc_easy", "arc_challenge", "hellaswag")]
# One v4-8 host (4 chips, 128 GB HBM): the 8B parameters are sharded over its chips for scoring. The
# export converts on the host, in CPU memory (32 GB of fp32 parameters, plus the safetensors buffer).
EVAL_HOST = ResourceConfig.tpu_pod("v4-8", num_cpus=8, max_retries=10)
EXPORT_HOST = ResourceConfig(num_cpus=16, memory=96 << 30, max_retries=10)
evals = [
    default_eval(
        f"tootsie-8b-{name}",
        step,
        tokenizer=LLAMA3_TOKENIZER,
        # Paloma, plus the lab's real public-domain text held out per corpus (experiments.real_text: small files)
        validation={**validation, **real_text_validation()},
        tasks=TASKS,
        model=model,
        resources=EVAL_HOST,
    )
    for name, (step, _) in PHASES.items()
]
exports = [
    default_export(f"tootsie-8b-{name}", step, tokenizer=LLAMA3_TOKENIZER, model=model, resources=EXPORT_HOST)
    for name, (step, _) in PHASES.items()
]


# ----------------------------------------------------------------------------------------------------------
# The instruct phase (Marin-8B-Instruct). Chat data sets by pinned revision: (hub data set, revision, file
# globs, conversations). Their rows are OpenAI-style `messages` or ShareGPT `conversations` (with a
# `system` column), the shapes marin.chat normalizes; revisions are the ones Marin's SFT experiments read.
# Weights are proportional to conversations, as in Marin's release SFT mixture (its exp905/exp1237).
SFT_SOURCES = {
    "tulu_3_sft_mixture": ("hf://datasets/allenai/tulu-3-sft-mixture", "55e9fd6", ("data/*.parquet",), 939_343),
    "smoltalk": ("hf://datasets/HuggingFaceTB/smoltalk", "2c849df", ("data/all/*.parquet",), 1_043_917),
    "openthoughts_114k_math": ("hf://datasets/open-r1/OpenThoughts-114k-math", "2db609d", ("data/*.parquet",), 89_120),
    "bespoke_stratos_17k": ("hf://datasets/bespokelabs/Bespoke-Stratos-17k", "9e9adba", ("data/*.parquet",), 16_710),
}
# Marin's release SFT (exp1237 on the deeper-starling base): lr 1e-4, batch 128 x 4096, 10,228 steps
# (~5.4B tokens), z-loss 1e-4. Warmup and the linear decay to zero are the Tulu 3 recipe's shape.
SFT_STEPS = 10_228
SFT_TRAIN = SimpleTrainConfig(
    num_train_steps=SFT_STEPS,
    batch_size=128,
    learning_rate=1e-4,
    weight_decay=0.0,
    schedule="linear",
    warmup=0.03,
    min_lr_ratio=0.0,
    z_loss=1e-4,
    compute_dtype="bfloat16",
    eval_every=1_000,
    keep_every=2_000,
    wandb=True,
    resources=TPU_V4_2048_PREEMPTIBLE,
)


def instruct_phase(base, *, held_out_fraction: float = 0.002) -> dict:
    """SFT steps from ``base`` (a training step): chat data, chat template + masked caches, SFT, evals, export."""
    chats, sft_sets = {}, {}
    for name, (url, revision, patterns, _rows) in SFT_SOURCES.items():
        raw = default_download(name, url, revision=revision, patterns=patterns)
        chats[name] = dataclasses.replace(
            default_chat_data(name, [raw], validation_fraction=held_out_fraction, on_error="skip"), resources=CPU_BIG
        )
        sft_sets[name] = dataclasses.replace(
            default_sft_tokenize(
                f"{name}-sft-llama3", chats[name], tokenizer=LLAMA3_TOKENIZER, model_max_length=SEQ_LEN, num_workers=64
            ),
            resources=CPU_BIG,
        )
    weights = {name: src[3] for name, src in SFT_SOURCES.items()}
    sft = default_sft("tootsie-8b-instruct", sft_sets, model, SFT_TRAIN, initialize_from=base, weights=weights)
    chat_tokenizer = sft_sets["tulu_3_sft_mixture"] / "tokenizer"
    held_out = {name: chat / "validation" for name, chat in chats.items()}
    return {
        "chats": chats,
        "sft_sets": sft_sets,
        "sft": sft,
        "eval": default_instruct_eval(
            "tootsie-8b-instruct",
            sft,
            chat_tokenizer=chat_tokenizer,
            eval_sets=held_out,
            model=model,
            max_items=500,
            max_new_tokens=256,
            resources=EVAL_HOST,
        ),
        "export": default_export(
            "tootsie-8b-instruct", sft, tokenizer=chat_tokenizer, model=model, resources=EXPORT_HOST
        ),
    }


instruct = instruct_phase(cooldown)

# ----------------------------------------------------------------------------------------------------------
# The DPO phase. UltraFeedback-binarized at the revision Marin's preference data steps pin; its train_prefs
# and test_prefs splits are Parquet rows of the UltraFeedback shape (prompt string, chosen/rejected message
# lists, scores), which marin.chat.preference reads as they are.
ULTRAFEEDBACK = ("hf://datasets/HuggingFaceH4/ultrafeedback_binarized", "3949bf5")
# Marin's experiments/dpo_ultrafeedback.py: batch 128, 2,150 steps (~1 epoch of 61k pairs), lr 5e-7 linear to
# zero, no warmup, beta 0.01, seq 4096. One v5p-8 host (4 chips, 380 GB HBM): a custom objective runs on one
# host for now (docs/dpo.md); the reference's log-probabilities are computed once, so no second 8B copy lives
# in the training step.
DPO_STEPS = 2_150
DPO_TRAIN = SimpleTrainConfig(
    num_train_steps=DPO_STEPS,
    batch_size=128,
    num_microbatches=16,
    learning_rate=5e-7,
    weight_decay=0.0,
    schedule="linear",
    warmup=0,
    min_lr_ratio=0.0,
    compute_dtype="bfloat16",
    eval_every=200,
    keep_every=1_000,
    wandb=True,
    resources=ResourceConfig.tpu_pod("v5p-8", max_retries=100),
)
DPO_LOSS = PreferenceLossConfig(type="sigmoid", beta=0.01)


def preference_phase(sft, chat_tokenizer) -> dict:
    """DPO of ``sft`` (the instruct step) on UltraFeedback-binarized, its test pairs scored before and after."""
    url, revision = ULTRAFEEDBACK
    train = default_download("ultrafeedback_binarized-train", url, revision=revision, patterns=("data/train_prefs-*",))
    test = default_download("ultrafeedback_binarized-test", url, revision=revision, patterns=("data/test_prefs-*",))
    prefs = dataclasses.replace(
        default_preference_data("ultrafeedback_binarized", [train], validation=[test], on_error="skip"),
        resources=CPU_BIG,
    )
    caches = dataclasses.replace(
        default_preference_tokenize(
            "ultrafeedback_binarized-llama3", prefs, tokenizer=chat_tokenizer, model_max_length=SEQ_LEN, num_workers=64
        ),
        resources=CPU_BIG,
    )
    dpo = default_dpo(
        "tootsie-8b-dpo", caches, model, DPO_TRAIN, initialize_from=sft, loss=DPO_LOSS, reference_resources=EVAL_HOST
    )

    def evaluation(name, checkpoint):
        held_out = {"ultrafeedback_test_prefs": prefs / "validation"}
        return default_preference_eval(
            name,
            checkpoint,
            chat_tokenizer=chat_tokenizer,
            pairs=held_out,
            reference=sft,
            beta=DPO_LOSS.beta,
            model=model,
            resources=EVAL_HOST,
        )

    return {
        "preferences": prefs,
        "pair_caches": caches,
        "dpo": dpo,
        "eval_sft": evaluation("tootsie-8b-instruct", sft),
        "eval": evaluation("tootsie-8b-dpo", dpo),
        "export": default_export("tootsie-8b-dpo", dpo, tokenizer=chat_tokenizer, model=model, resources=EXPORT_HOST),
    }


preference = preference_phase(instruct["sft"], instruct["sft_sets"]["tulu_3_sft_mixture"] / "tokenizer")


# ----------------------------------------------------------------------------------------------------------
# The RL phase: GRPO on GSM8K from the instruct model. Dr. GRPO's constant normalizer with DAPO's clip-higher
# (0.2 / 0.28), no KL term, a small constant learning rate, G = 16 completions of up to 1,024 tokens per
# problem; rollout workers sample one iteration ahead (off_policy_lag=1) while the update trains.
GSM8K_SYSTEM = "Solve the problem step by step. End your answer with a line '#### <number>' giving the final number."
RL_GRPO = GrpoConfig(
    num_iterations=500,
    prompts_per_iteration=64,
    num_generations=16,
    num_minibatches=4,
    sampling=SamplingConfig(temperature=1.0, max_completion_tokens=1024),
    loss=LossConfig(loss_type="dr_grpo", epsilon=0.2, epsilon_high=0.28, beta=0.0, max_completion_tokens=1024),
    off_policy_lag=1,
)
RL_OPTIMIZER = OptimizerConfig(learning_rate=1e-6, schedule="constant", warmup=10, weight_decay=0.0)
RL_HOST = ResourceConfig.tpu_pod("v4-8", num_cpus=8, max_retries=100)


def rl_phase(sft, chat_tokenizer) -> dict:
    """GSM8K's training split as prompt records, then GRPO from ``sft`` with rollouts on 8 Ray workers."""
    raw = default_download("gsm8k-train", GSM8K_URLS["train"])
    prompts = default_prompt_set("gsm8k-train", raw)
    environment = default_environment(prompts, rewards=(("numeric", 1.0), ("format", 0.1)), system_prompt=GSM8K_SYSTEM)
    rl = default_rl(
        "tootsie-8b-rl",
        sft,
        {"gsm8k": environment},
        chat_tokenizer=chat_tokenizer,
        grpo=RL_GRPO,
        optimizer=RL_OPTIMIZER,
        precision=PrecisionPolicy(compute_dtype="bfloat16"),
        model=model,
        rollout=RolloutConfig(num_workers=8, slots=256, prefill_chunk=256),
        keep_every=50,
        resources=RL_HOST,
    )
    export = default_export("tootsie-8b-rl", rl, tokenizer=chat_tokenizer, model=model, resources=EXPORT_HOST)
    return {"raw": raw, "prompts": prompts, "rl": rl, "export": export}


rl = rl_phase(instruct["sft"], instruct["sft_sets"]["tulu_3_sft_mixture"] / "tokenizer")


def describe() -> str:
    lines = [f"Tootsie 8B: {model.param_count / 1e9:.2f}B parameters, seq {SEQ_LEN}"]
    for name, (step, batch) in PHASES.items():
        steps = step.config.trainer.value.num_train_steps
        tpu, hosts = step.resource_config.tpu, step.resource_config.hosts
        lines.append(
            f"  {name:8s} {steps:>8,} steps x {batch} x {SEQ_LEN} = {steps * batch * SEQ_LEN / 1e12:.2f}T tokens"
            f" on {tpu.slices} x {tpu.version} {tpu.topology} ({hosts} hosts)"
        )
    lines.append(
        f"  instruct {SFT_STEPS:>8,} steps x {SFT_TRAIN.batch_size} x {SEQ_LEN} = "
        f"{SFT_STEPS * SFT_TRAIN.batch_size * SEQ_LEN / 1e9:.1f}B tokens (SFT, assistant tokens only) on "
        f"{len(SFT_SOURCES)} chat data sets"
    )
    lines.append(
        f"  dpo      {DPO_STEPS:>8,} steps x {DPO_TRAIN.batch_size} pairs (UltraFeedback-binarized, {DPO_LOSS.type} "
        f"DPO, beta {DPO_LOSS.beta}) against the frozen instruct model"
    )
    g = RL_GRPO
    lines.append(
        f"  rl       {g.num_iterations:>8,} iterations x {g.prompts_per_iteration} GSM8K problems x "
        f"{g.num_generations} completions (GRPO, {g.loss.loss_type}, {g.num_updates:,} updates)"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    if "--dry_run" in " ".join(sys.argv):
        print(describe())
    executor_main(
        steps=[
            *evals,
            *exports,
            instruct["eval"],
            instruct["export"],
            preference["eval_sft"],
            preference["eval"],
            preference["export"],
            rl["export"],
        ],
        description="Marin 8B (Tootsie): phase 1, phase 2, cooldown, instruct, DPO, RL",
    )
