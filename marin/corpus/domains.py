"""The two text domains of the bundled corpus: short stories and arithmetic/code-like text.

Both are built from templates with many slots, so two random documents share few word 5-grams (they
are not near-duplicates of each other), while a handful of regularities repeat thousands of times. Those
regularities are what the eval tasks (``marin.corpus.tasks``) ask about, so a tiny model trained on the
corpus can beat chance:

- every animal always makes the same sound ("the cow said moo");
- adjectives come in fixed opposite pairs ("one cup was big, and the other cup was small");
- sums are right ("Tom had 3 apples. Mia gave him 4 more. Now Tom has 7 apples.", "3 + 4 = 7");
- counting goes on in order ("one, two, three, four, five").

The eval prompts wrap the same regularities in phrasings that never occur in the training text
("... on Monday. There they met ..."), so decontamination by long n-grams finds only the documents
that were deliberately planted with eval items.
"""

from __future__ import annotations

import random

NAMES = [
    "Tom",
    "Mia",
    "Sam",
    "Lily",
    "Ben",
    "Zoe",
    "Max",
    "Ana",
    "Leo",
    "Ivy",
    "Jack",
    "Emma",
    "Noah",
    "Ella",
    "Finn",
    "Ruby",
    "Omar",
    "Nina",
    "Hugo",
    "Luna",
    "Eli",
    "Rosa",
    "Kai",
    "Maya",
    "Theo",
    "Cora",
    "Ravi",
    "Jade",
    "Owen",
    "Sara",
]
ANIMAL_SOUNDS = {
    "cow": "moo",
    "dog": "woof",
    "cat": "meow",
    "duck": "quack",
    "sheep": "baa",
    "pig": "oink",
    "frog": "ribbit",
    "owl": "hoot",
    "lion": "roar",
    "bee": "buzz",
    "horse": "neigh",
    "mouse": "squeak",
    "snake": "hiss",
    "crow": "caw",
}
ANIMALS = sorted(ANIMAL_SOUNDS)
OPPOSITES = {
    "big": "small",
    "hot": "cold",
    "fast": "slow",
    "happy": "sad",
    "tall": "short",
    "loud": "quiet",
    "old": "new",
    "wet": "dry",
    "light": "dark",
    "full": "empty",
    "soft": "hard",
    "clean": "dirty",
}
OPPOSITE_OF = {**OPPOSITES, **{v: k for k, v in OPPOSITES.items()}}
ADJECTIVES = [
    "little",
    "brave",
    "curious",
    "sleepy",
    "kind",
    "clever",
    "shy",
    "funny",
    "gentle",
    "busy",
    "grumpy",
    "cheerful",
    "tiny",
    "fluffy",
    "spotted",
    "striped",
]
PLACES = [
    "forest",
    "farm",
    "village",
    "garden",
    "meadow",
    "river bank",
    "mountain",
    "park",
    "beach",
    "barn",
    "town",
    "valley",
    "pond",
    "hill",
    "castle",
    "library",
]
THINGS = [
    "apples",
    "stones",
    "shells",
    "cups",
    "books",
    "hats",
    "balls",
    "flowers",
    "coins",
    "cookies",
    "pencils",
    "boxes",
    "leaves",
    "stars",
    "buttons",
    "kites",
]
ACTIVITIES = [
    "play in the sun",
    "look for berries",
    "build little houses",
    "sing songs",
    "chase butterflies",
    "read old books",
    "dig in the sand",
    "climb tall trees",
    "paint pictures",
    "watch the clouds",
    "collect shiny stones",
    "bake sweet bread",
]
FEELINGS = ["happy", "proud", "tired", "surprised", "thankful", "excited", "calm", "glad"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
NUMBER_WORDS = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
    "twenty",
]
BOILERPLATE = [
    "Read more stories like this one in our library.",
    "Share this story with a friend.",
    "Copyright the story garden. All rights reserved.",
]


def singular(thing: str) -> str:
    return thing[:-2] if thing.endswith("xes") else thing[:-1]


def _pick(rng: random.Random, seq: list[str], k: int) -> list[str]:
    return rng.sample(seq, k)


