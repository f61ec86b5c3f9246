"""The leaderboard: training runs ranked by eval bits-per-byte on one held-out set, beside their compute.

    boards = collect_boards("./local_store")                                    # every experiment there
    boards = collect_boards("gs://bucket/lab", ["experiments/quickstart.py"])   # runs of these files only

A run enters by its experiment file: the executor's record of that file (``<root>/experiments/*.json``)
lists its steps, and every ``train_lm`` step that an ``evaluate_model`` step of the same record depends on
is an entry, once per validation set in that eval's ``results.json``. Only evals of the same documents are
ranked together: a board is keyed by the held-out set's name *and* its fingerprint (documents and UTF-8
bytes scored, both independent of the tokenizer, as bits-per-byte is), so two experiments that call
different data ``stories`` land on different boards instead of being compared.

Per entry: the optimizer and its peak learning rate (the run's recorded config), parameters
(``results.json``), tokens and training FLOPs (the trainer's cumulative ``throughput/total_tokens`` /
``throughput/total_flops`` in ``metrics.jsonl``: model FLOPs, PaLM's ``6N + 12·L·H·Q·T`` per token), wall time
(the training step's last RUNNING → SUCCESS), and whether it is on the compute frontier (no other entry on its
board reached a lower bpb with at most its FLOPs). Everything is read from what the executor and the steps
wrote, never by importing the trainer, so the data browser shows the same boards (``data_browser``'s
``/leaderboard``)."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

from marin.execution.status import state_summary
from marin.report.collect import find_record, read_curves
from marin.scaling.heldout import RESULTS_FILE, HeldoutError, bits_per_byte
from marin.storage import exists, glob, join, read_text

logger = logging.getLogger(__name__)

TRAIN_FN = "train_lm"
EVAL_FN = "evaluate_model"


@dataclasses.dataclass
class LeaderboardEntry:
    experiment: str
    """The experiment file (the record's ``caller_file``), e.g. ``experiments/quickstart.py``."""
    record_url: str
    run: str
    """The training step's name, e.g. ``checkpoints/quickstart-nano``."""
    run_path: str
    eval_path: str
    """The eval step whose ``results.json`` gave ``bpb``."""
    params: int | None
    tokens: float | None
    flops: float | None
    """Training FLOPs in total (model FLOPs, as logged by the trainer)."""
    wall_seconds: float | None
    bpb: float
    frontier: bool = False
    optimizer: str | None = None
    """The run's optimizer and peak learning rate from its recorded config (``muon lr 0.02``); None when the
    record has none."""


@dataclasses.dataclass
class Board:
    heldout: str
    documents: int
    bytes: int
    entries: list[LeaderboardEntry]
    """Lowest bpb first."""


def fn_is(entry: dict[str, Any], fn: str) -> bool:
    """Whether a record's step entry runs ``fn`` (matched by its qualified name's last part)."""
    return str(entry.get("fn", "")).rsplit(".", 1)[-1] == fn


def read_json(url: str) -> dict[str, Any] | None:
    """A JSON object file, or None when it is absent or damaged (logged: a board never fails on one run)."""
    if not exists(url):
        return None
    try:
        value = json.loads(read_text(url))
    except (OSError, ValueError) as e:
        logger.warning("skipping unreadable %s: %s", url, e)
        return None
    return value if isinstance(value, dict) else None


def read_records(root: str, experiments: Sequence[str] | None = None) -> list[tuple[str, dict[str, Any]]]:
    """``(url, record)`` of every experiment record under ``root``, or the newest of each file named."""
    if experiments:
        return [find_record(root, path) for path in experiments]
    records = []
    for url in sorted(glob(join(root, "experiments", "*.json"))):
        record = read_json(url)
        if record is not None and isinstance(record.get("steps"), list):
            records.append((url, record))
    return records


def tokens_per_step(config: Any) -> int | None:
    """``trainer.batch_size × model.seq_len`` of a training step's resolved config (None when either is
    missing): the tokens of a run whose log predates the trainer's ``throughput/total_tokens``."""
    try:
        batch, seq_len = config["trainer"]["batch_size"], config["model"]["seq_len"]
    except (KeyError, TypeError):
        return None
    ok = all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (batch, seq_len))
    return batch * seq_len if ok else None


def training_totals(run_path: str) -> tuple[float | None, float | None]:
    """``(tokens, flops)`` last logged in ``metrics.jsonl``. An older log has no totals: its tokens are the
    last step times the config's tokens per step, its FLOPs unknown (None)."""
    curves = read_curves(run_path)
    tokens, flops = (curves.get(f"throughput/total_{kind}") for kind in ("tokens", "flops"))
    if tokens is not None:
        return tokens.final, flops.final if flops is not None else None
    losses = curves.get("train/loss")
    if losses is None:
        return None, None
    per_step = tokens_per_step((read_json(join(run_path, ".executor_info")) or {}).get("config"))
    return (int(max(losses.steps)) * per_step if per_step else None), None


