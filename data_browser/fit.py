"""A scaling ladder's analysis for ``/fit``: its ``fit.json`` checked part by part, and the target run's
actual loss beside the prediction.

The ladder's analysis step writes ``fit.json`` (with ``isoflop.png`` and ``laws.png``) in its output::

    {"kind": "isoflop_fit", "metric": "bpb", "heldout": "stories",
     "runs": [{"budget": 1e12, "run": "checkpoints/ladder-…", "params": 123456, "tokens": 2.6e6, "loss": 1.23, …}],
     "budgets": [{"budget": 1e12, "quadratic": [a, b, c], "params_opt": 3.1e5, "tokens_opt": 5.3e5,
                  "loss_opt": 1.2, "params_opt_interval": [lo, hi]}],
     "laws": {"params_opt": {"coefficient": k, "exponent": a, "interval": {"exponent": [lo, hi], …}},
              "tokens_opt": {…}, "loss": {"form": "E + A * C^-alpha", "E": e, "A": A, "alpha": al, "interval": {…}}},
     "prediction": {"run": "checkpoints/ladder-target-…", "eval_path": "…", "budget": 6e13, "loss": 1.05,
                    "interval": [1.0, 1.1], "level": 0.9, …},
     "bootstrap": {"samples": 1000, "seed": 0}, "plots": ["isoflop.png", "laws.png"]}

A budget's parabola is loss = a·x² + b·x + c with x = log10(params). Each part (``runs``, ``budgets``, each
law, ``prediction``) is checked on its own: a damaged part is an error naming the file and field, shown in
place of that part, and the rest of the page still renders. The actual loss is the target eval's
``<prediction.eval_path>/results.json`` → ``validation[<heldout>].bits_per_byte``; until that exists the
page says "not run yet", and the relative error is (actual − predicted) / actual.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from data_browser.readers import ReadFailure
from data_browser.step_files import RESULTS_FILE
from marin.storage import join

KIND = "isoflop_fit"


class FitError(ValueError):
    """A part of ``fit.json`` is not of the documented shape (the message names the field)."""


@dataclasses.dataclass
class FitRun:
    budget: float
    run: str
    params: float
    loss: float
    run_path: str | None = None
    eval_path: str | None = None
    tokens: float | None = None
    flops: float | None = None


@dataclasses.dataclass
class BudgetFit:
    budget: float
    quadratic: list[float]
    params_opt: float | None
    """None where the parabola has no minimum (it curves downward over the sizes run): see ``note``."""
    tokens_opt: float | None
    loss_opt: float | None
    params_opt_interval: list[float] | None
    bracketed: bool | None = None
    """False when the optimum lies outside the sizes run (an extrapolation)."""
    note: str | None = None


@dataclasses.dataclass
class PowerLaw:
    """``y = coefficient * C ** exponent``, with bootstrap intervals of each."""

    coefficient: float
    exponent: float
    interval: dict[str, list[float] | None]

    def at(self, budget: float) -> float:
        return self.coefficient * budget**self.exponent


@dataclasses.dataclass
class LossLaw:
    """``loss = E + A * C ** -alpha``."""

    E: float  # noqa: N815 (the law's own symbols, as fit.json names them)
    A: float  # noqa: N815
    alpha: float
    interval: dict[str, list[float] | None]
    form: str

    def at(self, budget: float) -> float:
        return self.E + self.A * budget**-self.alpha


@dataclasses.dataclass
class SurfaceLaw:
    """Any other law of ``laws`` (e.g. ``surface``, ``E + A / N^alpha + B / D^beta``), shown as written."""

    form: str
    values: dict[str, float]
    interval: dict[str, list[float] | None]


@dataclasses.dataclass
class Prediction:
    run: str
    budget: float
    loss: float
    interval: list[float] | None
    level: float | None
    run_path: str | None
    eval_path: str | None
    params: float | None
    tokens: float | None
    method: str | None = None


@dataclasses.dataclass
class BacktestRun:
    run: str
    actual: float
    predicted: float
    interval: list[float] | None
    error: float


@dataclasses.dataclass
class Backtest:
    """The ladder's check on itself (``marin.scaling.fit.backtest``): its largest budget predicted from the
    smaller ones; ``note`` alone when it could not run."""

    note: str | None = None
    budget: float | None = None
    fitted_runs: float | None = None
    mean_abs_error: float | None = None
    inside: float | None = None
    runs: list[BacktestRun] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Actual:
    loss: float | None
    """The target's measured loss, None until its eval has run (or when it cannot be read)."""
    relative_error: float | None
    """(actual − predicted) / actual."""
    status: str
    """``measured``, ``not run yet``, or why it cannot be read."""


