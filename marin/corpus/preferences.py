"""Verifiable preference pairs over the bundled instruction data: the correct reply against a wrong one.

    generate_instruction_pairs(InstructionPairsConfig(output_path="/tmp/pairs"))
    # train/pairs.jsonl        {"id", "kind", "prompt": [user], "chosen": [assistant], "rejected": [assistant]}
    # validation/pairs.jsonl   held out: questions phrased as only the held-out instructions are

Each pair is an item of ``marin.corpus.instruct`` drawn by the same generator as ``generate_instructions``
(training phrasings for ``train/``, held-out phrasings for ``validation/``, separate random streams): chosen is
the item's reference reply, rejected one of its three wrong replies of the same form (a wrong sum, sound,
opposite or count). Which reply is better is a fact, not a judgment, so the pairs test the mechanics of
preference training (the loss, the reference, the metrics), not what human preference data would teach.
``swap_labels`` writes every training pair the wrong way round, for the test that learning follows labels.
"""

from __future__ import annotations

import dataclasses
import json
import random

from marin.corpus.instruct import KINDS, make_item
from marin.storage import join, write_atomic
from marin.storage.records import write_records
from marin.validation import check


@dataclasses.dataclass(frozen=True, kw_only=True)
class InstructionPairsConfig:
    output_path: str
    seed: int = 0
    train_pairs: int = 1000
    validation_pairs: int = 200
    swap_labels: bool = False
    """Write the wrong reply as chosen in ``train/`` (held-out pairs stay right): labels learning should follow."""

    def __post_init__(self):
        check("InstructionPairsConfig", "train_pairs", self.train_pairs, lambda v: v >= 1, ">= 1")
        check("InstructionPairsConfig", "validation_pairs", self.validation_pairs, lambda v: v >= 1, ">= 1")


def make_pair(rng: random.Random, kind: str, held_out: bool) -> dict:
    """One instruction item as a pair: its reference reply chosen, one wrong reply rejected."""
    item = make_item(rng, kind, held_out=held_out)
    question, answer = item["messages"]
    wrong = rng.choice([c for i, c in enumerate(item["choices"]) if i != item["gold"]])
    return {
        "kind": kind,
        "prompt": [question],
        "chosen": [answer],
        "rejected": [{"role": "assistant", "content": wrong}],
    }


def generate_instruction_pairs(config: InstructionPairsConfig) -> None:
    train_rng, held_rng = random.Random(f"{config.seed}-pairs-train"), random.Random(f"{config.seed}-pairs-validation")
    splits = {
        "train": [make_pair(train_rng, KINDS[i % len(KINDS)], False) for i in range(config.train_pairs)],
        "validation": [make_pair(held_rng, KINDS[i % len(KINDS)], True) for i in range(config.validation_pairs)],
    }
    if config.swap_labels:
        splits["train"] = [{**p, "chosen": p["rejected"], "rejected": p["chosen"]} for p in splits["train"]]
    for split, pairs in splits.items():
        rows = [{"id": f"{split}-{i}", **pair} for i, pair in enumerate(pairs)]
        write_records(join(config.output_path, split, "pairs.jsonl"), rows)
    manifest = {"seed": config.seed, "swap_labels": config.swap_labels, **{s: len(p) for s, p in splits.items()}}
    write_atomic(join(config.output_path, "manifest.json"), json.dumps(manifest, indent=2))
