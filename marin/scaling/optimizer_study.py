"""An optimizer study's analysis: the best learning rate per optimizer, size and data, and each optimizer's
speedup over AdamW as Wen, Hall, Ma and Liang (2025, "Fantastic Pretraining Optimizers and Where to Find
Them") define it.

    runs = [StudyRun(kind="muon", params=1.1e5, tokens=2.1e6, ratio=1, learning_rate=1e-2, seed=0, loss=1.92), ...]
    table = best_runs(runs)                           # {(kind, params, ratio): the best run (lowest loss)}
    adamw_tokens_to_reach(runs, params=1.1e5, loss=1.90)   # tokens AdamW needs at that size for that loss

**Speedup.** For an optimizer's best run at size ``N`` with ``D`` tokens and final loss ``L``, the tokens
``D_A`` that AdamW (tuned the same way) needs at size ``N`` to reach ``L`` are read off AdamW's own best runs
at that size: AdamW's final loss is taken as linear in ``log D`` between the data sizes it ran (the paper
interpolates the same way between its 1, 2, 4 and 8x Chinchilla runs); beyond them the nearest segment is
extended, and the result says so (``extrapolated``). The speedup is ``D_A / D``: 1.4 means AdamW needs 40%
more data for the same loss. Losses are held-out bits per byte at the end of training; with several seeds of
a setting their mean is the loss, and their spread is reported.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import statistics
from collections.abc import Sequence

from marin.scaling.heldout import heldout_bpb
from marin.scaling.plots import plot_speedups
from marin.storage import join, write_atomic

logger = logging.getLogger(__name__)

REFERENCE = "adamw"
STUDY_FILE = "study.json"


@dataclasses.dataclass(frozen=True)
class StudyRun:
    kind: str
    params: float
    """Model size N (``LlamaConfig.flops_per_token() / 6``, as the ladder counts it)."""
    tokens: float
    ratio: float
    """Tokens per parameter in units of Chinchilla's 20 (1 = 20 N tokens)."""
    learning_rate: float
    seed: int
    loss: float
    run: str = ""


@dataclasses.dataclass(frozen=True)
class Setting:
    """One optimizer's best learning rate at one (size, data ratio), its seeds' losses, and its speedup."""

    kind: str
    params: float
    ratio: float
    tokens: float
    learning_rate: float
    losses: tuple[float, ...]
    swept: tuple[tuple[float, float], ...]
    """(learning rate, loss) of every seed-0 run of the sweep, by learning rate."""
    speedup: float | None = None
    extrapolated: bool = False

    @property
    def loss(self) -> float:
        return statistics.fmean(self.losses)

    @property
    def at_edge(self) -> bool:
        """The best learning rate is the sweep's lowest or highest: the optimum may lie beyond it."""
        return len(self.swept) > 1 and self.learning_rate in (self.swept[0][0], self.swept[-1][0])


def best_runs(runs: Sequence[StudyRun]) -> dict[tuple[str, float, float], Setting]:
    """For each (kind, params, ratio): the learning rate whose seed-0 run ends lowest, with every seed run
    at that learning rate (the paper's "best setting, rerun with more seeds")."""
    groups: dict[tuple[str, float, float], list[StudyRun]] = {}
    for run in runs:
        groups.setdefault((run.kind, run.params, run.ratio), []).append(run)
    table = {}
    for key, group in sorted(groups.items()):
        sweep = sorted((r.learning_rate, r.loss) for r in group if r.seed == 0)
        if not sweep:
            raise ValueError(f"optimizer study: {key} has no seed-0 run to choose a learning rate from")
        best_lr = min(sweep, key=lambda x: x[1])[0]
        losses = tuple(r.loss for r in sorted(group, key=lambda r: r.seed) if r.learning_rate == best_lr)
        tokens = next(r.tokens for r in group)
        table[key] = Setting(key[0], key[1], key[2], tokens, best_lr, losses, tuple(sweep))
    return table


def adamw_tokens_to_reach(reference: Sequence[Setting], loss: float) -> tuple[float, bool]:
    """Tokens AdamW needs to reach ``loss`` at one size, from its best settings there (``reference``, two or
    more data sizes): linear in log tokens between them, the nearest segment extended beyond. Returns
    (tokens, extrapolated)."""
    points = sorted((math.log(s.tokens), s.loss) for s in reference)
    if len(points) < 2:
        raise ValueError(f"AdamW needs runs at two or more data sizes to interpolate, got {len(points)}")
    if points[-1][1] >= points[0][1]:
        raise ValueError(f"AdamW's loss does not fall with data at this size: {points}; no speedup is defined")
    inside = [(a, b) for a, b in zip(points, points[1:]) if min(a[1], b[1]) <= loss <= max(a[1], b[1])]
    if inside:
        (x0, y0), (x1, y1) = inside[0]
        extrapolated = False
    else:
        (x0, y0), (x1, y1) = points[:2] if loss > points[0][1] else points[-2:]
        extrapolated = True
    if y1 == y0:
        return math.exp(x0), extrapolated
    return math.exp(x0 + (loss - y0) * (x1 - x0) / (y1 - y0)), extrapolated


