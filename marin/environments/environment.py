"""An RL environment: a prompt set with verifiable answers and the rewards that score completions of it.

    env = EnvironmentConfig(prompts="environments/gsm8k-1a2b/prompts.jsonl",
                            rewards=(("numeric", 1.0), ("format", 0.1))).build("gsm8k")
    env.records[0]                  # {"id": "gsm8k-train-0", "prompt": "Natalia sold clips ...", "answer": "72"}
    env.score(env.records[0], "48 + 24 = 72\\n#### 72")   # 1.1

A prompt record is ``{"id": str, "prompt": str, <the fields its rewards read>, ...}`` (JSONL or Parquet,
any URL). Loading refuses a record without an id, a prompt or a field one of its rewards reads (``answer``
for ``numeric``/``exact``), naming the environment, the record and the field: a prompt set with no
verifiable answer never trains on zero rewards in silence. ``score`` wraps the reward functions the same
way: one that raises or returns NaN/inf is a ``RewardError`` naming environment, record, reward and the
fields it read (``on_reward_error="skip"`` drops that completion's group instead, and the RL loop counts
it).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

from marin.environments.rewards import ANSWER_FIELDS, get_reward
from marin.storage.records import read_records
from marin.tokenize.inputs import expand_record_paths
from marin.validation import check, concrete

POLICIES = ("raise", "skip")


class BadPromptRecord(ValueError):
    """A prompt record the environment cannot use; the message names environment, record and field."""


class RewardError(RuntimeError):
    """A reward function raised or returned a non-finite value."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class EnvironmentConfig:
    prompts: str | tuple[str, ...]
    """Prompt-record files (JSONL/Parquet; a directory or glob), e.g. a prompt-set step's ``prompts.jsonl``."""
    rewards: tuple[tuple[str, float], ...] = (("numeric", 1.0),)
    """(registered reward, weight) pairs; a completion's reward is the weighted sum."""
    system_prompt: str | None = None
    """A system turn before each prompt (chat models), e.g. how to mark the final answer."""
    weight: float = 1.0
    """This environment's share of each iteration's prompts (relative to the other environments)."""
    max_prompts: int | None = None
    """Use only the first this many records."""
    on_reward_error: str = "raise"
    """A reward that raises or returns NaN/inf: "raise" stops the run naming environment, record and reward;
    "skip" drops the completion's group and counts it (``skipped/reward_error``)."""
    on_long_prompt: str = "raise"
    """A prompt that leaves no room for ``max_completion_tokens`` in the model's context: "raise" names it;
    "skip" leaves the record out of the prompt set and counts it (``skipped/long_prompt``)."""
    on_empty_completion: str = "score"
    """A completion with no tokens (the model ended its turn at once): "score" lets the rewards judge it
    (counted as ``empty_completions``), "skip" drops its group (counted), "raise" stops the run."""

    def __post_init__(self):
        check("EnvironmentConfig", "rewards", self.rewards, lambda v: len(v) > 0, "at least one (name, weight)")
        known, rewards = concrete(self.rewards)  # an experiment may wrap it in versioned()
        for name, _ in rewards if known else ():
            get_reward(name)  # unknown names fail here, listing the known ones
        check("EnvironmentConfig", "weight", self.weight, lambda v: v > 0, "> 0")
        check("EnvironmentConfig", "on_reward_error", self.on_reward_error, lambda v: v in POLICIES, str(POLICIES))
        check("EnvironmentConfig", "on_long_prompt", self.on_long_prompt, lambda v: v in POLICIES, str(POLICIES))
        empty = ("score", *POLICIES)
        check("EnvironmentConfig", "on_empty_completion", self.on_empty_completion, lambda v: v in empty, str(empty))

    @property
    def required_fields(self) -> tuple[str, ...]:
        fields = {"id", "prompt"}
        for name, _ in self.rewards:
            fields.update(ANSWER_FIELDS[name])
        return tuple(sorted(fields))

    def build(self, name: str) -> Environment:
        paths = (self.prompts,) if isinstance(self.prompts, str) else tuple(self.prompts)
        return Environment(
            name, self, read_prompt_set(paths, env=name, fields=self.required_fields, limit=self.max_prompts)
        )


def read_prompt_set(
    paths: Sequence[str], *, env: str, fields: Sequence[str], limit: int | None = None
) -> list[dict[str, Any]]:
    """The records of ``paths`` (each expanded like the tokenizer's inputs), checked to carry ``fields``
    (non-empty) and unique string ids."""
    records: list[dict[str, Any]] = []
    seen: set[str] = set()
    for spec in paths:
        for url in expand_record_paths(spec):
            for line, record in enumerate(read_records(url)):
                where = f"environment {env!r}, record {record.get('id', f'#{line}')!r} ({url}, row {line})"
                _check_record(record, fields, where)
                if record["id"] in seen:
                    raise BadPromptRecord(f"{where}: field 'id' repeats an earlier record's id")
                seen.add(record["id"])
                records.append(record)
                if limit is not None and len(records) >= limit:
                    return records
    if not records:
        raise BadPromptRecord(f"environment {env!r}: no prompt records in {list(paths)}")
    return records


def _check_record(record: Mapping[str, Any], fields: Sequence[str], where: str) -> None:
    for field in fields:
        value = record.get(field)
        if value is None or (isinstance(value, str) and not value.strip()):
            have = sorted(record)
            raise BadPromptRecord(f"{where}: no field {field!r} (a verifiable answer is required); it has {have}")
    for field in ("id", "prompt"):
        if not isinstance(record[field], str):
            raise BadPromptRecord(f"{where}: field {field!r} must be a string, got {type(record[field]).__name__}")


@dataclasses.dataclass
class Environment:
    name: str
    config: EnvironmentConfig
    records: list[dict[str, Any]]

    def score(self, record: Mapping[str, Any], completion: str) -> float:
        """The weighted sum of the environment's rewards; ``RewardError`` (naming all it knows) when one
        raises or is not a finite number."""
        total = 0.0
        for name, weight in self.config.rewards:
            where = f"environment {self.name!r}, record {record['id']!r}: reward {name!r}"
            read = ", ".join(f"{f}={record.get(f)!r}" for f in ANSWER_FIELDS[name]) or "no fields"
            try:
                value = float(get_reward(name)(record, completion))
            except Exception as e:
                raise RewardError(f"{where} raised {type(e).__name__}: {e} (reading {read})") from e
            if not math.isfinite(value):
                raise RewardError(f"{where} returned {value} (reading {read}; completion {completion[:80]!r})")
            total += weight * value
        return total
