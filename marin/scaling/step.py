"""The ladder's analysis step: read each run's eval, fit, predict the target, write ``fit.json`` and plots.

The step depends on every ladder run's eval (so it runs when they are done) and on the target run's
steps only ``nonblocking()``: the prediction is made from the ladder alone, before or without the target,
and names the target's output paths so that the report and the data browser can put the target's actual
loss beside it once it exists (``marin.scaling.heldout``).

``fit.json`` is the ``FitRecord`` of ``marin.scaling.fit.fit_ladder`` (schema: ``marin.scaling.record``),
with ``metric``/``heldout``, each run's ``run_path``/``eval_path`` and the prediction's, and ``plots``:
``isoflop.png`` and ``laws.png`` (``marin.scaling.plots``).
"""

from __future__ import annotations

import dataclasses
import json
import logging

from marin.scaling.fit import Run, Target, fit_ladder
from marin.scaling.heldout import heldout_bpb
from marin.scaling.plots import plot_fit
from marin.scaling.record import FIT_FILE, FitRecord
from marin.scaling.surface import DEFAULT_LEVEL, DEFAULT_SAMPLES, DEFAULT_SEED, SURFACE_OBJECTIVE
from marin.storage import join, write_atomic

logger = logging.getLogger(__name__)

INTERVALS = "bootstrap-widened-by-octave-backtest"
"""How prediction intervals are made (``marin.scaling.surface``), named so that it enters the step's version:
a ladder fitted before its intervals were calibrated fits again."""


@dataclasses.dataclass(frozen=True)
class LadderRunRef:
    """One run of the ladder as the analysis sees it: where its eval is, and its size and tokens."""

    run: str
    """The training step's name (``checkpoints/…``)."""
    run_path: str
    eval_path: str
    budget: float
    params: float
    tokens: float


@dataclasses.dataclass(frozen=True)
class FitLadderConfig:
    runs: tuple[LadderRunRef, ...]
    heldout: str
    """The validation set (in each eval's ``results.json``) whose bits per byte is the loss."""
    output_path: str
    target: LadderRunRef | None = None
    bootstrap_samples: int = DEFAULT_SAMPLES
    seed: int = DEFAULT_SEED
    level: float = DEFAULT_LEVEL
    skip_invalid_runs: bool = False
    """Leave out a run whose loss is NaN, infinite or not positive (listed in ``fit.json``'s ``skipped``)
    instead of failing the fit with its name."""
    objective: str = SURFACE_OBJECTIVE
    """The loss surface's objective, named so that it enters the step's version (a ladder fitted by another
    objective fits again); only ``marin.scaling.surface.SURFACE_OBJECTIVE`` is computed here."""
    intervals: str = INTERVALS
    """How intervals are made; only ``INTERVALS`` is computed here."""


def fit_ladder_step(config: FitLadderConfig) -> None:
    for field, wanted in (("objective", SURFACE_OBJECTIVE), ("intervals", INTERVALS)):
        if getattr(config, field) != wanted:
            raise ValueError(f"FitLadderConfig.{field}: {getattr(config, field)!r}; this version computes {wanted!r}")
    runs = [Run(r.budget, r.params, r.tokens, heldout_bpb(r.eval_path, config.heldout), r.run) for r in config.runs]
    target = config.target
    record = fit_ladder(
        runs,
        Target(target.run, target.params, target.tokens, target.budget) if target else None,
        samples=config.bootstrap_samples,
        seed=config.seed,
        level=config.level,
        skip_invalid=config.skip_invalid_runs,
    )
    record = with_paths(record, config)
    record = dataclasses.replace(record, plots=plot_fit(record, config.output_path))
    write_atomic(join(config.output_path, FIT_FILE), json.dumps(record.to_json(), indent=2))
    if record.skipped:
        logger.warning("ladder fit left out %d run(s): %s", len(record.skipped), record.skipped)
    logger.info("ladder fit: N*(C) %s; prediction %s", record.laws.params_opt, record.prediction)


def with_paths(record: FitRecord, config: FitLadderConfig) -> FitRecord:
    """The record with the metric, the held-out set and each run's (and the target's) output paths."""
    refs = {r.run: r for r in config.runs}
    runs = [dataclasses.replace(r, run_path=refs[r.run].run_path, eval_path=refs[r.run].eval_path) for r in record.runs]
    prediction = record.prediction
    if prediction is not None and config.target is not None:
        prediction = dataclasses.replace(prediction, run_path=config.target.run_path, eval_path=config.target.eval_path)
    return dataclasses.replace(record, runs=runs, prediction=prediction, metric="bpb", heldout=config.heldout)
