"""Verifiable rewards: pure functions of (prompt record, completion text), in a small registry.

    reward = get_reward("numeric")
    reward({"id": "gsm8k-test-0", "prompt": "...", "answer": "18"}, "9 * 2 = 18\\n#### 18")   # 1.0
    reward({"id": "gsm8k-test-0", "prompt": "...", "answer": "18"}, "She makes $26.")          # 0.0

=========  ============================================================================================
name       1.0 when
=========  ============================================================================================
numeric    the completion's final answer (``answers.final_answer``: ``####``, ``\\boxed{}``, else the last
           number) equals the final answer of the record's ``answer`` (``"72"``, or ``"3 + 4 = 7"``) exactly
exact      the completion equals the record's ``answer`` as a string (surrounding whitespace ignored)
format     the completion marks its answer (a ``#### ...`` line or a ``\\boxed{...}``), right or wrong
=========  ============================================================================================

A reward sees the record as the prompt set stores it, so a reward can use any field; the ones above read
``answer``. ``register_reward`` adds one (``@register_reward("contains")``). An environment combines
rewards with weights (``EnvironmentConfig.rewards``), as TRL's ``reward_funcs``/``reward_weights`` do.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from marin.environments.answers import final_answer, marked_answer, numbers_equal

RewardFn = Callable[[Mapping[str, Any], str], float]

REWARDS: dict[str, RewardFn] = {}
ANSWER_FIELDS: dict[str, tuple[str, ...]] = {}
"""The record fields each reward reads: a prompt set lacking one is refused when it is loaded."""


def register_reward(name: str, fields: tuple[str, ...] = ()) -> Callable[[RewardFn], RewardFn]:
    """Register ``fn(record, completion) -> float`` under ``name``; ``fields`` are the record fields it needs."""

    def register(fn: RewardFn) -> RewardFn:
        if name in REWARDS:
            raise ValueError(f"reward {name!r} is already registered")
        REWARDS[name] = fn
        ANSWER_FIELDS[name] = fields
        return fn

    return register


def get_reward(name: str) -> RewardFn:
    try:
        return REWARDS[name]
    except KeyError:
        raise KeyError(f"unknown reward {name!r}; known: {sorted(REWARDS)}") from None


@register_reward("numeric", fields=("answer",))
def numeric_reward(record: Mapping[str, Any], completion: str) -> float:
    return float(numbers_equal(final_answer(completion), final_answer(str(record["answer"]))))


@register_reward("exact", fields=("answer",))
def exact_reward(record: Mapping[str, Any], completion: str) -> float:
    return float(completion.strip() == str(record["answer"]).strip())


@register_reward("format")
def format_reward(record: Mapping[str, Any], completion: str) -> float:
    return float(marked_answer(completion) is not None)
