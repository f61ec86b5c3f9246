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

``rejected="near_miss"`` draws the wrong reply the way a small instruct model errs instead: a sum off by one
(``3 + 4 = 8``), a count that stops one number early or late (``four, five, six`` / ``four, ..., eight``);
animal sounds and opposites keep a wrong reply of the same form. The quickstart's SFT model ranks most random
wrong replies below the right one already (0.97-1.0 of held-out pairs, issue 80), so DPO on them has nothing to
teach; near misses are the pairs it does not yet rank right.
"""

from __future__ import annotations

import dataclasses
import json
import random

from marin.corpus.domains import NUMBER_WORDS
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
    train_phrasings: str = "training"
    """How the training pairs ask: as the SFT data ("training") or as post-training practises ("practice", phrasings
    neither the SFT data nor the held-out pairs use; ``marin.corpus.instruct.PHRASINGS``)."""
    rejected: str = "any"
    """Which wrong reply is rejected: "any" (one of the item's three wrong choices) or "near_miss" (an off-by-one
    sum or count; see the module docstring)."""

    def __post_init__(self):
        check(
            "InstructionPairsConfig",
            "train_phrasings",
            self.train_phrasings,
            lambda v: v in TRAIN_PHRASINGS,
            str(TRAIN_PHRASINGS),
        )
        check("InstructionPairsConfig", "rejected", self.rejected, lambda v: v in REJECTED, str(REJECTED))
        check("InstructionPairsConfig", "train_pairs", self.train_pairs, lambda v: v >= 1, ">= 1")
        check("InstructionPairsConfig", "validation_pairs", self.validation_pairs, lambda v: v >= 1, ">= 1")


REJECTED = ("any", "near_miss")
TRAIN_PHRASINGS = ("training", "practice")


def make_pair(
    rng: random.Random, kind: str, held_out: bool, rejected: str = "any", phrasings: str | None = None
) -> dict:
    """One instruction item as a pair: its reference reply chosen, one wrong reply rejected."""
    item = make_item(rng, kind, held_out=held_out, phrasings=phrasings)
    question, answer = item["messages"]
    wrong = rng.choice([c for i, c in enumerate(item["choices"]) if i != item["gold"]])
    if rejected == "near_miss" and kind in ("addition", "counting"):
        wrong = near_miss(rng, kind, answer["content"])
    return {
        "kind": kind,
        "prompt": [question],
        "chosen": [answer],
        "rejected": [{"role": "assistant", "content": wrong}],
    }


def near_miss(rng: random.Random, kind: str, answer: str) -> str:
    """A wrong reply one step from ``answer``: ``a + b = c`` with ``c`` off by one, or a count whose last number
    is one short or one past the right one."""
    if kind == "addition":
        terms, total = answer.split(" = ")
        value = int(total)
        return f"{terms} = {value + 1 if value == 0 else value + rng.choice((-1, 1))}"
    words = answer.split(", ")
    start = NUMBER_WORDS.index(words[0])
    stop = start + len(words) - 1 + rng.choice((-1, 1))
    return ", ".join(NUMBER_WORDS[start : stop + 1])


def generate_instruction_pairs(config: InstructionPairsConfig) -> None:
    train_rng, held_rng = random.Random(f"{config.seed}-pairs-train"), random.Random(f"{config.seed}-pairs-validation")
    splits = {
        "train": [
            make_pair(train_rng, KINDS[i % len(KINDS)], False, config.rejected, config.train_phrasings)
            for i in range(config.train_pairs)
        ],
        "validation": [
            make_pair(held_rng, KINDS[i % len(KINDS)], True, config.rejected) for i in range(config.validation_pairs)
        ],
    }
    if config.swap_labels:
        splits["train"] = [{**p, "chosen": p["rejected"], "rejected": p["chosen"]} for p in splits["train"]]
    for split, pairs in splits.items():
        rows = [{"id": f"{split}-{i}", **pair} for i, pair in enumerate(pairs)]
        write_records(join(config.output_path, split, "pairs.jsonl"), rows)
    manifest = {
        "seed": config.seed,
        "swap_labels": config.swap_labels,
        "rejected": config.rejected,
        **{s: len(p) for s, p in splits.items()},
    }
    write_atomic(join(config.output_path, "manifest.json"), json.dumps(manifest, indent=2))
