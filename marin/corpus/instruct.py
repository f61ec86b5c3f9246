"""Bundled instruction data: question -> answer conversations over the corpus's own facts and arithmetic.

    generate_instructions(InstructionsConfig(output_path="/tmp/instruct"))
    # train/instructions.jsonl        {"id", "kind", "messages": [user question, assistant answer]}
    # validation/instructions.jsonl   held out: questions phrased as no training item is, plus "choices"/"gold"
    # practice/instructions.jsonl     phrased as post-training practises (neither SFT data nor held out)

=============  ========================================  =====================
kind           user                                      assistant
=============  ========================================  =====================
animal_sound   What does the duck say?                   The duck says quack.
opposite       What is the opposite of big?              The opposite of big is small.
addition       What is 3 + 4?                            3 + 4 = 7
counting       Count from four to seven.                 four, five, six, seven
=============  ========================================  =====================

A base model trained on the corpus knows the facts (animal sounds, opposite pairs, sums, counting) but
has never seen a question or the chat template; fine-tuning teaches the format. The held-out items are
phrased in ways no training item is (``HELD_OUT_QUESTIONS``), so none appears verbatim in training; they
measure whether the instruction format carries over: exact match of the generated reply, and
log-likelihood accuracy among four candidate replies built like the gold one (``choices[gold]`` is the
reference reply). (Asking about facts no SFT item mentions was tried too: the quickstart's 2-layer model
then answers with a fact it was fine-tuned on, e.g. "The snake says hiss." for the frog.) The practice split asks
the same facts in a third set of phrasings (``PRACTICE_QUESTIONS``), the ones the quickstart's RL prompts and DPO
pairs use, so the held-out items stay unseen by every phase.
"""

from __future__ import annotations

import dataclasses
import json
import random

from marin.corpus.domains import ANIMAL_SOUNDS, ANIMALS, NUMBER_WORDS, OPPOSITE_OF
from marin.storage import join, write_atomic
from marin.storage.records import write_records
from marin.validation import check

KINDS = ("animal_sound", "opposite", "addition", "counting")
QUESTIONS = {
    "animal_sound": ["What does the {x} say?", "What sound does a {x} make?", "Which sound does the {x} make?"],
    "opposite": ["What is the opposite of {x}?", "Tell me the opposite of {x}.", "Give the opposite of the word {x}."],
    "addition": ["What is {a} + {b}?", "Add {a} and {b}.", "Compute {a} + {b}."],
    "counting": ["Count from {a} to {b}.", "Please count from {a} to {b}.", "Count up from {a} to {b}."],
}

# Phrasings only the held-out split uses.
HELD_OUT_QUESTIONS = {
    "animal_sound": ["What noise does a {x} make?", "Tell me what a {x} says."],
    "opposite": ["Which word is the opposite of {x}?", "What word means the opposite of {x}?"],
    "addition": ["How much is {a} + {b}?", "What do you get when you add {a} and {b}?"],
    "counting": ["Can you count from {a} to {b}?", "Count, starting at {a} and ending at {b}."],
}
# Phrasings neither the SFT data nor the held-out items use: what post-training practises on (the quickstart's RL
# prompts and DPO pairs), so that its gains on the held-out items are carried over, not questions seen before.
PRACTICE_QUESTIONS = {
    "animal_sound": ["Which noise comes from a {x}?", "Say the sound of the {x}.", "How does a {x} sound?"],
    "opposite": ["Name the opposite of {x}.", "What is the reverse of {x}?", "Opposite of {x}, please."],
    "addition": ["What does {a} + {b} make?", "Sum up {a} and {b}.", "Please add {a} to {b}."],
    "counting": [
        "List the numbers from {a} to {b}.",
        "Say every number from {a} up to {b}.",
        "Starting with {a}, count to {b}.",
    ],
}
PHRASINGS = {"training": QUESTIONS, "practice": PRACTICE_QUESTIONS, "held_out": HELD_OUT_QUESTIONS}
"""Which questions a split asks: the SFT data ``training``, post-training ``practice``, the eval ``held_out``."""
FACTS = {
    "animal_sound": ANIMALS,
    "opposite": sorted(OPPOSITE_OF),
    "addition": [(a, b) for a in range(10) for b in range(10)],
    "counting": list(range(13)),
}


def _animal(rng: random.Random, animal: str) -> tuple[str, list[str]]:
    sounds = sorted(set(ANIMAL_SOUNDS.values()) - {ANIMAL_SOUNDS[animal]})
    wrong = rng.sample(sounds, 3)
    return f"The {animal} says {ANIMAL_SOUNDS[animal]}.", [f"The {animal} says {w}." for w in wrong]


