"""Marin's optimizer study in miniature, on Gutenberg books. Issue #44.

Wen, Hall, Ma and Liang (2025, "Fantastic Pretraining Optimizers and Where to Find Them") tuned ten optimizers
at four sizes (0.1B-1.2B) and 1-8x Chinchilla's data and judged them at the end of training: the matrix
optimizers (Muon, Soap, Kron) were fastest, about 1.4x AdamW at 0.1B, shrinking to about 1.1x at 1.2B. Here:

- optimizers: AdamW, Muon (moonlight scaling, so one learning rate serves its matrices and its AdamW part),
  Lion, Adafactor, SOAP and Schedule-Free AdamW (``marin.trainer.optim``), weight decay 0.1, warmup-stable-decay
  as the ladder runs (schedule-free: warmup, then constant);
- sizes: three widths of the nano family (2 layers, hidden 12, 16, 24; N = 34k, 47k, 75k counted as the
  ladder counts them, ``flops_per_token / 6``), sequence length 128, the 2,048-token BPE of
  ``exp43_books_ladder``;
- data: 1x and 4x Chinchilla (20 and 80 tokens per parameter), batch 16;
- a learning-rate sweep of three to five doublings per optimizer at every (size, data), seed 0; the best
  setting of each is rerun with seed 1 when ``BEST_LR`` names it (filled from a finished sweep: a sweep's best
  is known only after it runs, and the executor's DAG is declared before);
- the loss: bits per byte on the first two held-out books; the speedup: how much more data AdamW needs at that
  size to reach the optimizer's final loss, interpolated in log data between AdamW's own best runs
  (``marin.scaling.optimizer_study``).

Hypothesis (the paper's): Muon and SOAP beat AdamW at every size here, by more at the smaller sizes; Lion
and Adafactor are within ~10% of AdamW. The outcome goes in docs/optimizers.md whichever way it falls.

    python experiments/exp_optimizers.py --dry_run true      # 144 sweep runs, 36 seed-1 reruns, evals, the analysis
    python experiments/exp_optimizers.py                     # the study (about 12 TFLOPs per sweep point)
    python -m marin.report experiments/exp_optimizers.py --prefix ./local_store
"""

from __future__ import annotations

import dataclasses

from experiments.defaults import default_eval, default_train, output_path_of
from experiments.exp43_books_ladder import HELDOUT_BOOKS, TRAIN, books_tokenized
from experiments.models import SimpleTrainConfig
from marin.execution import ExecutorStep, executor_main, this_output_path, versioned
from marin.scaling.ladder import nano_family
from marin.scaling.optimizer_study import OptimizerStudyConfig, StudyRunRef, optimizer_study_step

VOCAB = 2048
SEQ_LEN = 128
BATCH = 16
WIDTHS = (12, 16, 24)
RATIOS = (1, 4)
CHINCHILLA = 20.0
SWEEPS = {
    "adamw": (2.5e-3, 5e-3, 1e-2, 2e-2, 4e-2),
    "muon": (5e-3, 1e-2, 2e-2, 4e-2),
    "lion": (5e-4, 1e-3, 2e-3, 4e-3),
    "adafactor": (5e-3, 1e-2, 2e-2),
    "soap": (5e-3, 1e-2, 2e-2, 4e-2),
    "schedule_free_adamw": (5e-3, 1e-2, 2e-2, 4e-2),
}
"""Learning rates swept per optimizer, doubling. The first width-16 sweep (three points each) put the best rate of
AdamW (at both ends: 1x at the top, 4x at the bottom), Muon, SOAP and Lion at an edge, so each was extended one
doubling past that edge; a best rate still at an edge is flagged in the study's table."""
BEST_LR: dict[tuple[str, int, int], float] = {
    ("adafactor", 12, 1): 0.01,
    ("adafactor", 12, 4): 0.01,
    ("adafactor", 16, 1): 0.01,
    ("adafactor", 16, 4): 0.01,
    ("adafactor", 24, 1): 0.005,
    ("adafactor", 24, 4): 0.01,
    ("adamw", 12, 1): 0.04,
    ("adamw", 12, 4): 0.02,
    ("adamw", 16, 1): 0.02,
    ("adamw", 16, 4): 0.005,
    ("adamw", 24, 1): 0.01,
    ("adamw", 24, 4): 0.005,
    ("lion", 12, 1): 0.004,
    ("lion", 12, 4): 0.002,
    ("lion", 16, 1): 0.004,
    ("lion", 16, 4): 0.004,
    ("lion", 24, 1): 0.002,
    ("lion", 24, 4): 0.004,
    ("muon", 12, 1): 0.04,
    ("muon", 12, 4): 0.02,
    ("muon", 16, 1): 0.04,
    ("muon", 16, 4): 0.02,
    ("muon", 24, 1): 0.02,
    ("muon", 24, 4): 0.01,
    ("schedule_free_adamw", 12, 1): 0.02,
    ("schedule_free_adamw", 12, 4): 0.04,
    ("schedule_free_adamw", 16, 1): 0.02,
    ("schedule_free_adamw", 16, 4): 0.04,
    ("schedule_free_adamw", 24, 1): 0.02,
    ("schedule_free_adamw", 24, 4): 0.02,
    ("soap", 12, 1): 0.04,
    ("soap", 12, 4): 0.04,
    ("soap", 16, 1): 0.04,
    ("soap", 16, 4): 0.02,
    ("soap", 24, 1): 0.02,
    ("soap", 24, 4): 0.01,
}
"""(kind, width, ratio) -> the seed-0 sweep's best learning rate, rerun with seed 1: read from the sweep's analysis
(``benchmarks/results/optimizer_study.json``, 2026-11-28)."""
SCHEDULE = {"schedule": "wsd", "warmup": 0.05, "decay": 0.3, "min_lr_ratio": 0.05}
OPTIMIZER_SETTINGS = {
    "muon": {"muon_lr_scaling": "moonlight"},
    "schedule_free_adamw": {"schedule": "constant", "decay": None},  # the averaging replaces the decay
}


