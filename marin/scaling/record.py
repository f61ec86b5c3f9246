"""``fit.json``, the record a ladder's analysis step writes: its one schema, read and written here only.

    record = fit_ladder(runs, target)                  # marin.scaling.fit builds a FitRecord
    write_atomic(url, json.dumps(record.to_json()))    # marin.scaling.step writes it
    errors = {}
    record = FitRecord.from_json(json.loads(text), errors)   # the browser and the report read it back
    record.laws.loss.at(1e13), record.prediction.interval, errors   # {"laws.surface": "laws.surface.beta ..."}

Numpy-free, so the data browser and the report read it without the fit's numerics (ARCHITECTURE.md).
``from_json`` checks every field against the dataclasses below: with ``errors`` given, a damaged part
(``runs``, ``budgets``, ``laws.loss``, ``prediction``, ...) is left empty and ``errors[part]`` names the field
and what was expected, and the rest is read; without it the first problem raises ``RecordError``.

Units, once: ``params`` N = model FLOPs per token / 6; ``flops`` = 6·N·D, a run's own compute; ``budget`` is
the *nominal* budget of the ladder step the run belongs to (its ``flops`` differs by rounding). Losses are
the metric named by ``metric`` on the held-out set ``heldout`` (``marin.scaling.heldout``).

Format 2 (2026-11) renamed what format 1 let mean two things: the frontier law's exponent is ``gamma``
(``laws.loss.alpha`` in format 1, while ``laws.surface.alpha`` is the size exponent), and the prediction's
6·N·D is ``flops`` (format 1's ``prediction.budget``, while ``runs[].budget`` is nominal). Intervals became
calibrated (``marin.scaling.surface``): a format-1 file is read with its bootstrap-only interval as
``bootstrap_interval`` and no calibrated ``interval``.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable
from typing import Any

FIT_FILE = "fit.json"
KIND = "isoflop_fit"
FORMAT_VERSION = 2

Interval = tuple[float, float]
"""``[low, high]`` with low <= high; None where too few bootstrap samples were finite to give one."""


class RecordError(ValueError):
    """A part of ``fit.json`` is not of this schema (the message names the field and what was expected)."""


@dataclasses.dataclass(frozen=True)
class LadderRun:
    """One ladder run the fit used."""

    run: str
    """The training step's name (``checkpoints/…``)."""
    budget: float
    params: float
    tokens: float
    flops: float
    loss: float
    run_path: str | None = None
    eval_path: str | None = None


@dataclasses.dataclass(frozen=True)
class SkippedRun:
    """A run left out (``skip_invalid``): its loss was not a positive finite number, or its size or tokens."""

    run: str
    budget: float | None
    reason: str
    """What was wrong, e.g. ``loss is nan``."""


@dataclasses.dataclass(frozen=True)
class BudgetFit:
    """One budget's isoFLOP parabola loss = a·x² + b·x + c, x = log10(params), and its vertex."""

    budget: float
    quadratic: tuple[float, float, float]
    params_opt: float | None
    """None where the parabola has no minimum (it curves downward over the sizes run): see ``note``."""
    tokens_opt: float | None
    loss_opt: float | None
    params_opt_interval: Interval | None
    bracketed: bool | None = None
    """False when the optimum lies outside the sizes run (an extrapolation)."""
    note: str | None = None


@dataclasses.dataclass(frozen=True)
class PowerLaw:
    """``y = coefficient * C ** exponent`` (N*(C) or D*(C)), with bootstrap intervals of each."""

    coefficient: float
    exponent: float
    interval: dict[str, Interval | None]
    form: str = "k * C^a"

    def at(self, flops: float) -> float:
        return self.coefficient * flops**self.exponent