@dataclasses.dataclass
class Fit:
    url: str
    metric: str | None = None
    heldout: str | None = None
    runs: list[FitRun] | None = None
    budgets: list[BudgetFit] | None = None
    params_law: PowerLaw | None = None
    tokens_law: PowerLaw | None = None
    loss_law: LossLaw | None = None
    other_laws: dict[str, SurfaceLaw] = dataclasses.field(default_factory=dict)
    laws_note: str | None = None
    """Why a law is missing (e.g. fewer than two budgets with a minimum), as the fit says."""
    prediction: Prediction | None = None
    actual: Actual | None = None
    backtest: Backtest | None = None
    bootstrap: dict | None = None
    plots: list[str] = dataclasses.field(default_factory=list)
    errors: dict[str, str] = dataclasses.field(default_factory=dict)
    """Part (``file``, ``runs``, ``budgets``, ``laws.params_opt``, ...) → what is wrong with it."""


def _number(obj: dict, key: str, where: str, optional: bool = False) -> float | None:
    value = obj.get(key)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise FitError(f"{where}.{key} must be a finite number, got {value!r}")
    return value


def _text(obj: dict, key: str, where: str, optional: bool = False) -> str | None:
    value = obj.get(key)
    if (value is None and optional) or isinstance(value, str):
        return value
    raise FitError(f"{where}.{key} must be a string, got {value!r}")


def _object(value: Any, where: str) -> dict:
    if not isinstance(value, dict):
        raise FitError(f"{where} must be an object, got {type(value).__name__}")
    return value


def _pair(value: Any, where: str) -> list[float]:
    if not (isinstance(value, list) and len(value) == 2):
        raise FitError(f"{where} must be [low, high], got {value!r}")
    low, high = (_number({"v": v}, "v", where) for v in value)
    if low > high:
        raise FitError(f"{where} must be [low, high] with low <= high, got {value!r}")
    return [low, high]


def _intervals(obj: dict, where: str) -> dict[str, list[float] | None]:
    """A law's intervals; one may be null (too few finite bootstrap samples to give one)."""
    intervals = _object(obj.get("interval") or {}, f"{where}.interval")
    return {k: None if v is None else _pair(v, f"{where}.interval.{k}") for k, v in intervals.items()}


def _list(value: Any, where: str) -> list[dict]:
    if not isinstance(value, list):
        raise FitError(f"{where} must be a list, got {type(value).__name__}")
    return [_object(item, f"{where}[{i}]") for i, item in enumerate(value)]


def parse_runs(value: Any) -> list[FitRun]:
    runs = []
    for i, r in enumerate(_list(value, "runs")):
        where = f"runs[{i}]"
        runs.append(
            FitRun(
                budget=_number(r, "budget", where),
                run=_text(r, "run", where),
                params=_number(r, "params", where),
                loss=_number(r, "loss", where),
                run_path=_text(r, "run_path", where, optional=True),
                eval_path=_text(r, "eval_path", where, optional=True),
                tokens=_number(r, "tokens", where, optional=True),
                flops=_number(r, "flops", where, optional=True),
            )
        )
    return runs


def parse_budgets(value: Any) -> list[BudgetFit]:
    budgets = []
    for i, b in enumerate(_list(value, "budgets")):
        where = f"budgets[{i}]"
        quadratic = b.get("quadratic")
        if not (isinstance(quadratic, list) and len(quadratic) == 3):
            raise FitError(f"{where}.quadratic must be [a, b, c], got {quadratic!r}")
        interval, bracketed = b.get("params_opt_interval"), b.get("bracketed")
        budgets.append(
            BudgetFit(
                budget=_number(b, "budget", where),
                quadratic=[_number({"q": q}, "q", f"{where}.quadratic") for q in quadratic],
                params_opt=_number(b, "params_opt", where, optional=True),
                tokens_opt=_number(b, "tokens_opt", where, optional=True),
                loss_opt=_number(b, "loss_opt", where, optional=True),
                params_opt_interval=None if interval is None else _pair(interval, f"{where}.params_opt_interval"),
                bracketed=bracketed if isinstance(bracketed, bool) else None,
                note=_text(b, "note", where, optional=True),
            )
        )
    return budgets


def parse_power_law(value: Any, where: str) -> PowerLaw | None:
    """None where the fit has no such law (``laws.note`` says why)."""
    if value is None:
        return None
    law = _object(value, where)
    return PowerLaw(_number(law, "coefficient", where), _number(law, "exponent", where), _intervals(law, where))


def parse_loss_law(value: Any) -> LossLaw:
    law = _object(value, "laws.loss")
    return LossLaw(
        E=_number(law, "E", "laws.loss"),
        A=_number(law, "A", "laws.loss"),
        alpha=_number(law, "alpha", "laws.loss"),
        interval=_intervals(law, "laws.loss"),
        form=_text(law, "form", "laws.loss", optional=True) or "E + A * C^-alpha",
    )


def parse_other_laws(laws: dict) -> dict[str, SurfaceLaw]:
    out = {}
    for name, law in laws.items():
        if name in ("params_opt", "tokens_opt", "loss") or not isinstance(law, dict):
            continue
        where = f"laws.{name}"
        values = {k: _number(law, k, where) for k in law if k not in ("form", "interval")}
        out[name] = SurfaceLaw(_text(law, "form", where, optional=True) or name, values, _intervals(law, where))
    return out


