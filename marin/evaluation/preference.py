"""Preference eval: on held-out pairs, does the model prefer the chosen reply?

    score_preferences(scorer, chat, pairs)                              # the model alone
    score_preferences(scorer, chat, pairs, reference=ref_scorer, beta=0.1)  # and DPO's implicit reward

Each pair (any shape ``marin.chat.preference`` reads) is rendered with the chat template as DPO trains on it
(``encode_pairs``: the prompt shared, each reply with its end-of-turn token), and each reply is scored by its
summed log-probability given the prompt. Reported per set:

- ``accuracy``: share of pairs with ``log p(chosen) > log p(rejected)`` (ties count as misses), with its
  standard error and 95% interval; ``mean_margin``: mean ``log p(chosen) - log p(rejected)`` in nats;
- with a ``reference`` (the model DPO started from): ``reward_accuracy`` and ``reward_margin``, DPO's implicit
  reward ``beta * (log p - log p_ref)`` compared as TRL's ``rewards/accuracies`` and ``rewards/margins`` are,
  on held-out pairs instead of training batches.

The model alone answers "does it prefer the better reply?" for any checkpoint (before DPO as after); the
reward needs the reference and says how far DPO moved the preference from where it started.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from marin.chat.preference import normalize_preference
from marin.chat.preference_cache import encode_pairs
from marin.chat.template import ChatTokenizer
from marin.evaluation.scoring import Scorer
from marin.evaluation.stats import rate
from marin.storage.records import read_records
from marin.tokenize.inputs import expand_record_paths


def load_pairs(spec: str, limit: int | None) -> list[dict]:
    """Normalized pairs from record files, directories or globs, the first ``limit``."""
    pairs: list[dict] = []
    for url in expand_record_paths(spec):
        for record in read_records(url):
            pairs += normalize_preference(record)
            if limit is not None and len(pairs) >= limit:
                return pairs[:limit]
    return pairs


def reply_logps(scorer: Scorer, encoded: Sequence[tuple[np.ndarray, np.ndarray, int]]) -> np.ndarray:
    """[pairs, 2] summed log-probabilities of each reply given its prompt."""
    requests = [
        (ids[:prompt_len].tolist(), ids[prompt_len:].tolist())
        for chosen, rejected, prompt_len in encoded
        for ids in (chosen, rejected)
    ]
    return np.asarray([score for score, _ in scorer.loglikelihood(requests)], np.float64).reshape(-1, 2)


def score_preferences(
    scorer: Scorer,
    chat: ChatTokenizer,
    pairs: Sequence[dict],
    *,
    reference: Scorer | None = None,
    beta: float = 0.1,
) -> dict:
    """The metrics of the module docstring for ``pairs`` (normalized)."""
    if not pairs:
        raise ValueError("preference eval: no pairs to score")
    encoded = encode_pairs(chat, pairs)
    logps = reply_logps(scorer, encoded)
    margins = logps[:, 0] - logps[:, 1]
    result = {
        "pairs": len(pairs),
        "accuracy": rate(margins > 0),
        "hits": [int(m > 0) for m in margins],  # per pair, in order: phases compare on the same pairs
        "mean_margin": float(margins.mean()),
        "logps": {"chosen": float(logps[:, 0].mean()), "rejected": float(logps[:, 1].mean())},
    }
    if reference is not None:
        rewards = beta * (logps - reply_logps(reference, encoded))
        reward_margins = rewards[:, 0] - rewards[:, 1]
        result |= {
            "beta": beta,
            "reward_accuracy": rate(reward_margins > 0),
            "reward_margin": float(reward_margins.mean()),
            "rewards": {"chosen": float(rewards[:, 0].mean()), "rejected": float(rewards[:, 1].mean())},
        }
    return result