@dataclasses.dataclass(frozen=True)
class FrontierLaw:
    """The surface's compute-optimal loss ``L*(C) = E + A * C ** -gamma``, gamma = alpha·beta / (alpha + beta)."""

    E: float  # noqa: N815 (the law's own symbols)
    A: float  # noqa: N815
    gamma: float
    interval: dict[str, Interval | None]
    form: str = "E + A * C^-gamma"

    def at(self, flops: float) -> float:
        return self.E + self.A * flops**-self.gamma


@dataclasses.dataclass(frozen=True)
class SurfaceLaw:
    """``L(N, D) = E + A / N^alpha + B / D^beta`` as fitted (``objective``), with bootstrap intervals."""

    E: float  # noqa: N815
    A: float  # noqa: N815
    alpha: float
    B: float  # noqa: N815
    beta: float
    interval: dict[str, Interval | None]
    residual_rms: float
    objective: str
    """How it was fitted, e.g. ``huber-log-0.001`` (``marin.scaling.surface.SURFACE_OBJECTIVE``)."""
    form: str = "E + A / N^alpha + B / D^beta"


@dataclasses.dataclass(frozen=True)
class Laws:
    params_opt: PowerLaw | None = None
    """None where fewer than two budgets have a minimum (``note`` says so)."""
    tokens_opt: PowerLaw | None = None
    loss: FrontierLaw | None = None
    surface: SurfaceLaw | None = None
    note: str | None = None


@dataclasses.dataclass(frozen=True)
class Prediction:
    """The target run's loss from the surface at its own N and D."""

    run: str
    params: float
    tokens: float
    flops: float
    """6·N·D, the target's compute."""
    loss: float
    interval: Interval | None
    """Calibrated for extrapolation (``bootstrap_interval`` widened by the backtest); None where it cannot be."""
    bootstrap_interval: Interval | None
    """The residual bootstrap's interval alone: curve uncertainty plus one run's scatter, no form error."""
    level: float
    extrapolation: float | None = None
    """How far past the ladder's runs the target lies: max of ln(N/N_max), ln(D/D_max), ln(C/C_max), >= 0."""
    budget: float | None = None
    """The target's nominal budget, when it has one."""
    method: str | None = None
    run_path: str | None = None
    eval_path: str | None = None


@dataclasses.dataclass(frozen=True)
class BacktestRun:
    run: str
    params: float
    tokens: float
    actual: float
    predicted: float
    error: float
    """(actual - predicted) / actual, as reports write it."""
    extrapolation: float | None = None
    bootstrap_interval: Interval | None = None


@dataclasses.dataclass(frozen=True)
class Backtest:
    """The ladder's check on itself: the surface fitted without the top budget octave predicts it. Its errors
    calibrate the prediction's interval (``widening``); ``note`` alone when it could not run."""

    note: str | None = None
    held_out_budgets: list[float] = dataclasses.field(default_factory=list)
    fitted_runs: int | None = None
    runs: list[BacktestRun] = dataclasses.field(default_factory=list)
    mean_abs_error: float | None = None
    inside_bootstrap: int | None = None
    """How many held-out runs fell inside their bootstrap interval (before calibration)."""
    level: float | None = None
    widening: float | None = None
    """Log-interval widening per unit of extrapolation at ``level``: the level-quantile of |ln error| / distance."""


@dataclasses.dataclass(frozen=True)
class Bootstrap:
    samples: int
    seed: int
    level: float
    parabola_samples_without_minimum: int | None = None