def speedups(table: dict[tuple[str, float, float], Setting]) -> dict[tuple[str, float, float], Setting]:
    """Every setting with its speedup over AdamW at its size (AdamW's own is 1 by construction)."""
    out = {}
    for key, setting in table.items():
        reference = [s for (k, p, _), s in table.items() if k == REFERENCE and p == setting.params]
        if len(reference) < 2:
            out[key] = setting
            continue
        needed, extrapolated = adamw_tokens_to_reach(reference, setting.loss)
        out[key] = dataclasses.replace(setting, speedup=needed / setting.tokens, extrapolated=extrapolated)
    return out


@dataclasses.dataclass(frozen=True)
class StudyRunRef:
    """One run as the analysis step sees it: its eval's path and what it was."""

    kind: str
    params: float
    tokens: float
    ratio: float
    learning_rate: float
    seed: int
    run: str
    eval_path: str


@dataclasses.dataclass(frozen=True)
class OptimizerStudyConfig:
    runs: tuple[StudyRunRef, ...]
    heldout: str
    """The validation set (in each eval's ``results.json``) whose bits per byte is the loss."""
    output_path: str


def optimizer_study_step(config: OptimizerStudyConfig) -> dict:
    """``study.json`` (every setting, its sweep, seeds and speedup) and ``study.md`` (the tables)."""
    facts = [f.name for f in dataclasses.fields(StudyRunRef) if f.name != "eval_path"]
    runs = [
        StudyRun(**{name: getattr(r, name) for name in facts}, loss=heldout_bpb(r.eval_path, config.heldout))
        for r in config.runs
    ]
    table = speedups(best_runs(runs))
    record = {
        "metric": "bpb",
        "heldout": config.heldout,
        "settings": [
            {
                **dataclasses.asdict(s),
                "loss": s.loss,
                "loss_spread": (max(s.losses) - min(s.losses)) if s.losses else 0.0,
                "at_edge": s.at_edge,
            }
            for s in table.values()
        ],
        "runs": [dataclasses.asdict(r) for r in runs],
    }
    record["plots"] = plot_speedups(record["settings"], config.output_path)
    text = markdown(table)
    write_atomic(join(config.output_path, "study.md"), text)
    write_atomic(join(config.output_path, STUDY_FILE), json.dumps(record, indent=2))
    logger.info("optimizer study:\n%s", text)
    return record


def markdown(table: dict[tuple[str, float, float], Setting]) -> str:
    """Speedup over AdamW per optimizer (rows) and size x data (columns); then every setting's sweep."""
    columns = sorted({(s.params, s.ratio) for s in table.values()})
    kinds = sorted({s.kind for s in table.values()}, key=lambda k: (k != REFERENCE, k))
    head = " | ".join(f"N={p / 1e3:.0f}k, {r:g}x" for p, r in columns)
    lines = [f"| speedup over AdamW | {head} |", "|---" * (len(columns) + 1) + "|"]
    for kind in kinds:
        cells = []
        for p, r in columns:
            s = table.get((kind, p, r))
            if s is None or s.speedup is None:
                cells.append("")
            else:
                cells.append(f"{s.speedup:.2f}{'*' if s.extrapolated else ''}")
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    lines += ["", "(* beyond AdamW's runs: the nearest segment of its loss-vs-log-data line extended)", ""]
    lines += ["| optimizer | N | data | best lr | bpb (seeds) | sweep (lr: bpb) |", "|---|---|---|---|---|---|"]
    for s in sorted(table.values(), key=lambda s: (s.params, s.ratio, s.kind != REFERENCE, s.kind)):
        seeds = ", ".join(f"{x:.4f}" for x in s.losses)
        sweep = ", ".join(f"{lr:g}: {loss:.4f}" for lr, loss in s.swept)
        best = f"{s.learning_rate:g}" + (" †" if s.at_edge else "")
        lines.append(f"| {s.kind} | {s.params / 1e3:.0f}k | {s.ratio:g}x | {best} | {seeds} | {sweep} |")
    lines += ["", "(† at an end of its sweep: the best rate may lie beyond it)"]
    return "\n".join(lines) + "\n"
