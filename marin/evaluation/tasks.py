"""Multiple-choice tasks scored by log-likelihood, with lm-eval-harness semantics.

A task is a JSONL file of items ``{"context": str, "choices": [str, ...], "gold": int}`` (``query`` is
accepted for ``context``), optionally described by a YAML file:

    name: arithmetic_mc
    path: arithmetic.jsonl          # relative to the YAML file, or any URL
    num_fewshot: 3
    fewshot_seed: 1234
    target_delimiter: ""            # put between context and choice (the bundled tasks' choices carry the space)
    fewshot_delimiter: "\\n\\n"

For each item the prompt is ``k`` other items (drawn with ``fewshot_seed``, never the item itself) written
as ``context + delimiter + correct choice``, joined by ``fewshot_delimiter``, then the item's context.
Every choice is scored as a continuation; ``acc`` counts items whose gold choice has the highest
log-likelihood, ``acc_norm`` the same with log-likelihood divided by the choice's UTF-8 byte length.
Each comes with its standard error and a 95% Wilson confidence interval.
"""

from __future__ import annotations

import dataclasses
import math
import random
from typing import Any

from marin.storage import join, read_text
from marin.storage.records import read_records


@dataclasses.dataclass(frozen=True)
class MultipleChoiceTask:
    name: str
    path: str
    num_fewshot: int = 0
    fewshot_seed: int = 1234
    target_delimiter: str = ""
    fewshot_delimiter: str = "\n\n"
    limit: int | None = None
    """Score only the first ``limit`` items (for quick runs)."""

    def __post_init__(self):
        if self.num_fewshot < 0:
            raise ValueError(f"task {self.name}: num_fewshot must be >= 0, got {self.num_fewshot}")


def load_task_yaml(url: str) -> MultipleChoiceTask:
    import yaml

    spec = yaml.safe_load(read_text(url))
    if not isinstance(spec, dict) or "name" not in spec or "path" not in spec:
        raise ValueError(f"{url}: a task file needs at least 'name' and 'path'")
    path = spec["path"]
    if "://" not in path and not path.startswith("/"):
        path = join(url.rsplit("/", 1)[0], path)
    fields = {f.name for f in dataclasses.fields(MultipleChoiceTask)}
    unknown = set(spec) - fields
    if unknown:
        raise ValueError(f"{url}: unknown task fields {sorted(unknown)}; known: {sorted(fields)}")
    return MultipleChoiceTask(**{**spec, "path": path})


def load_items(task: MultipleChoiceTask) -> list[dict[str, Any]]:
    items = []
    for record in read_records(task.path):
        context = record.get("context", record.get("query"))
        choices, gold = record.get("choices"), record.get("gold")
        if not isinstance(context, str) or not isinstance(choices, list) or len(choices) < 2:
            raise ValueError(f"{task.path}: item {len(items)} needs a 'context' string and a list of 2+ 'choices'")
        if not isinstance(gold, int) or not 0 <= gold < len(choices):
            raise ValueError(f"{task.path}: item {len(items)} has gold {gold!r}, expected an index into its choices")
        items.append({"context": context, "choices": [str(c) for c in choices], "gold": gold})
    return items


def build_prompts(task: MultipleChoiceTask, items: list[dict[str, Any]]) -> list[str]:
    """The (few-shot) prompt of each item, deterministic for a given ``fewshot_seed``."""
    prompts = []
    for index, item in enumerate(items):
        rng = random.Random(f"{task.fewshot_seed}:{index}")
        pool = [i for i in range(len(items)) if i != index]
        shots = rng.sample(pool, min(task.num_fewshot, len(pool)))
        parts = [items[i]["context"] + task.target_delimiter + items[i]["choices"][items[i]["gold"]] for i in shots]
        prompts.append(task.fewshot_delimiter.join(parts + [item["context"]]))
    return prompts


def split_context_continuation(encode, context: str, continuation: str) -> tuple[list[int], list[int]]:
    """lm-eval's tokenization: trailing spaces of the context move to the continuation, and the
    continuation's tokens are those of ``encode(context + continuation)`` after ``encode(context)``."""
    stripped = context.rstrip(" ")
    continuation = context[len(stripped) :] + continuation
    whole = encode(stripped + continuation)
    context_ids = encode(stripped)
    return context_ids, whole[len(context_ids) :]


def accuracy_stats(correct: list[bool]) -> dict[str, float]:
    """Mean, standard error and 95% Wilson interval of a list of hits."""
    n = len(correct)
    p = sum(correct) / n
    z = 1.959964
    center = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return {"value": p, "stderr": math.sqrt(p * (1 - p) / max(n - 1, 1)), "ci95": [center - half, center + half]}


def score_task(task: MultipleChoiceTask, scorer, encode, bos: int) -> dict[str, Any]:
    """acc / acc_norm (with stderr and CI) of ``task``; ``bos`` is prepended to every context."""
    items = load_items(task)[: task.limit]
    prompts = build_prompts(task, items)
    requests, owners = [], []
    for index, (item, prompt) in enumerate(zip(items, prompts)):
        for choice in item["choices"]:
            ctx, cont = split_context_continuation(encode, prompt, task.target_delimiter + choice)
            requests.append(([bos, *ctx], cont))
            owners.append(index)
    scores = scorer.loglikelihood(requests)
    per_item: list[list[float]] = [[] for _ in items]
    for index, (logp, _) in zip(owners, scores):
        per_item[index].append(logp)
    acc, acc_norm = [], []
    for item, logps in zip(items, per_item):
        lengths = [max(1, len((task.target_delimiter + c).encode("utf-8"))) for c in item["choices"]]
        acc.append(max(range(len(logps)), key=logps.__getitem__) == item["gold"])
        normed = [lp / n for lp, n in zip(logps, lengths)]
        acc_norm.append(max(range(len(normed)), key=normed.__getitem__) == item["gold"])
    chance = sum(1 / len(item["choices"]) for item in items) / len(items)
    return {"items": len(items), "num_fewshot": task.num_fewshot, "chance": chance,
            "acc": accuracy_stats(acc), "acc_norm": accuracy_stats(acc_norm)}
