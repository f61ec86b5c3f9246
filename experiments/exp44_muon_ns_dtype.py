"""Muon with Newton–Schulz in fp32 and in bf16, on Gutenberg books: does the precision change the loss? Issue #44.

torch's, Keller Jordan's and Levanter's Muon run Newton–Schulz in bf16; the lab's default is fp32
(``OptimizerConfig.muon_ns_dtype``). This runs the optimizer study's best Muon setting at its largest width
(24, 1x Chinchilla, learning rate 0.02, moonlight scaling; ``exp_optimizers``) with each precision and two seeds,
and evaluates held-out bits per byte. On the bundled slice (2026-11-30, Intel 2-core host, about 4 minutes):
fp32 2.3883 and 2.3867, bf16 2.3885 and 2.3872: the precision moved the mean by 0.0004, under the two seeds'
spread (docs/optimizers.md, "Precision").

    python experiments/exp44_muon_ns_dtype.py --prefix /tmp/ns_dtype            # the bundled slice
    MARIN_TEXT_SOURCE=upstream python experiments/exp44_muon_ns_dtype.py        # all 258 books (network)
"""

from __future__ import annotations

import dataclasses

from experiments.exp43_books_ladder import books_tokenized
from experiments.exp_optimizers import SEQ_LEN, TRAIN, VOCAB, run
from marin.execution import executor_main
from marin.scaling.ladder import nano_family

WIDTH, RATIO, LEARNING_RATE, SEEDS = 24, 1, 0.02, (0, 1)
NS_DTYPES = ("float32", "bfloat16")


def build(bundled: bool | None = None) -> list:
    """The four runs' held-out evals (each depends on its training run)."""
    tokenizer, tokenized = books_tokenized(bundled)
    [model] = nano_family(vocab_size=VOCAB, seq_len=SEQ_LEN, widths=(WIDTH,))
    evals = []
    for dtype in NS_DTYPES:
        train = dataclasses.replace(TRAIN, muon_ns_dtype=dtype)
        for seed in SEEDS:
            _, evaluation, _ = run("muon", model, RATIO, LEARNING_RATE, seed, tokenized, tokenizer, train=train)
            evals.append(evaluation)
    return evals


if __name__ == "__main__":
    executor_main(steps=build(), description="Muon's Newton–Schulz in fp32 and bf16 on Gutenberg books, two seeds each")