def optimizer_of(step: dict[str, Any]) -> str | None:
    """``<kind> lr <peak>`` of a training step's optimizer, read from its version in the record."""
    config = (step.get("version") or {}).get("config") if isinstance(step.get("version"), dict) else None
    optimizer = config.get("optimizer") if isinstance(config, dict) else None
    if not isinstance(optimizer, dict) or not isinstance(optimizer.get("kind"), str):
        return None
    lr = optimizer.get("learning_rate")
    ok = isinstance(lr, (int, float)) and not isinstance(lr, bool)
    return optimizer["kind"] + (f" lr {lr:g}" if ok else "")


def wall_seconds(run_path: str) -> float | None:
    state, _, started, finished = state_summary(run_path)
    if state != "SUCCESS" or started is None or finished is None:
        return None
    return finished - started


def record_entries(
    url: str, record: dict[str, Any], readable: Callable[[str], bool] = lambda path: True
) -> list[tuple[tuple[str, int, int], LeaderboardEntry]]:
    """Each (board key, entry) of one experiment record. ``readable(path)``: whether a step's output may be
    read at all (a browser's roots); a run or eval outside it is left out before any of its files is read."""
    steps = {s.get("identity"): s for s in record["steps"] if isinstance(s, dict)}
    out = []
    for ev in steps.values():
        if not fn_is(ev, EVAL_FN):
            continue
        runs = [steps[d] for d in ev.get("dependencies", []) if d in steps and fn_is(steps[d], TRAIN_FN)]
        if not runs or not (readable(ev["output_path"]) and readable(runs[0]["output_path"])):
            continue
        results = read_json(join(ev["output_path"], RESULTS_FILE))
        if not results or not isinstance(results.get("validation"), dict):
            continue
        run = runs[0]  # an eval scores one checkpoint
        tokens, flops = training_totals(run["output_path"])
        wall = wall_seconds(run["output_path"])
        for name, scores in results["validation"].items():
            bpb = _finite_bpb(results, name, join(ev["output_path"], RESULTS_FILE))
            if bpb is None:
                continue
            entry = LeaderboardEntry(
                experiment=record.get("caller_file") or record.get("script") or url,
                record_url=url,
                run=run["name"],
                run_path=run["output_path"],
                eval_path=ev["output_path"],
                params=results.get("params"),
                tokens=tokens,
                flops=flops,
                wall_seconds=wall,
                bpb=bpb,
                optimizer=optimizer_of(run),
            )
            out.append(((name, int(scores.get("documents", 0)), int(scores.get("bytes", 0))), entry))
    return out


def _finite_bpb(results: dict[str, Any], name: str, url: str) -> float | None:
    """A set's bits per byte (``marin.scaling.heldout``); None, logged, where it is missing or not finite."""
    try:
        value = bits_per_byte(results, name, where=url)
    except HeldoutError as e:
        logger.warning("not on the leaderboard: %s", e)
        return None
    if not math.isfinite(value):
        logger.warning("not on the leaderboard: %s validation[%r].bits_per_byte is %r", url, name, value)
        return None
    return value


def mark_frontier(entries: list[LeaderboardEntry]) -> None:
    """An entry is on the frontier when no other reached a lower bpb with at most its FLOPs."""
    for e in entries:
        e.frontier = e.flops is not None and not any(
            o is not e and o.flops is not None and o.flops <= e.flops and o.bpb < e.bpb for o in entries
        )


def collect_boards(
    root: str, experiments: Sequence[str] | None = None, readable: Callable[[str], bool] = lambda path: True
) -> list[Board]:
    """The boards of ``root`` (largest first), from every experiment record or those of ``experiments``.

    A run that several records list (an experiment rerun, or two files sharing a step) enters once, from
    the newest record. ``readable``: as in ``record_entries``."""
    chosen: dict[tuple, tuple[float, tuple[str, int, int], LeaderboardEntry]] = {}
    for url, record in read_records(root, experiments):
        created = float(record.get("created") or 0)
        for key, entry in record_entries(url, record, readable):
            ident = (entry.run_path, entry.eval_path, key)
            if ident not in chosen or created > chosen[ident][0]:
                chosen[ident] = (created, key, entry)
    grouped: dict[tuple[str, int, int], list[LeaderboardEntry]] = {}
    for _, key, entry in chosen.values():
        grouped.setdefault(key, []).append(entry)
    boards = []
    for (name, documents, size), entries in grouped.items():
        entries.sort(key=lambda e: (e.bpb, e.run))
        mark_frontier(entries)
        boards.append(Board(heldout=name, documents=documents, bytes=size, entries=entries))
    boards.sort(key=lambda b: (-len(b.entries), b.heldout, b.documents))
    return boards
