"""A scaling ladder on real text: isoFLOP curves on Gutenberg books predict a 4x larger run. Issue #43.

Three compute budgets (1, 2 and 4 TFLOPs) each train every size of a family (``marin.scaling.ladder``) whose
tokens per parameter falls in the rules' range, at sequence length 128, on the books of
``experiments.real_text.gutenberg_documents`` (Project Gutenberg's header and footer removed, whole books held out
by name hash) tokenized with a 2,048-token BPE trained on the training books. Each run is evaluated on the first
two held-out books (bits per byte); ``analysis/<ladder>-fit`` fits the isoFLOP parabolas and the loss surface and
predicts the target, the family's size nearest 20 tokens per parameter at 16 TFLOPs (4x the largest budget),
which trains beside the ladder.

The family: ``deep`` (the default, ``books-ladder-deep``) grows the nano shape in depth with width (width / 16
layers: h16d1 to h96d6), ``nano`` (``books-ladder``) keeps 2 layers at every width, so most of its N is the output
head at this vocabulary. On the full corpus the nano ladder's surface missed its target by -10.1%; the deep
family's by -2.8% at 1-4 TFLOPs (target h64d4 at 16) and -2.7% at 2-8 (h80d5 at 32), both inside their 90%
intervals (docs/scaling.md, "On real text").

Batches: every run takes at least 1,500 optimizer steps where its tokens allow (batches of 4 to 16 sequences):
at equal tokens the larger widths gained up to 0.18 bits per byte from more, smaller steps, the smallest lost a
little (docs/scaling.md, "On real text").

The full corpus (``MARIN_TEXT_SOURCE=upstream``: all 258 books, 28.5M training tokens) holds every run's tokens
once; the bundled slice (47 books, 4.5M) repeats them for the smallest sizes at the largest budget, which the loss
surface has no term for. Hypothesis: the surface fitted on the three budgets predicts the target's held-out bits
per byte within 3% and within its 90% prediction interval.

    python experiments/exp43_books_ladder.py --dry_run true   # 16 runs + evals, the fit, the target
    MARIN_TEXT_SOURCE=upstream python experiments/exp43_books_ladder.py   # ~18 minutes on 2 cores (measured)
    python -m marin.report experiments/exp43_books_ladder.py --prefix ./local_store
"""

from experiments.defaults import ScalingLadder, default_scaling_ladder, default_tokenize, default_train_tokenizer
from experiments.models import SimpleTrainConfig
from experiments.real_text import gutenberg_documents
from marin.execution import executor_main
from marin.scaling.ladder import LadderRules, deep_family, nano_family, nearest_compute_optimal

VOCAB = 2048
BUDGETS = (1e12, 2e12, 4e12)
TARGET_BUDGET = 1.6e13
FAMILIES = {"nano": nano_family, "deep": deep_family}
"""The size families; a ladder's target is its family's size nearest 20 tokens per parameter at the target budget
(``nearest_compute_optimal``): h96 for the nano family at 16 and 32 TFLOPs (12 and 24 tokens per parameter), h64d4
(17) and h80d5 (12.5) for the deep family at 16 and 32."""
HELDOUT_BOOKS = 2
RULES = LadderRules(seq_len=128, min_steps=1500, min_batch=4, max_batch=16, max_tokens_per_param=160.0)
TRAIN = SimpleTrainConfig(
    num_train_steps=1,  # these three are set per run by the ladder's rules
    batch_size=1,
    learning_rate=0.0,
    compute_dtype="float32",  # a CPU has no fast bf16 matmuls
    log_every=10,
    save_interval_minutes=60.0,
    wandb=False,
)


def books_tokenized(bundled: bool | None = None):
    """(tokenizer, tokenized): a 2,048-token BPE of the training books, and both splits' token caches."""
    documents = gutenberg_documents(bundled=bundled)
    tokenizer = default_train_tokenizer("gutenberg-bpe2k", [documents / "train"], vocab_size=VOCAB, max_documents=None)
    tokenized = default_tokenize(
        "gutenberg-bpe2k", train=[documents / "train"], validation=[documents / "validation"], tokenizer=tokenizer
    )
    return tokenizer, tokenized


def build(
    budgets=BUDGETS,
    target_budget=TARGET_BUDGET,
    rules=RULES,
    widths=None,
    bootstrap_samples=1000,
    bundled=None,
    heldout_books=HELDOUT_BOOKS,
    family="nano",
) -> ScalingLadder:
    """The ladder; tests build a tiny one (their own budgets, hence their own hashes; scored on one book).

    ``family="deep"`` grows depth with width (``marin.scaling.ladder.deep_family``), as a separate ladder
    (``books-ladder-deep``)."""
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {sorted(FAMILIES)}, got {family!r}")
    tokenizer, tokenized = books_tokenized(bundled)
    sizes = FAMILIES[family](vocab_size=VOCAB, seq_len=rules.seq_len, **({"widths": widths} if widths else {}))
    return default_scaling_ladder(
        "books-ladder" if family == "nano" else f"books-ladder-{family}",
        tokenized,
        tokenizer=tokenizer,
        family=sizes,
        budgets=budgets,
        target_budget=target_budget,
        target_model=nearest_compute_optimal(sizes, target_budget),
        rules=rules,
        train=TRAIN,
        heldout="gutenberg",
        bootstrap_samples=bootstrap_samples,
        eval_max_documents=heldout_books,
    )


LADDER = build(family="deep")

if __name__ == "__main__":
    executor_main(
        steps=LADDER.steps, description="isoFLOP ladder on Gutenberg books, deep family (1-4 TFLOPs), target at 16"
    )
