"""Multiple-choice eval tasks whose answers follow regularities that are frequent in the corpus.

Each item is ``{"id", "task", "context", "choices", "gold"}``: score every ``context + choice`` by
log-likelihood (lm-eval-harness style) and count the item correct when ``choices[gold]`` wins. Four
choices each, so chance is 25%.

===============  ===================================================  ======================
task             example context                                       gold continuation
===============  ===================================================  ======================
animal_sounds    "Tom and Mia visited the farm on Monday. There they    " moo"
                 met a kind cow, and the cow said"
opposites        "Lily looked at the two cups on Friday. One cup was    " small"
                 big, and the other cup was"
addition         "On Sunday, Ben had 3 stones. Then Zoe gave Ben 4      " 7"
                 more stones. How many stones does Ben have now? Ben
                 has"
counting         "On Tuesday, Leo counted the stars out loud: four,     " eight"
                 five, six, seven,"
===============  ===================================================  ======================

The wrappers ("visited ... on <day>. There they met", "looked at the two ... on <day>") never occur in
the training text, so their long n-grams identify planted contamination only.
"""

from __future__ import annotations

import random

from marin.corpus.domains import (
    ADJECTIVES,
    ANIMAL_SOUNDS,
    ANIMALS,
    DAYS,
    NAMES,
    NUMBER_WORDS,
    OPPOSITE_OF,
    PLACES,
    THINGS,
    singular,
)


def _choices(rng: random.Random, gold: str, pool: list[str]) -> tuple[list[str], int]:
    wrong = rng.sample([p for p in pool if p != gold], 3)
    choices = wrong + [gold]
    rng.shuffle(choices)
    return [f" {c}" for c in choices], choices.index(gold)


def animal_sounds(rng: random.Random) -> dict:
    a, b = rng.sample(NAMES, 2)
    animal = rng.choice(ANIMALS)
    context = (
        f"{a} and {b} visited the {rng.choice(PLACES)} on {rng.choice(DAYS)}. There they met a "
        f"{rng.choice(ADJECTIVES)} {animal}, and the {animal} said"
    )
    choices, gold = _choices(rng, ANIMAL_SOUNDS[animal], sorted(set(ANIMAL_SOUNDS.values())))
    return {"context": context, "choices": choices, "gold": gold}


def opposites(rng: random.Random) -> dict:
    word = rng.choice(sorted(OPPOSITE_OF))
    thing = rng.choice(THINGS)
    context = (
        f"{rng.choice(NAMES)} looked at the two {thing} on {rng.choice(DAYS)}. One {singular(thing)} was "
        f"{word}, and the other {singular(thing)} was"
    )
    choices, gold = _choices(rng, OPPOSITE_OF[word], sorted(set(OPPOSITE_OF) - {word}))
    return {"context": context, "choices": choices, "gold": gold}


def addition(rng: random.Random) -> dict:
    a, b = rng.sample(NAMES, 2)
    thing = rng.choice(THINGS)
    x, y = rng.randint(1, 9), rng.randint(1, 9)
    context = (
        f"On {rng.choice(DAYS)}, {a} had {x} {thing}. Then {b} gave {a} {y} more {thing}. "
        f"How many {thing} does {a} have now? {a} has"
    )
    pool = [str(v) for v in range(max(1, x + y - 4), x + y + 5)]
    choices, gold = _choices(rng, str(x + y), pool)
    return {"context": context, "choices": choices, "gold": gold}


def counting(rng: random.Random) -> dict:
    start = rng.randint(0, 14)
    seq = NUMBER_WORDS[start : start + 4]
    context = f"On {rng.choice(DAYS)}, {rng.choice(NAMES)} counted the {rng.choice(THINGS)} out loud: {', '.join(seq)},"
    answer = NUMBER_WORDS[start + 4]
    choices, gold = _choices(rng, answer, NUMBER_WORDS[max(0, start - 2) : start + 9])
    return {"context": context, "choices": choices, "gold": gold}


TASKS = {"animal_sounds": animal_sounds, "opposites": opposites, "addition": addition, "counting": counting}
TASK_DOMAIN = {"animal_sounds": "stories", "opposites": "stories", "addition": "arithmetic", "counting": "arithmetic"}


def make_task(name: str, rng: random.Random, n: int) -> list[dict]:
    """``n`` distinct items of one task (distinct contexts), ids ``<task>-<index>``."""
    items, seen = [], set()
    make = TASKS[name]
    while len(items) < n:
        item = make(rng)
        if item["context"] in seen:
            continue
        seen.add(item["context"])
        items.append({"id": f"{name}-{len(items):04d}", "task": name, **item})
    return items


def item_text(item: dict) -> str:
    """The text a leaked item would show: context followed by the correct answer."""
    return item["context"] + item["choices"][item["gold"]]
