"""Prompt-set steps: public math data and the quickstart's instructions as prompt records with verifiable answers.

    prepare_gsm8k(Gsm8kConfig(input_paths=("<download>/train.jsonl",), output_path=...))
    # prompts.jsonl   {"id": "gsm8k-0", "prompt": "Natalia sold clips to 48 ...", "answer": "72", "solution": "..."}
    generate_instruction_prompts(InstructionPromptsConfig(output_path=..., kind="addition"))
    # prompts.jsonl   {"id": "addition-0", "prompt": "What is 3 + 4?", "answer": "3 + 4 = 7"}

GSM8K (Cobbe et al., 2021; ``openai/grade-school-math``, MIT) is plain JSONL, one ``{"question", "answer"}`` per
line, the answer a worked solution ending ``#### <number>``. The whole set comes through the downloader::

    default_download("gsm8k", GSM8K_URLS["train"])   # 7,473 problems; "test": 1,319

and a slice of it ships with the tests (``tests/data/gsm8k_slice``, with its licence). A row whose answer has
no ``####`` line is refused naming the file, row and field (``on_error="skip"`` counts and drops it).

The instruction prompts are the quickstart's CPU-sized environments: the questions of the bundled instruction
data (``marin.corpus.instruct``: sums, counts, animal sounds, opposites), asked with the SFT data's *training*
phrasings or with the *practice* phrasings no SFT item or held-out item uses, never with the held-out ones the
quickstart evaluates on (``HELD_OUT_QUESTIONS``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random

from marin.corpus.domains import ANIMAL_SOUNDS, NUMBER_WORDS, OPPOSITE_OF
from marin.corpus.instruct import FACTS, HELD_OUT_QUESTIONS, KINDS, PHRASINGS
from marin.environments.answers import GSM8K_MARKER
from marin.storage import join, write_atomic
from marin.storage.records import ReadStats, read_records, write_records
from marin.tokenize.inputs import expand_record_paths
from marin.validation import check

logger = logging.getLogger(__name__)

GSM8K_COMMIT = "3101c7d5072418e28b9008a6636bde82a006892c"
GSM8K_URLS = {
    split: f"https://raw.githubusercontent.com/openai/grade-school-math/{GSM8K_COMMIT}/grade_school_math/data/{split}.jsonl"
    for split in ("train", "test")
}
"""GSM8K's files at a pinned commit of ``openai/grade-school-math`` (MIT licence)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Gsm8kConfig:
    input_paths: tuple[str, ...]
    """GSM8K JSONL files (``question``/``answer`` rows), or directories of them (a download step's output)."""
    output_path: str
    id_prefix: str = "gsm8k"
    on_error: str = "raise"
    """A row without a question or a ``####`` answer: "raise" names file, row and field; "skip" counts it."""
    max_rows: int | None = None


def gsm8k_record(row: dict, index: int, prefix: str) -> dict | str:
    """One GSM8K row as a prompt record, or the reason it cannot be one (naming the field)."""
    question, solution = row.get("question"), row.get("answer")
    if not isinstance(question, str) or not question.strip():
        return "field 'question' is missing or empty"
    if not isinstance(solution, str):
        return "field 'answer' is missing (a worked solution ending '#### <number>')"
    match = GSM8K_MARKER.search(solution)
    if not match or not match.group(1).strip():
        return f"field 'answer' has no '#### <number>' line: {solution[-60:]!r}"
    answer = match.group(1).strip().replace(",", "")  # as GSM8K's own extract_answer
    return {"id": f"{prefix}-{index}", "prompt": question.strip(), "answer": answer, "solution": solution}


def prepare_gsm8k(config: Gsm8kConfig) -> dict:
    """Write ``prompts.jsonl`` (prompt records) and ``summary.json`` from GSM8K files."""
    stats, records = ReadStats(), []
    for url in expand_record_paths(list(config.input_paths)):
        for line, row in enumerate(read_records(url, on_error=config.on_error, stats=stats)):
            record = gsm8k_record(row, len(records), config.id_prefix)
            if isinstance(record, str):
                if config.on_error == "raise":
                    raise ValueError(f"{url}, row {line}: {record}")
                stats.skipped += 1
                continue
            records.append(record)
            if config.max_rows is not None and len(records) >= config.max_rows:
                break
    return _write_prompt_set(config.output_path, records, {"source": "gsm8k", "skipped": stats.skipped})


