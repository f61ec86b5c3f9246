"""Multiple-choice tasks scored by log-likelihood, with lm-eval-harness semantics.

A task's items come from a JSONL file of ``{"context": str, "choices": [str, ...], "gold": int}``
(``query`` is accepted for ``context``), or from a Hugging Face ``datasets`` data set. A YAML file
describes a task:

    name: arithmetic_mc
    path: arithmetic.jsonl          # relative to the YAML file, or any URL
    num_fewshot: 3
    fewshot_seed: 1234
    target_delimiter: ""            # put between context and choice (the bundled tasks' choices carry the space)
    fewshot_delimiter: "\\n\\n"

or, for a data set (read with ``datasets.load_dataset(dataset, subset, split=, revision=, data_files=)``),
with a simplified form of lm-eval's ``doc_to_text`` / ``doc_to_choice`` / ``doc_to_target``:

    name: arc_easy
    dataset: allenai/ai2_arc        # a hub repo (needs the hub), or "parquet"/"json" with data_files
    subset: ARC-Easy
    split: test
    revision: main                  # better a commit hash: a branch can change under you
    fewshot_split: train            # shots come from here (default: the scored split, minus the item)
    doc_to_text: "Question: {question}\\nAnswer:"   # str.format over the row; {a[b]} reaches nested fields
    doc_to_choice: choices.text     # a (dotted) field holding the choice strings, or a literal YAML list
    doc_to_target: answerKey        # a (dotted) field: an index, a label in target_labels, or a choice's text
    target_labels: choices.label    # the labels answerKey is one of ("A", "B", ...)
    target_delimiter: " "

For each item the prompt is ``k`` other items (drawn with ``fewshot_seed``, never the item itself) written
as ``context + delimiter + correct choice``, joined by ``fewshot_delimiter``, then the item's context.
Every choice is scored as a continuation; ``acc`` counts items whose gold choice has the highest
log-likelihood, ``acc_norm`` the same with log-likelihood divided by the choice's length in characters
(lm-eval's ``acc_norm``).
Each comes with its standard error and a 95% Wilson confidence interval.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

from marin.evaluation.stats import rate
from marin.storage import is_absolute, join, read_text
from marin.storage.records import read_records


@dataclasses.dataclass(frozen=True)
class MultipleChoiceTask:
    name: str
    path: str | None = None
    """JSONL (or any record file) of items; exactly one of ``path`` and ``dataset`` is set."""
    num_fewshot: int = 0
    fewshot_seed: int = 1234
    target_delimiter: str = ""
    fewshot_delimiter: str = "\n\n"
    limit: int | None = None
    """Score only the first ``limit`` items (for quick runs)."""
    dataset: str | None = None
    """``datasets.load_dataset``'s path: a hub repo id (``hf://datasets/`` prefix optional), a packaged
    builder (``parquet``, ``json``, ``csv``) with ``data_files``, or a local directory of data files."""
    subset: str | None = None
    """The data set's configuration (``load_dataset``'s ``name``)."""
    split: str = "validation"
    revision: str | None = None
    """A hub commit/branch/tag: pin it, or the task can change under you."""
    data_files: Any = None
    """For packaged builders: a file, a list, or ``{split: files}``; paths relative to the YAML file."""
    fewshot_split: str | None = None
    """Draw few-shot examples from this split (all its items) instead of the scored one."""
    doc_to_text: str | None = None
    """``str.format`` template over a row (default: its ``context`` or ``query`` field)."""
    doc_to_choice: str | tuple[str, ...] | list[str] | None = None
    """A dotted field holding the list of choices, or the literal choices (default: ``choices``)."""
    doc_to_target: str | None = None
    """A dotted field holding the answer (default: ``gold``): an int index, a label in ``target_labels``,
    the text of a choice, or a digit string."""
    target_labels: str | None = None
    """A dotted field holding one label per choice (ARC's ``choices.label``), which the answer names."""

    def __post_init__(self):
        if self.num_fewshot < 0:
            raise ValueError(f"task {self.name}: num_fewshot must be >= 0, got {self.num_fewshot}")
        if (self.path is None) == (self.dataset is None):
            raise ValueError(
                f"task {self.name}: set exactly one of path ({self.path!r}) and dataset ({self.dataset!r})"
            )
        if self.fewshot_split is not None and self.dataset is None:
            raise ValueError(f"task {self.name}: fewshot_split={self.fewshot_split!r} needs a dataset")


def _relative_to(base: str, path: str) -> str:
    return path if is_absolute(path) else join(base, path)


def load_task_yaml(url: str) -> MultipleChoiceTask:
    import yaml

    spec = yaml.safe_load(read_text(url))
    if not isinstance(spec, dict) or "name" not in spec or not ({"path", "dataset"} & set(spec)):
        raise ValueError(f"{url}: a task file needs at least 'name' and 'path' or 'dataset'")
    fields = {f.name for f in dataclasses.fields(MultipleChoiceTask)}
    unknown = set(spec) - fields
    if unknown:
        raise ValueError(f"{url}: unknown task fields {sorted(unknown)}; known: {sorted(fields)}")
    base = url.rsplit("/", 1)[0]
    if spec.get("path"):
        spec["path"] = _relative_to(base, spec["path"])
    # only ./ and ../ make a data set path relative to the YAML: a bare "owner/name" is a hub repo id
    if str(spec.get("dataset", "")).startswith(("./", "../")):
        spec["dataset"] = join(base, spec["dataset"].removeprefix("./"))
    files = spec.get("data_files")
    if isinstance(files, str):
        spec["data_files"] = _relative_to(base, files)
    elif isinstance(files, list):
        spec["data_files"] = [_relative_to(base, f) for f in files]
    elif isinstance(files, dict):
        spec["data_files"] = {
            k: [_relative_to(base, f) for f in ([v] if isinstance(v, str) else v)] for k, v in files.items()
        }
    return MultipleChoiceTask(**spec)


def _rows(task: MultipleChoiceTask, split: str) -> list[dict[str, Any]]:
    if task.dataset is None:
        return list(read_records(task.path))
    import datasets

    path = task.dataset.removeprefix("hf://datasets/")
    try:
        data = datasets.load_dataset(path, task.subset, split=split, revision=task.revision, data_files=task.data_files)
    except Exception as e:  # network, auth, missing repo/split: say which task and data set, and why
        raise OSError(
            f"task {task.name}: could not load dataset {task.dataset!r} (subset {task.subset!r}, "
            f"split {split!r}, revision {task.revision!r}): {type(e).__name__}: {e}"
        ) from e
    return list(data)


def _field(row: dict[str, Any], dotted: str) -> Any:
    value: Any = row
    for key in dotted.split("."):
        if not isinstance(value, dict) or key not in value:
            raise KeyError(dotted)
        value = value[key]
    return value


def _item(task: MultipleChoiceTask, row: dict[str, Any]) -> dict[str, Any]:
    """One row as ``{context, choices, gold}`` through the task's field mapping."""
    if task.doc_to_text is not None:
        context = task.doc_to_text.format_map(row)
    else:
        context = row.get("context", row.get("query"))
    if isinstance(task.doc_to_choice, (list, tuple)):
        choices = list(task.doc_to_choice)
    else:
        choices = _field(row, task.doc_to_choice or "choices")
    target = _field(row, task.doc_to_target or "gold")
    if not isinstance(context, str) or not isinstance(choices, list) or len(choices) < 2:
        raise ValueError("needs a context string and a list of 2+ choices")
    choices = [str(c) for c in choices]
    if isinstance(target, str):
        labels = [str(label) for label in _field(row, task.target_labels)] if task.target_labels else None
        if labels is not None and target in labels:
            target = labels.index(target)
        elif labels is None and target in choices:
            target = choices.index(target)
        elif target.strip().isdigit():
            target = int(target)
    if isinstance(target, bool) or not isinstance(target, int) or not 0 <= target < len(choices):
        raise ValueError(f"has answer {target!r}, expected an index into its {len(choices)} choices")
    return {"context": context, "choices": choices, "gold": target}


def load_items(task: MultipleChoiceTask, split: str | None = None) -> list[dict[str, Any]]:
    """The task's items (of ``split`` for data sets, default ``task.split``) as ``{context, choices, gold}``."""
    source = task.path or f"{task.dataset}[{split or task.split}]"
    items = []
    for index, row in enumerate(_rows(task, split or task.split)):
        try:
            items.append(_item(task, row))
        except (ValueError, KeyError, IndexError) as e:
            raise ValueError(f"task {task.name}: {source}: item {index} {_describe(e)}") from e
    return items


def _describe(e: Exception) -> str:
    if isinstance(e, KeyError):
        return f"has no field {e.args[0]!r} (check doc_to_text / doc_to_choice / doc_to_target / target_labels)"
    return str(e)


def build_prompts(
    task: MultipleChoiceTask, items: list[dict[str, Any]], fewshot_items: list[dict[str, Any]] | None = None
) -> list[str]:
    """The (few-shot) prompt of each item, deterministic for a given ``fewshot_seed``. Shots come from
    ``fewshot_items`` (another split) if given, else from the other items."""
    prompts = []
    for index, item in enumerate(items):
        rng = random.Random(f"{task.fewshot_seed}:{index}")
        source = items if fewshot_items is None else fewshot_items
        pool = [i for i in range(len(source)) if fewshot_items is not None or i != index]
        shots = rng.sample(pool, min(task.num_fewshot, len(pool)))
        parts = [source[i]["context"] + task.target_delimiter + source[i]["choices"][source[i]["gold"]] for i in shots]
        prompts.append(task.fewshot_delimiter.join(parts + [item["context"]]))
    return prompts


def split_context_continuation(encode, context: str, continuation: str) -> tuple[list[int], list[int]]:
    """lm-eval's tokenization (``TemplateLM._encode_pair``): all trailing whitespace of the context (spaces,
    newlines) moves to the continuation, and the continuation's tokens are those of
    ``encode(context + continuation)`` after ``encode(context)``."""
    stripped = context.rstrip()
    continuation = context[len(stripped) :] + continuation
    whole = encode(stripped + continuation)
    context_ids = encode(stripped)
    return context_ids, whole[len(context_ids) :]


def score_task(task: MultipleChoiceTask, scorer, encode, bos: int) -> dict[str, Any]:
    """acc / acc_norm (with stderr and CI) of ``task``; ``bos`` is prepended to every context."""
    items = load_items(task)[: task.limit]
    other_split = task.fewshot_split not in (None, task.split)  # the scored split: shots exclude the item
    shots = load_items(task, task.fewshot_split) if other_split and task.num_fewshot else None
    prompts = build_prompts(task, items, shots)
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
        lengths = [max(1, len(c)) for c in item["choices"]]  # lm-eval's acc_norm: characters of the choice
        acc.append(max(range(len(logps)), key=logps.__getitem__) == item["gold"])
        normed = [lp / n for lp, n in zip(logps, lengths)]
        acc_norm.append(max(range(len(normed)), key=normed.__getitem__) == item["gold"])
    chance = sum(1 / len(item["choices"]) for item in items) / len(items)
    return {
        "items": len(items),
        "num_fewshot": task.num_fewshot,
        "chance": chance,
        "acc": rate(acc),
        "acc_norm": rate(acc_norm),
    }