@dataclasses.dataclass(frozen=True)
class FitRecord:
    """Everything ``fit.json`` holds. Parts that a tolerant read found damaged are None (or empty)."""

    runs: list[LadderRun] = dataclasses.field(default_factory=list)
    budgets: list[BudgetFit] = dataclasses.field(default_factory=list)
    laws: Laws = dataclasses.field(default_factory=Laws)
    prediction: Prediction | None = None
    backtest: Backtest | None = None
    bootstrap: Bootstrap | None = None
    skipped: list[SkippedRun] = dataclasses.field(default_factory=list)
    metric: str | None = None
    heldout: str | None = None
    plots: list[str] = dataclasses.field(default_factory=list)
    params_definition: str = "model FLOPs per token / 6, so that a run's compute is 6 * params * tokens"
    kind: str = KIND
    format_version: int = FORMAT_VERSION

    def to_json(self) -> dict[str, Any]:
        return _plain(self)

    @classmethod
    def from_json(cls, document: Any, errors: dict[str, str] | None = None) -> FitRecord:
        """The record in ``document`` (a parsed ``fit.json``, format 1 or 2). With ``errors``, each damaged part
        is left empty and named there (``file`` when the document is no fit at all); else ``RecordError``."""
        problem = _file_problem(document)
        if problem is not None:
            if errors is None:
                raise RecordError(problem)
            errors["file"] = problem
            return cls()
        if document.get("format_version", 1) == 1:
            document = upgrade_v1(document)
        hints = typing.get_type_hints(cls)
        values: dict[str, Any] = {"laws": _laws(document.get("laws"), errors)}
        for f in dataclasses.fields(cls):
            if f.name != "laws" and f.name in document:
                parse = lambda n=f.name: _parse(hints[n], document[n], n)  # noqa: E731
                values[f.name] = _part(errors, f.name, parse, _default(f))
        return cls(**values)


# ---------------------------------------------------------------------------------------------------------
# Reading: one checker driven by the dataclasses' own field types


def _file_problem(document: Any) -> str | None:
    if not isinstance(document, dict) or document.get("kind") != KIND:
        found = document.get("kind") if isinstance(document, dict) else type(document).__name__
        return f"not an isoFLOP fit (expected an object with kind {KIND!r}, got {found!r})"
    version = document.get("format_version", 1)
    if version not in (1, FORMAT_VERSION):
        return f"format_version {version!r}: this reader knows 1 and {FORMAT_VERSION} (a newer writer wrote it)"
    return None


def _laws(value: Any, errors: dict[str, str] | None) -> Laws:
    """``laws`` read law by law: a damaged law leaves the others readable."""
    laws = _part(errors, "laws", lambda: _object(value, "laws"), {})
    hints = typing.get_type_hints(Laws)
    return Laws(**{n: _part(errors, f"laws.{n}", lambda n=n: _field(hints[n], laws, n, "laws"), None) for n in hints})


def _part(errors: dict[str, str] | None, name: str, parse: Callable[[], Any], default: Any) -> Any:
    if errors is None:
        return parse()
    try:
        return parse()
    except RecordError as e:
        errors[name] = str(e)
        return default


def _default(f: dataclasses.Field) -> Any:
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None if f.default is dataclasses.MISSING else f.default


def _object(value: Any, where: str) -> dict:
    if not isinstance(value, dict):
        raise RecordError(f"{where} must be an object, got {type(value).__name__}")
    return value


def _field(hint: Any, obj: dict, name: str, where: str) -> Any:
    return _parse(hint, obj.get(name), f"{where}.{name}")