@dataclasses.dataclass(frozen=True, kw_only=True)
class InstructionPromptsConfig:
    output_path: str
    kind: str = "addition"
    """Which of the instruction data's kinds (``marin.corpus.instruct.KINDS``): "addition" (``What is 3 + 4?``
    -> ``3 + 4 = 7``), "counting" (``Count from four to seven.`` -> ``four, five, six, seven``), "animal_sound"
    or "opposite"."""
    phrasings: str = "training"
    """"training" asks as the SFT data does, "practice" as neither it nor the held-out items do
    (``marin.corpus.instruct.PHRASINGS``); the held-out phrasings are never offered."""
    seed: int = 0

    def __post_init__(self):
        check("InstructionPromptsConfig", "kind", self.kind, lambda v: v in KINDS, str(KINDS))
        check(
            "InstructionPromptsConfig",
            "phrasings",
            self.phrasings,
            lambda v: v in PROMPT_PHRASINGS,
            str(PROMPT_PHRASINGS),
        )


PROMPT_PHRASINGS = ("training", "practice")


def _facts(kind: str) -> list[tuple[dict, str]]:
    """(template fields, reference reply) of every fact of ``kind`` the instruction data draws from."""
    if kind == "addition":
        return [({"a": a, "b": b}, f"{a} + {b} = {a + b}") for a, b in FACTS["addition"]]
    if kind == "animal_sound":
        return [({"x": x}, f"The {x} says {ANIMAL_SOUNDS[x]}.") for x in FACTS["animal_sound"]]
    if kind == "opposite":
        return [({"x": x}, f"The opposite of {x} is {OPPOSITE_OF[x]}.") for x in FACTS["opposite"]]
    return [
        ({"a": NUMBER_WORDS[start], "b": NUMBER_WORDS[start + n]}, ", ".join(NUMBER_WORDS[start : start + n + 1]))
        for start in FACTS["counting"]
        for n in range(3, 7)  # the instruction data counts 3 to 6 steps on
    ]


def instruction_records(seed: int, kind: str = "addition", phrasings: str = "training") -> list[dict]:
    """Every fact of ``kind`` asked once in each of the ``phrasings``, shuffled by ``seed``; the answer is the
    reply the instruct data teaches (``exact`` and, for sums, ``numeric`` rewards both read it)."""
    # the training phrasings keep the seed stream they were first drawn with (the quickstart's addition prompts)
    rng = random.Random(f"{seed}-{kind}-prompts" + ("" if phrasings == "training" else f"-{phrasings}"))
    questions = PHRASINGS[phrasings][kind]
    rows = [(template.format(**fields), reply) for template in questions for fields, reply in _facts(kind)]
    rng.shuffle(rows)
    return [{"id": f"{kind}-{i}", "prompt": prompt, "answer": reply} for i, (prompt, reply) in enumerate(rows)]


def held_out_phrasings(kind: str) -> set[str]:
    """Every prompt the held-out instructions could ask about ``kind`` (their phrasings over every fact)."""
    return {t.format(**fields) for t in HELD_OUT_QUESTIONS[kind] for fields, _ in _facts(kind)}


def generate_instruction_prompts(config: InstructionPromptsConfig) -> dict:
    records = instruction_records(config.seed, config.kind, config.phrasings)
    if held_out_phrasings(config.kind) & {r["prompt"] for r in records}:  # disjoint by construction; kept so
        raise RuntimeError("an RL prompt is phrased as a held-out instruction")
    summary = {"source": f"instructions/{config.kind}/{config.phrasings}", "seed": config.seed}
    return _write_prompt_set(config.output_path, records, summary)


def _write_prompt_set(output_path: str, records: list[dict], summary: dict) -> dict:
    write_records(join(output_path, "prompts.jsonl"), records)
    summary = {**summary, "records": len(records)}
    write_atomic(join(output_path, "summary.json"), json.dumps(summary, indent=2))
    logger.info("wrote %d prompt records to %s", len(records), output_path)
    return summary
