"""Prompt-set steps: public math data and the quickstart's arithmetic as prompt records with verifiable answers.

    prepare_gsm8k(Gsm8kConfig(input_paths=("<download>/train.jsonl",), output_path=...))
    # prompts.jsonl   {"id": "gsm8k-0", "prompt": "Natalia sold clips to 48 ...", "answer": "72", "solution": "..."}
    generate_arithmetic_prompts(ArithmeticPromptsConfig(output_path=...))
    # prompts.jsonl   {"id": "arith-0", "prompt": "What is 3 + 4?", "answer": "3 + 4 = 7"}

GSM8K (Cobbe et al., 2021; ``openai/grade-school-math``, MIT) is plain JSONL, one ``{"question", "answer"}`` per
line, the answer a worked solution ending ``#### <number>``. The whole set comes through the downloader::

    default_download("gsm8k", GSM8K_URLS["train"])   # 7,473 problems; "test": 1,319

and a slice of it ships with the tests (``tests/data/gsm8k_slice``, with its licence). A row whose answer has
no ``####`` line is refused naming the file, row and field (``on_error="skip"`` counts and drops it).

The arithmetic prompts are the quickstart's CPU-sized environment: the addition questions of the bundled
instruction data (``marin.corpus.instruct``), asked with the *training* phrasings only, so no prompt is one of
the held-out instructions the quickstart evaluates on (those use ``HELD_OUT_QUESTIONS``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random

from marin.corpus.instruct import HELD_OUT_QUESTIONS, QUESTIONS
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
class ArithmeticPromptsConfig:
    output_path: str
    seed: int = 0
    max_operand: int = 9
    """Addends run over 0..max_operand (the quickstart's instructions use single digits)."""

    def __post_init__(self):
        check("ArithmeticPromptsConfig", "max_operand", self.max_operand, lambda v: v >= 1, ">= 1")


def arithmetic_records(seed: int, max_operand: int) -> list[dict]:
    """Every pair (a, b) asked once in each training phrasing, shuffled by ``seed``."""
    rng = random.Random(f"{seed}-arithmetic-prompts")
    pairs = [(a, b) for a in range(max_operand + 1) for b in range(max_operand + 1)]
    rows = [(template, a, b) for template in QUESTIONS["addition"] for a, b in pairs]
    rng.shuffle(rows)
    return [
        {
            "id": f"arith-{i}",
            "prompt": template.format(a=a, b=b),
            "answer": f"{a} + {b} = {a + b}",  # the reply the instruct data teaches: exact and numeric both read it
        }
        for i, (template, a, b) in enumerate(rows)
    ]


def generate_arithmetic_prompts(config: ArithmeticPromptsConfig) -> dict:
    records = arithmetic_records(config.seed, config.max_operand)
    held_out = {t.format(a=a, b=b) for t in HELD_OUT_QUESTIONS["addition"] for a in range(10) for b in range(10)}
    if held_out & {r["prompt"] for r in records}:  # the phrasings are disjoint by construction; kept so
        raise RuntimeError("an RL prompt is phrased as a held-out instruction")
    return _write_prompt_set(config.output_path, records, {"source": "arithmetic", "seed": config.seed})


def _write_prompt_set(output_path: str, records: list[dict], summary: dict) -> dict:
    write_records(join(output_path, "prompts.jsonl"), records)
    summary = {**summary, "records": len(records)}
    write_atomic(join(output_path, "summary.json"), json.dumps(summary, indent=2))
    logger.info("wrote %d prompt records to %s", len(records), output_path)
    return summary
