"""A scaling ladder's fit (``/fit?path=<analysis step>``, JSON at ``/api/fit``): the isoFLOP points and
parabolas per budget, the N*(C), D*(C) and loss laws with their intervals, and the target run's predicted
against its actual loss (``fit.py``); the analysis step's own plots at ``/fit/plot``. The JSON is
``{"path", "fit": {"url", "record": <fit.json as marin.scaling.record reads it>, "errors", "actual"}}``."""

from __future__ import annotations

import math

from fastapi import APIRouter, Response

from data_browser import fit as fits
from data_browser.experiments import read_json
from data_browser.readers import ReadFailure, read_bounded
from data_browser.runs import PALETTE
from data_browser.step_files import FIT_FILE, step_files
from data_browser.web import BrowserState, State, page
from marin.scaling.record import FitRecord
from marin.storage import exists, join

router = APIRouter()
SAMPLES = 40


def _log_space(low: float, high: float, n: int = SAMPLES) -> list[float]:
    a, b = math.log10(low), math.log10(high)
    return [10 ** (a + (b - a) * i / (n - 1)) for i in range(n)]


def isoflop_chart(fit: FitRecord) -> dict | None:
    """Loss against log10(params): each budget's runs as points and its fitted parabola, one colour each."""
    budgets = sorted({b.budget for b in fit.budgets} | {r.budget for r in fit.runs})
    if not budgets:
        return None
    series = []
    for i, budget in enumerate(budgets):
        color, label = PALETTE[i % len(PALETTE)], f"C={budget:.3g}"
        runs = [r for r in fit.runs if math.isclose(r.budget, budget, rel_tol=1e-9) and r.params > 0]
        xs = [math.log10(r.params) for r in runs]
        if runs:
            series.append({"label": label, "color": color, "points": True, "x": xs, "y": [r.loss for r in runs]})
        parabola = next((b for b in fit.budgets if math.isclose(b.budget, budget, rel_tol=1e-9)), None)
        has_optimum = (parabola.params_opt or 0) > 0 if parabola else False
        if parabola and (xs or has_optimum):
            center = math.log10(parabola.params_opt) if has_optimum else sum(xs) / len(xs)
            lo, hi = (min(xs) - 0.15, max(xs) + 0.15) if xs else (center - 0.5, center + 0.5)
            grid = [lo + (hi - lo) * k / (SAMPLES - 1) for k in range(SAMPLES)]
            a, b, c = parabola.quadratic
            series.append(
                {"label": f"{label} fit", "color": color, "x": grid, "y": [a * x * x + b * x + c for x in grid]}
            )
    return {
        "key": "isoflop",
        "title": f"{fit.metric or 'loss'} against log10(params), per FLOP budget",
        "xLabel": "log10(params)",
        "series": series,
    }


LAW_TITLES = {"params": "N*(C): loss-optimal params", "tokens": "D*(C): loss-optimal tokens"}


def law_chart(fit: FitRecord, actual: fits.Actual | None, key: str) -> dict | None:
    """N*(C) (``params``), D*(C) (``tokens``) or the loss law against compute, log-log but for loss. The
    target sits at its own compute (6·N·D), where the laws are evaluated."""
    law = {"params": fit.laws.params_opt, "tokens": fit.laws.tokens_opt, "loss": fit.laws.loss}[key]
    budgets = [b for b in fit.budgets if b.budget > 0]
    if law is None and not budgets:
        return None
    points = [(b.budget, getattr(b, f"{key}_opt")) for b in budgets if getattr(b, f"{key}_opt") is not None]
    series = [_points("per budget (fit)", PALETTE[0], points)]
    target = fit.prediction
    ends = [p[0] for p in points] + ([target.flops] if target and target.flops > 0 else [])
    if law is not None and ends:
        grid = _log_space(min(ends), max(ends)) if min(ends) < max(ends) else [min(ends)]
        series.append({"label": "law", "color": PALETTE[1], "x": grid, "y": [law.at(c) for c in grid]})
    if target:
        predicted = {"params": target.params, "tokens": target.tokens, "loss": target.loss}[key]
        series.append(_points("target (predicted)", PALETTE[3], [(target.flops, predicted)]))
        if key == "loss" and actual and actual.loss is not None:
            series.append(_points("target (actual)", PALETTE[2], [(target.flops, actual.loss)]))
    title = LAW_TITLES.get(key, f"{fit.metric or 'loss'} law")
    return {"key": key, "title": title, "xLabel": "FLOPs", "xLog": True, "yLog": key != "loss", "series": series}


def _points(label: str, color: str, points: list[tuple[float, float]]) -> dict:
    return {"label": label, "color": color, "points": True, "x": [p[0] for p in points], "y": [p[1] for p in points]}


def _fit_page(state: BrowserState, data: dict) -> dict:
    view: fits.FitView = data["fit"]
    fit = view.record
    charts = [isoflop_chart(fit)] + [law_chart(fit, view.actual, k) for k in ("params", "tokens", "loss")]
    plots = [p for p in fit.plots if p.endswith(".png") and "/" not in p and state.allowed(join(data["path"], p))]
    steps = [r.run_path for r in fit.runs] + [fit.prediction.run_path if fit.prediction else None]
    steps += [fit.prediction.eval_path if fit.prediction else None]
    return {
        "charts": [c for c in charts if c],
        "plots": [p for p in plots if exists(join(data["path"], p))],
        "linked": {s for s in steps if s and state.allowed(s) and step_files(s).training},  # only pages that exist
    }


@page(router, html="/fit", template="fit.html", api="/api/fit", context=_fit_page)
def fit_data(state: State, path: str) -> dict:
    path, limit = state.resolve(path), state.config.max_json_bytes
    url = state.resolve(join(path, FIT_FILE))
    if not exists(url):
        raise FileNotFoundError(f"{url} (not the output of a ladder's analysis step)")
    try:
        view = fits.read_fit(url, read_json(url, limit))
    except (ReadFailure, OSError) as e:
        view = fits.FitView(url, FitRecord(), errors={"file": str(e)})

    def target_results(results_url: str):
        if not state.allowed(results_url):
            raise ReadFailure(f"{results_url}: outside the browser's roots, not read")
        return read_json(state.resolve(results_url), limit)

    if view.record.prediction is not None:
        view.actual = fits.actual_loss(view.record.prediction, view.record.heldout, target_results)
    return {"path": path, "fit": view}


@router.get("/fit/plot")
def fit_plot(state: State, path: str, name: str) -> Response:
    """One of the PNG plots a fit lists (``fit.json``'s ``plots``), from the analysis step's directory."""
    path = state.resolve(path)
    if "/" in name or not name.endswith(".png"):
        raise ReadFailure(f"{name!r}: only a .png file of the fit's own directory is served")
    url = state.resolve(join(path, name))
    return Response(read_bounded(url, state.config.max_json_bytes), media_type="image/png")
