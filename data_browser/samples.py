"""Text sampled from a checkpoint (``samples.jsonl`` of a samples step), shown on the run's ``/training`` page.

A samples step (``marin.evaluation.samples``, ``samples/<name>`` in experiments) names the run it sampled
among the dependencies in its ``.executor_info``; ``samples_for(run)`` finds those steps beside the run
(``<prefix>/samples/*``) and reads the first records of each:

    {"prompt": "ROMEO:", "text": "\\nO only you lord, ...", "seed": 2, "tokens": 49, "finish_reason": "length"}

Bounded like every read of the browser: at most ``MAX_STEPS`` steps looked at, ``MAX_SAMPLES`` records each.
"""

from __future__ import annotations

import dataclasses

from data_browser.experiments import read_json
from data_browser.readers import ReadFailure, iter_records
from data_browser.step_files import SAMPLES_FILE
from marin.execution.status import INFO_FILE
from marin.storage import exists, filesystem, join

MAX_STEPS = 50
MAX_SAMPLES = 12


@dataclasses.dataclass(frozen=True)
class Samples:
    step: str
    """The samples step's output directory."""
    records: list[dict]
    error: str | None = None


def read_samples(step: str, max_line_bytes: int) -> Samples:
    """The first ``MAX_SAMPLES`` records of ``step``'s ``samples.jsonl`` (a damaged file: its error)."""
    records, errors = [], []
    url = join(step, SAMPLES_FILE)
    try:
        for record in iter_records(url, max_line_bytes):
            if len(records) >= MAX_SAMPLES:
                break
            if record.error or not isinstance(record.data, dict):
                errors.append(f"{url}: line {record.index + 1}: {record.error or 'not a JSON object'}")
            else:
                records.append(record.data)
    except ReadFailure as e:
        errors.append(str(e))
    return Samples(step, records, "; ".join(errors[:3]) or None)


def samples_for(run: str, allowed, max_bytes: int, max_line_bytes: int) -> list[Samples]:
    """The samples steps beside ``run`` (``<prefix>/samples/*``) that sampled it, each with its records."""
    prefix = run.rstrip("/").rsplit("/", 2)[0]
    fs, root = filesystem(join(prefix, "samples"))
    try:
        steps = sorted(p.rstrip("/") for p in fs.ls(root, detail=False))[:MAX_STEPS]
    except (OSError, ValueError):
        return []
    found = []
    for path in steps:
        step = join(prefix, "samples", path.rsplit("/", 1)[-1])
        info_url = join(step, INFO_FILE)
        if not (allowed(step) and exists(join(step, SAMPLES_FILE)) and exists(info_url)):
            continue
        try:
            info = read_json(info_url, max_bytes)
        except (ReadFailure, OSError):
            continue
        if isinstance(info, dict) and run.rstrip("/") in info.get("dependencies", []):
            found.append(read_samples(step, max_line_bytes))
    return found