def run(
    kind: str,
    model,
    ratio: float,
    learning_rate: float,
    seed: int,
    tokenized,
    tokenizer,
    *,
    train: SimpleTrainConfig,
    heldout_books: int = HELDOUT_BOOKS,
):
    """One run of the study and its held-out eval; returns (train step, eval step, the analysis's reference)."""
    params = model.flops_per_token() / 6
    tokens = CHINCHILLA * ratio * params
    steps = max(1, round(tokens / (BATCH * SEQ_LEN)))
    name = f"opt-{kind}-h{model.hidden_dim}-{ratio:g}x-lr{learning_rate:g}" + (f"-s{seed}" if seed else "")
    config = dataclasses.replace(
        train,
        optimizer=kind,
        **{**SCHEDULE, **OPTIMIZER_SETTINGS.get(kind, {})},
        num_train_steps=steps,
        batch_size=BATCH,
        learning_rate=learning_rate,
        weight_decay=0.1,
        seed=seed,
    )
    checkpoint = default_train(name, {"gutenberg": tokenized}, model, config, validation={})
    evaluation = default_eval(
        name,
        checkpoint,
        tokenizer=tokenizer,
        validation={"gutenberg": tokenized / "validation"},
        model=model,
        max_documents=heldout_books,
    )
    ref = StudyRunRef(
        kind=kind,
        params=params,
        tokens=float(steps * BATCH * SEQ_LEN),
        ratio=float(ratio),
        learning_rate=learning_rate,
        seed=seed,
        run=checkpoint.name,
        eval_path=output_path_of(evaluation),
    )
    return checkpoint, evaluation, ref


def build(
    widths=WIDTHS, ratios=RATIOS, sweeps=SWEEPS, best_lr=None, train=TRAIN, bundled=None, heldout_books=HELDOUT_BOOKS
) -> dict:
    """The study's steps: ``runs``, ``evals`` and ``analysis``; tests build a tiny one (scored on one book)."""
    best_lr = BEST_LR if best_lr is None else best_lr
    tokenizer, tokenized = books_tokenized(bundled)
    family = {m.hidden_dim: m for m in nano_family(vocab_size=VOCAB, seq_len=SEQ_LEN, widths=widths)}
    options = {"train": train, "heldout_books": heldout_books}
    made = []
    for kind, rates in sweeps.items():
        for width in widths:
            for ratio in ratios:
                for lr in rates:
                    made.append(run(kind, family[width], ratio, lr, 0, tokenized, tokenizer, **options))
                if (kind, width, ratio) in best_lr:
                    lr = best_lr[(kind, width, ratio)]
                    made.append(run(kind, family[width], ratio, lr, 1, tokenized, tokenizer, **options))
    analysis = ExecutorStep(
        name="analysis/optimizer-study",
        fn=optimizer_study_step,
        config=OptimizerStudyConfig(
            runs=tuple(ref for _, _, ref in made), heldout=versioned("gutenberg"), output_path=this_output_path()
        ),
        description=f"best learning rate and speedup over AdamW of {len(sweeps)} optimizers, {len(made)} runs",
    )
    return {"runs": [c for c, _, _ in made], "evals": [e for _, e, _ in made], "analysis": analysis}


STUDY = build()

if __name__ == "__main__":
    executor_main(
        steps=[STUDY["analysis"]],
        description="Optimizer study in miniature (Wen et al. 2025) on Gutenberg books: six optimizers",
    )