def _parse(hint: Any, value: Any, where: str) -> Any:
    """``value`` checked against the type ``hint`` (``where`` names it in errors)."""
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) else ()
    if options:  # X | None
        if value is None:
            return None
        hint = next(o for o in options if o is not type(None))
    if dataclasses.is_dataclass(hint):
        return _dataclass(hint, value, where)
    origin = typing.get_origin(hint)
    if hint is float or hint is int:
        return _number(hint, value, where)
    if hint is str or hint is bool:
        if not isinstance(value, hint):
            raise RecordError(f"{where} must be {'a string' if hint is str else 'true or false'}, got {value!r}")
        return value
    if origin is tuple:
        return _tuple(typing.get_args(hint), value, where, interval=hint == Interval)
    if origin is list:
        if not isinstance(value, list):
            raise RecordError(f"{where} must be a list, got {type(value).__name__}")
        return [_parse(typing.get_args(hint)[0], v, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        item = typing.get_args(hint)[1]
        return {str(k): _parse(item, v, f"{where}.{k}") for k, v in _object(value, where).items()}
    raise TypeError(f"{where}: no reader for {hint!r}")  # a schema bug, not a damaged file


def _number(kind: type, value: Any, where: str) -> float | int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RecordError(f"{where} must be a finite number, got {value!r}")
    if kind is int and value != int(value):
        raise RecordError(f"{where} must be a whole number, got {value!r}")
    return kind(value)


def _tuple(items: tuple, value: Any, where: str, interval: bool) -> tuple:
    if not (isinstance(value, (list, tuple)) and len(value) == len(items)):
        shape = "[low, high]" if interval else f"a list of {len(items)} numbers"
        raise RecordError(f"{where} must be {shape}, got {value!r}")
    out = tuple(_parse(hint, v, where) for hint, v in zip(items, value, strict=True))
    if interval and out[0] > out[1]:
        raise RecordError(f"{where} must be [low, high] with low <= high, got {value!r}")
    return out


def _dataclass(cls: type, value: Any, where: str) -> Any:
    obj = _object(value, where)
    hints = typing.get_type_hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        if f.name not in obj and (f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING):
            continue
        values[f.name] = _field(hints[f.name], obj, f.name, where)
    return cls(**values)


# ---------------------------------------------------------------------------------------------------------
# Writing, and files written before format 2


def _plain(value: Any) -> Any:
    """Dataclasses as objects, tuples as lists: what ``json.dumps`` writes and ``from_json`` reads back."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def upgrade_v1(document: dict[str, Any]) -> dict[str, Any]:
    """A format-1 ``fit.json`` (before 2026-11) as format 2: ``laws.loss.alpha`` -> ``gamma``,
    ``prediction.budget`` (which held 6·N·D) -> ``flops``, the prediction's and the backtest's bootstrap-only
    intervals -> ``bootstrap_interval`` (format 1 had no calibrated interval), ``backtest.inside`` ->
    ``inside_bootstrap``; a surface without ``objective`` was fitted by least squares. Parts of another shape
    are left as they are, for the checks to name."""
    out = {**document, "format_version": FORMAT_VERSION}
    laws = document.get("laws")
    if isinstance(laws, dict) and isinstance(laws.get("loss"), dict):
        loss = {k: v for k, v in laws["loss"].items() if k != "alpha"} | {"gamma": laws["loss"].get("alpha")}
        interval = loss.get("interval")
        if isinstance(interval, dict) and "alpha" in interval:
            loss["interval"] = {("gamma" if k == "alpha" else k): v for k, v in interval.items()}
        loss["form"] = "E + A * C^-gamma"
        out["laws"] = {**laws, "loss": loss}
    if isinstance(laws, dict) and isinstance(laws.get("surface"), dict) and "objective" not in laws["surface"]:
        # fitted before the objective was recorded (707832e): by least squares on the loss
        out["laws"] = {**out.get("laws", laws), "surface": {**laws["surface"], "objective": "least-squares"}}
    prediction = document.get("prediction")
    if isinstance(prediction, dict):
        out["prediction"] = {k: v for k, v in prediction.items() if k not in ("budget", "interval")} | {
            "flops": prediction.get("budget"),
            "interval": None,
            "bootstrap_interval": prediction.get("interval"),
        }
    backtest = document.get("backtest")
    if isinstance(backtest, dict) and isinstance(backtest.get("runs"), list):
        runs = [
            {k: v for k, v in r.items() if k != "interval"} | {"bootstrap_interval": r.get("interval")}
            if isinstance(r, dict)
            else r
            for r in backtest["runs"]
        ]
        held_out = [backtest["budget"]] if "budget" in backtest else []
        rest = {k: v for k, v in backtest.items() if k not in ("budget", "inside", "runs", "method")}
        out["backtest"] = rest | {
            "runs": runs,
            "held_out_budgets": held_out,
            "inside_bootstrap": backtest.get("inside"),
        }
    return out