def parse_prediction(value: Any) -> Prediction:
    p = _object(value, "prediction")
    interval = p.get("interval")
    return Prediction(
        run=_text(p, "run", "prediction"),
        budget=_number(p, "budget", "prediction"),
        loss=_number(p, "loss", "prediction"),
        interval=None if interval is None else _pair(interval, "prediction.interval"),
        level=_number(p, "level", "prediction", optional=True),
        run_path=_text(p, "run_path", "prediction", optional=True),
        eval_path=_text(p, "eval_path", "prediction", optional=True),
        params=_number(p, "params", "prediction", optional=True),
        tokens=_number(p, "tokens", "prediction", optional=True),
        method=_text(p, "method", "prediction", optional=True),
    )


def parse_backtest(value: Any) -> Backtest:
    b = _object(value, "backtest")
    if "runs" not in b:
        return Backtest(note=_text(b, "note", "backtest"))
    if not isinstance(b["runs"], list):
        raise FitError(f"backtest.runs must be a list, got {type(b['runs']).__name__}")
    runs = []
    for i, r in enumerate(b["runs"]):
        where = f"backtest.runs[{i}]"
        r = _object(r, where)
        interval = r.get("interval")
        runs.append(
            BacktestRun(
                run=_text(r, "run", where),
                actual=_number(r, "actual", where),
                predicted=_number(r, "predicted", where),
                interval=None if interval is None else _pair(interval, f"{where}.interval"),
                error=_number(r, "error", where),
            )
        )
    return Backtest(
        budget=_number(b, "budget", "backtest"),
        fitted_runs=_number(b, "fitted_runs", "backtest"),
        mean_abs_error=_number(b, "mean_abs_error", "backtest"),
        inside=_number(b, "inside", "backtest"),
        runs=runs,
    )


def parse_fit(url: str, document: Any) -> Fit:
    """Every part of a ``fit.json`` that is of the documented shape; the others become ``errors``."""
    fit = Fit(url)
    if not isinstance(document, dict) or document.get("kind") != KIND:
        found = document.get("kind") if isinstance(document, dict) else type(document).__name__
        fit.errors["file"] = f"{url}: not an isoFLOP fit (expected an object with kind {KIND!r}, got {found!r})"
        return fit
    laws = document.get("laws")
    parts: dict[str, tuple[str, Callable[[], Any]]] = {
        "runs": ("runs", lambda: parse_runs(document.get("runs"))),
        "budgets": ("budgets", lambda: parse_budgets(document.get("budgets"))),
        "laws.params_opt": (
            "params_law",
            lambda: parse_power_law(_object(laws, "laws").get("params_opt"), "laws.params_opt"),
        ),
        "laws.tokens_opt": (
            "tokens_law",
            lambda: parse_power_law(_object(laws, "laws").get("tokens_opt"), "laws.tokens_opt"),
        ),
        "laws.loss": ("loss_law", lambda: parse_loss_law(_object(laws, "laws").get("loss"))),
        "laws.other": ("other_laws", lambda: parse_other_laws(_object(laws, "laws"))),
    }
    if document.get("prediction") is not None:
        parts["prediction"] = ("prediction", lambda: parse_prediction(document["prediction"]))
    if document.get("backtest") is not None:
        parts["backtest"] = ("backtest", lambda: parse_backtest(document["backtest"]))
    for part, (attr, parse) in parts.items():
        try:
            setattr(fit, attr, parse())
        except FitError as e:
            fit.errors[part] = f"{url}: {e}"
    fit.metric = document.get("metric") if isinstance(document.get("metric"), str) else None
    fit.heldout = document.get("heldout") if isinstance(document.get("heldout"), str) else None
    fit.laws_note = laws.get("note") if isinstance(laws, dict) and isinstance(laws.get("note"), str) else None
    fit.bootstrap = document.get("bootstrap") if isinstance(document.get("bootstrap"), dict) else None
    plots = document.get("plots")
    fit.plots = [p for p in plots if isinstance(p, str)] if isinstance(plots, list) else []
    return fit


def actual_loss(prediction: Prediction, heldout: str | None, read_json: Callable[[str], Any]) -> Actual:
    """The target's measured loss from its eval's ``results.json`` (``read_json`` raises ``FileNotFoundError``
    when it is absent, ``Forbidden`` outside the roots, ``ReadFailure`` when damaged)."""
    if not prediction.eval_path:
        return Actual(None, None, "not run yet (the prediction names no eval_path)")
    url = join(prediction.eval_path, RESULTS_FILE)
    try:
        results = read_json(url)
    except FileNotFoundError:
        return Actual(None, None, "not run yet")
    except (ReadFailure, OSError) as e:
        return Actual(None, None, f"cannot be read: {e}")
    try:
        value = results["validation"][heldout]["bits_per_byte"]
    except (KeyError, TypeError):
        value = None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value == 0:
        return Actual(None, None, f"{url} has no validation[{heldout!r}].bits_per_byte")
    return Actual(value, (value - prediction.loss) / value, "measured")
