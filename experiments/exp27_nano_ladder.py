"""A CPU-scale scaling ladder: isoFLOP curves of the nano family predict a 4x larger run. Issue #27.

Three compute budgets (1, 2 and 4 TFLOPs) each train every width of the nano family (``marin.scaling.ladder``:
the nano preset's 2-layer shape from hidden 16 to 256) whose tokens per parameter falls in the rules' range,
on the quickstart's stories/web token cache (``tokenized/stories``, the quickstart's own step: after
``make quickstart`` no data step reruns) at sequence length 128. Each run is evaluated on the stories
validation set, the analysis step ``analysis/nano-ladder-fit`` fits the isoFLOP parabolas, N*(C) and D*(C),
and a loss surface L(N, D), and predicts the target: hidden 128 trained at 16 TFLOPs (4x the largest budget),
which trains beside the ladder. The report puts the prediction next to the target's measured loss.

Caveat, written down rather than hidden: the cache holds 1.7M tokens, so the smallest widths at the largest
budgets and the target see it several times over; the loss surface has no term for repeated data.

Hypothesis: the loss surface fitted on the three budgets predicts the target run's held-out bits per byte
within its 90% prediction interval.

    python experiments/exp27_nano_ladder.py --dry_run true   # the plan: 15 runs + evals, the fit, the target
    python experiments/exp27_nano_ladder.py                  # ~15 minutes on 2 cores, after make quickstart
    python -m marin.report experiments/exp27_nano_ladder.py --prefix ./local_store
"""

from experiments import quickstart
from experiments.defaults import ScalingLadder, default_scaling_ladder
from experiments.models import SimpleTrainConfig
from marin.execution import executor_main
from marin.scaling.ladder import LadderRules, nano_family

BUDGETS = (1e12, 2e12, 4e12)
TARGET_BUDGET = 1.6e13
TARGET_WIDTH = 128
RULES = LadderRules(seq_len=128, min_steps=40, max_tokens_per_param=160.0)
TRAIN = SimpleTrainConfig(
    num_train_steps=1,  # these three are set per run by the ladder's rules
    batch_size=1,
    learning_rate=0.0,
    compute_dtype="float32",  # a CPU has no fast bf16 matmuls
    log_every=10,
    save_interval_minutes=60.0,
    wandb=False,
)


def build(
    budgets=BUDGETS, target_budget=TARGET_BUDGET, rules=RULES, widths=None, bootstrap_samples=1000
) -> ScalingLadder:
    """The ladder on the quickstart's data; tests build a tiny one (their own budgets, hence their own hashes)."""
    steps = quickstart.STEPS
    family = nano_family(vocab_size=quickstart.VOCAB, seq_len=rules.seq_len, **({"widths": widths} if widths else {}))
    [target_model] = [m for m in family if m.hidden_dim == TARGET_WIDTH] or [family[-1]]
    return default_scaling_ladder(
        "nano-ladder",
        steps["stories"],
        tokenizer=steps["tokenizer"],
        family=family,
        budgets=budgets,
        target_budget=target_budget,
        target_model=target_model,
        rules=rules,
        train=TRAIN,
        heldout="stories",
        bootstrap_samples=bootstrap_samples,
    )


LADDER = build()

if __name__ == "__main__":
    executor_main(steps=LADDER.steps, description="nano isoFLOP ladder (1-4 TFLOPs) predicting a 16 TFLOPs run")