def story(rng: random.Random) -> str:
    """A 5-8 paragraph story; paragraphs are separated by blank lines."""
    name, friend = _pick(rng, NAMES, 2)
    animal, other = _pick(rng, ANIMALS, 2)
    adj, adj2 = _pick(rng, ADJECTIVES, 2)
    place = rng.choice(PLACES)
    word = rng.choice(sorted(OPPOSITE_OF))
    thing = rng.choice(THINGS)
    paras = [
        rng.choice(
            [
                f"Once upon a time, there was a {adj} {animal} named {name}. {name} lived in the {place} "
                f"with a {adj2} {other} called {friend}.",
                f"Long ago, in a {adj} {place}, lived {name} the {animal}. {name} had a friend, {friend} the {other}, "
                f"who was very {adj2}.",
                f"{name} was a {adj} {animal} who lived near the {place}. Every day {name} went to see {friend}, "
                f"a {adj2} {other}.",
            ]
        ),
        rng.choice(
            [
                f"Every morning the {animal} said {ANIMAL_SOUNDS[animal]} and the {other} said {ANIMAL_SOUNDS[other]}.",
                f"When {name} was {rng.choice(FEELINGS)}, the {animal} said {ANIMAL_SOUNDS[animal]} very loudly.",
                f"{friend} laughed, because the {other} said {ANIMAL_SOUNDS[other]} and the {animal} said "
                f"{ANIMAL_SOUNDS[animal]} at the same time.",
            ]
        ),
        f"{name} and {friend} liked to {rng.choice(ACTIVITIES)}. Sometimes they would also "
        f"{rng.choice(ACTIVITIES)} until the sun went down.",
        rng.choice(
            [
                f"One day {name} found two {thing} by the {rng.choice(PLACES)}. One {singular(thing)} was {word}, "
                f"and the other {singular(thing)} was {OPPOSITE_OF[word]}.",
                f"In the {rng.choice(PLACES)} there were two {thing}. One {singular(thing)} was {word}, and the other "
                f"{singular(thing)} was {OPPOSITE_OF[word]}. {name} took the {word} one.",
            ]
        ),
    ]
    if rng.random() < 0.7:
        a2 = rng.choice(ANIMALS)
        paras.append(
            f"Then a {rng.choice(ADJECTIVES)} {a2} came by. The {a2} said {ANIMAL_SOUNDS[a2]}, and "
            f"{name} said hello to the {a2}."
        )
    if rng.random() < 0.5:
        w2 = rng.choice(sorted(OPPOSITE_OF))
        paras.append(
            f"{friend} said the day was {w2}, but {name} thought it was {OPPOSITE_OF[w2]}. "
            f"They both felt {rng.choice(FEELINGS)}."
        )
    paras.append(
        rng.choice(
            [
                f"In the end, {name} and {friend} were {rng.choice(FEELINGS)} and went home to the {place}.",
                f"{name} learned that friends help each other, and {friend} agreed.",
                f"That night {name} the {animal} slept well, dreaming of the {place}.",
            ]
        )
    )
    paras.append(rng.choice(["The end.", "And they lived happily ever after.", "The end."]))
    if rng.random() < 0.15:
        paras.append(rng.choice(BOILERPLATE))
    return "\n\n".join(paras)


def _word_problem(rng: random.Random) -> str:
    name, friend = _pick(rng, NAMES, 2)
    thing = rng.choice(THINGS)
    x, y = rng.randint(1, 9), rng.randint(1, 9)
    return rng.choice(
        [
            f"{name} had {x} {thing}. {friend} gave {name} {y} more {thing}. Now {name} has {x + y} {thing}.",
            f"There are {x} {thing} in a box and {y} {thing} on the table. Together there are {x + y} {thing}.",
            f"{name} found {x} {thing} and {friend} found {y} {thing}. They found {x + y} {thing} in all.",
        ]
    )


def _counting(rng: random.Random) -> str:
    start = rng.randint(0, 12)
    length = rng.randint(5, 8)
    seq = ", ".join(NUMBER_WORDS[start : start + length])
    return rng.choice([f"Let us count: {seq}.", f"{rng.choice(NAMES)} counted {rng.choice(THINGS)}: {seq}."])


def _worksheet(rng: random.Random) -> str:
    lines = [f"Worksheet {rng.randint(1, 99999)}: {rng.choice(['addition', 'sums', 'practice'])}."]
    for _ in range(rng.randint(4, 8)):
        a, b = rng.randint(0, 20), rng.randint(0, 20)
        op = rng.choice(["+", "+", "-"])
        if op == "-" and b > a:
            a, b = b, a
        lines.append(f"{a} {op} {b} = {a + b if op == '+' else a - b}")
    return "\n".join(lines)


def _code(rng: random.Random) -> str:
    fn = rng.choice(["add", "plus", "total", "combine", "sum_two"])
    k, v = rng.randint(1, 9), rng.randint(1, 9)
    var = rng.choice(["x", "n", "count", "value", "items"])
    return "\n".join(
        [
            f"def {fn}_{k}({var}):",
            f"    # adds {NUMBER_WORDS[k]} to {var}",
            f"    return {var} + {k}",
            "",
            f"print({fn}_{k}({v}))  # prints {v + k}",
        ]
    )


def arithmetic(rng: random.Random) -> str:
    """A document of 3-6 blocks: word problems, counting, worksheets and tiny programs."""
    makers = [_word_problem, _word_problem, _counting, _worksheet, _code]
    return "\n\n".join(rng.choice(makers)(rng) for _ in range(rng.randint(3, 6)))


DOMAINS = {"stories": story, "arithmetic": arithmetic}