def _opposite(rng: random.Random, word: str) -> tuple[str, list[str]]:
    wrong = rng.sample(sorted(set(OPPOSITE_OF) - {word, OPPOSITE_OF[word]}), 3)
    return f"The opposite of {word} is {OPPOSITE_OF[word]}.", [f"The opposite of {word} is {w}." for w in wrong]


def make_item(rng: random.Random, kind: str, held_out: bool = False, phrasings: str | None = None) -> dict:
    """One conversation of ``kind`` with its reference reply and three wrong replies of the same form;
    ``held_out`` phrases the question as only the held-out split does (``phrasings`` names any of ``PHRASINGS``)."""
    template = rng.choice(PHRASINGS[phrasings or ("held_out" if held_out else "training")][kind])
    fact = rng.choice(FACTS[kind])
    if kind == "animal_sound":
        answer, wrong = _animal(rng, fact)
        question = template.format(x=fact)
    elif kind == "opposite":
        answer, wrong = _opposite(rng, fact)
        question = template.format(x=fact)
    elif kind == "addition":
        a, b = fact
        question, answer = template.format(a=a, b=b), f"{a} + {b} = {a + b}"
        wrong = [f"{a} + {b} = {v}" for v in rng.sample([v for v in range(19) if v != a + b], 3)]
    else:
        start = fact
        stop = start + rng.randint(3, 6)
        question = template.format(a=NUMBER_WORDS[start], b=NUMBER_WORDS[stop])
        answer = ", ".join(NUMBER_WORDS[start : stop + 1])
        wrong = [", ".join(NUMBER_WORDS[start + d : stop + 1 + d]) for d in (1, 2)] + [
            ", ".join(NUMBER_WORDS[start:stop])
        ]
    choices = [*wrong, answer]
    rng.shuffle(choices)
    return {
        "kind": kind,
        "messages": [{"role": "user", "content": question}, {"role": "assistant", "content": answer}],
        "choices": choices,
        "gold": choices.index(answer),
    }


@dataclasses.dataclass(frozen=True, kw_only=True)
class InstructionsConfig:
    output_path: str
    seed: int = 0
    train_items: int = 4000
    generator_version: int = 3
    """Bumped whenever ``make_item`` changes what it writes (steps are identified by configs, not code).
    2: held-out items differ from training ones by phrasing; 3: a practice split."""
    validation_items: int = 200
    """Held-out items (50 per kind by default), phrased as ``HELD_OUT_QUESTIONS``, from a separate random stream."""
    practice_items: int = 200
    """Items phrased as ``PRACTICE_QUESTIONS`` (what post-training practises on), from a third random stream: how
    well a model answers the questions its RL phase trained on, beside the held-out ones."""

    def __post_init__(self):
        check("InstructionsConfig", "train_items", self.train_items, lambda v: v >= 1, ">= 1")
        check("InstructionsConfig", "practice_items", self.practice_items, lambda v: v >= 0, ">= 0")
        check(
            "InstructionsConfig",
            "validation_items",
            self.validation_items,
            lambda v: v >= len(KINDS),
            f">= {len(KINDS)} (one per kind)",
        )


def generate_instructions(config: InstructionsConfig) -> None:
    train_rng, held_rng = random.Random(f"{config.seed}-train"), random.Random(f"{config.seed}-validation")
    train = [make_item(train_rng, KINDS[i % len(KINDS)]) for i in range(config.train_items)]
    held = [make_item(held_rng, KINDS[i % len(KINDS)], held_out=True) for i in range(config.validation_items)]
    practice_rng = random.Random(f"{config.seed}-practice")
    practice = [
        make_item(practice_rng, KINDS[i % len(KINDS)], phrasings="practice") for i in range(config.practice_items)
    ]
    for split, items in (("train", train), ("validation", held), ("practice", practice)):
        rows = [{"id": f"{split}-{i}", **item} for i, item in enumerate(items)]
        if split == "train":
            rows = [{k: v for k, v in row.items() if k not in ("choices", "gold")} for row in rows]
        write_records(join(config.output_path, split, "instructions.jsonl"), rows)
    manifest = {
        "seed": config.seed,
        "generator_version": config.generator_version,
        "train": len(train),
        "validation": len(held),
        "practice": len(practice),
    }
    write_atomic(join(config.output_path, "manifest.json"), json.dumps(manifest, indent=2))
