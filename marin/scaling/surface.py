"""The loss surface L(N, D) = E + A/N^alpha + B/D^beta over any runs, with calibrated prediction intervals.

    shape = fit_loss_surface(n, d, y)              # N, D and losses of the runs; 1000 bootstrap samples, seed 0
    p = shape.predict(6.9e9, 1.4e11)               # one run at (N, D)
    p.loss, p.interval, p.bootstrap_interval, p.extrapolation

**The fit** is Hoffmann et al.'s (2022) approach 3: minimize the Huber loss (``HUBER_DELTA``) of log
predicted minus log measured loss. For fixed (alpha, beta) the surface is linear in (E, A, B), so a grid
over the exponents with non-negative least squares in relative error finds the basins, and a bounded
refinement of the best few finishes. Runs that cannot identify the five parameters (fewer than three
distinct sizes or token counts: E and A, or E and B, then trade off freely) are refused.

**Intervals** have two parts. A residual bootstrap (each sample multiplies the fitted losses by resampled
log residuals and refits; a prediction then takes every sample's surface times every residual) covers the
curve's uncertainty and one run's scatter: ``bootstrap_interval``. It cannot see the law's own form error, which
grows with extrapolation: on public runs its 90% intervals held about half of the runs one to three budgets
out (docs/scaling.md). So the fit is backtested on itself: refitted without its top budget octave (the runs
whose budget exceeds half the largest; a run's budget is its compute 6·N·D unless the caller gives
nominal budgets), it predicts those runs, and each one's |log error| per unit of extrapolation distance
(floored at ln 2, the octave) is kept. ``interval`` is the bootstrap interval widened on each side, in log
space, by the level-quantile of those rates times the target's own extrapolation distance (max of
ln(N/N_max), ln(D/D_max), ln(C/C_max) over the fitted runs, 0 inside them). Where the backtest cannot run
and the target lies outside the runs, ``interval`` is None (``calibration.note`` says why).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

FLOPS_PER_PARAM_TOKEN = 6.0
"""C = 6·N·D: forward (2) plus backward (4) FLOPs per parameter per token."""
DEFAULT_SAMPLES = 1000
"""Bootstrap refits: 50 samples in each 5% tail of a 90% interval."""
DEFAULT_SEED = 0
DEFAULT_LEVEL = 0.9
MIN_DISTINCT = 3
"""Distinct sizes (and token counts) that identify a power law with its offset: with two, E and A trade off."""

EXPONENT_GRID = np.linspace(0.05, 1.5, 30)
EXPONENT_BOUNDS = (0.01, 3.0)
HUBER_DELTA = 1e-3
"""The surface minimizes the Huber loss (this delta) of log predicted - log measured loss, as Hoffmann et al.
(2022) do; chosen over plain least squares on public runs (docs/scaling.md, benchmarks/scaling_public_fit.py)."""
SURFACE_OBJECTIVE = f"huber-log-{HUBER_DELTA:g}"
STARTS = 3
"""Grid points refined from: the best few by the Huber objective (the refinement from the best alone found
the same optimum as a 5,400-start L-BFGS search like Hoffmann et al.'s on all six public fits tried, in
0.05 s instead of 45 s; three for margin)."""
OCTAVE = math.log(2)
"""The backtest holds out the top octave of budget; a held-out run's distance is floored at it."""


class FitError(ValueError):
    """The runs cannot support the fit (a bad loss, too few sizes, a parabola with no minimum, ...)."""


def surface(theta: Sequence[float], n: np.ndarray, d: np.ndarray) -> np.ndarray:
    e, a, alpha, b, beta = theta
    return e + a / n**alpha + b / d**beta


def check_runs(n: np.ndarray, d: np.ndarray, y: np.ndarray, names: Sequence[str] | None = None) -> None:
    """Refuse runs the surface cannot be fitted on, naming the run (or its index) and what is missing."""
    for values, what in ((n, "params"), (d, "tokens"), (y, "loss")):
        bad = np.flatnonzero(~(np.isfinite(values) & (values > 0)))
        if len(bad):
            i = int(bad[0])
            run = repr(names[i]) if names is not None else f"#{i}"
            raise FitError(f"run {run} has {what} {float(values[i])!r}: the surface needs positive finite values")
    if len(y) < 6:
        raise FitError(f"{len(y)} runs: the loss surface has 5 parameters and needs at least 6")
    for values, what, term in ((n, "model sizes", "A/N^alpha"), (d, "token counts", "B/D^beta")):
        distinct = np.unique(np.round(np.log(values), 6))
        if len(distinct) < MIN_DISTINCT:
            shown = ", ".join(f"{v:.3g}" for v in np.exp(distinct))
            raise FitError(
                f"the runs have {len(distinct)} distinct {what} ({shown}): the surface's {term} needs at least "
                f"{MIN_DISTINCT} to be told apart from E; add runs at other {what}"
            )


def _huber(log_residuals: np.ndarray) -> float:
    size = np.abs(log_residuals)
    return float(np.sum(np.where(size <= HUBER_DELTA, 0.5 * size**2, HUBER_DELTA * (size - 0.5 * HUBER_DELTA))))


def _linear_part(alpha: float, beta: float, n: np.ndarray, d: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``[E, A, alpha, B, beta]`` with non-negative (E, A, B) for fixed exponents, least squares in *relative*
    error (each row divided by its loss: log error to first order). The columns are scaled to unit norm
    first: A multiplies N^-alpha, which is 1e-6 at N = 1e6, while E multiplies 1."""
    from scipy.optimize import nnls

    columns = np.stack([np.ones_like(n), n**-alpha, d**-beta], axis=1) / y[:, None]
    scale = np.linalg.norm(columns, axis=0)
    (e, a, b), _ = nnls(columns / scale, np.ones_like(y))
    return np.array([e / scale[0], a / scale[1], alpha, b / scale[2], beta])


def _refine(theta0: np.ndarray, n: np.ndarray, d: np.ndarray, y: np.ndarray, max_evaluations: int) -> np.ndarray:
    """The Huber objective from ``theta0`` over (E, log A, alpha, log B, beta); A, B > 0 by construction and
    the irreducible loss E within [0, min loss] (a loss is never negative, and both other terms are
    positive): without that bound, runs that barely constrain the surface send E far below zero and the
    exponents to their bounds, which also makes every bootstrap refinement slow."""
    from scipy.optimize import least_squares

    e, a, alpha, b, beta = theta0
    start = np.array([e, math.log(max(a, 1e-12)), alpha, math.log(max(b, 1e-12)), beta])
    lo, hi = EXPONENT_BOUNDS
    log_y = np.log(y)

    def log_residuals(p):
        predicted = surface((p[0], math.exp(p[1]), p[2], math.exp(p[3]), p[4]), n, d)
        return np.log(np.maximum(predicted, 1e-300)) - log_y

    bounds = ([0.0, -60, lo, -60, lo], [max(float(y.min()), 1e-6), 60, hi, 60, hi])
    start = np.clip(start, np.array(bounds[0]) + 1e-9, np.array(bounds[1]) - 1e-9)
    p = least_squares(
        log_residuals, start, bounds=bounds, x_scale="jac", loss="huber", f_scale=HUBER_DELTA, max_nfev=max_evaluations
    ).x
    return np.array([p[0], math.exp(p[1]), p[2], math.exp(p[3]), p[4]])


def _cost(theta: np.ndarray, n: np.ndarray, d: np.ndarray, y: np.ndarray) -> float:
    predicted = surface(theta, n, d)
    return _huber(np.log(predicted) - np.log(y)) if np.all(predicted > 0) else math.inf


def fit_surface(n: np.ndarray, d: np.ndarray, y: np.ndarray, start: np.ndarray | None = None) -> np.ndarray:
    """``[E, A, alpha, B, beta]`` minimizing the Huber loss of the log residuals: a grid over (alpha, beta)
    with NNLS for the rest finds the basins, the best ``STARTS`` are refined (or only the refinement from
    ``start``, with a tighter evaluation budget: bootstrap samples start from the full fit). The runs are
    not checked here: ``check_runs`` does that once."""
    if start is not None:
        return _refine(start, n, d, y, max_evaluations=200)
    grid = [_linear_part(alpha, beta, n, d, y) for alpha in EXPONENT_GRID for beta in EXPONENT_GRID]
    grid.sort(key=lambda theta: _cost(theta, n, d, y))
    refined = [_refine(theta, n, d, y, max_evaluations=2000) for theta in grid[:STARTS]]
    return min(refined, key=lambda theta: _cost(theta, n, d, y))


# ---------------------------------------------------------------------------------------------------------
# Extrapolation and the backtest that calibrates the intervals


@dataclasses.dataclass(frozen=True)
class Box:
    """The largest size, token count and compute among the fitted runs."""

    params: float
    tokens: float
    flops: float

    @classmethod
    def of(cls, n: np.ndarray, d: np.ndarray) -> Box:
        return cls(float(n.max()), float(d.max()), float((FLOPS_PER_PARAM_TOKEN * n * d).max()))

    def distance(self, params: float, tokens: float) -> float:
        """How far (N, D) lies past these runs, in e-folds along the furthest of size, tokens and compute."""
        flops = FLOPS_PER_PARAM_TOKEN * params * tokens
        return max(0.0, math.log(params / self.params), math.log(tokens / self.tokens), math.log(flops / self.flops))


def held_out(budgets: np.ndarray) -> np.ndarray:
    """The backtest's held-out runs: the top budget octave (budget above half the largest)."""
    return budgets > budgets.max() / 2


@dataclasses.dataclass(frozen=True)
class Calibration:
    """The backtest's errors: the surface fitted without ``held_out`` runs, predicting them."""

    held_out: np.ndarray
    """Mask over the fit's runs."""
    predicted: np.ndarray
    """The held-out runs' predicted losses (empty when ``note`` says the backtest could not run)."""
    distances: np.ndarray
    """Each held-out run's extrapolation distance from the runs kept."""
    log_errors: np.ndarray
    """ln(actual) - ln(predicted) per held-out run."""
    note: str | None = None

    def widening(self, level: float) -> float | None:
        """Log-interval widening per unit of extrapolation: the ``level`` quantile of |ln error| / distance."""
        if self.note is not None:
            return None
        rates = np.abs(self.log_errors) / np.maximum(self.distances, OCTAVE)
        return float(np.quantile(rates, level))


def calibrate(n: np.ndarray, d: np.ndarray, y: np.ndarray, budgets: np.ndarray) -> Calibration:
    """Refit without the top budget octave and predict it (the runs kept must support a fit on their own)."""
    mask = held_out(budgets)
    keep = ~mask
    empty = np.array([])
    try:
        if not keep.any():
            raise FitError("every run is in the top budget octave")
        check_runs(n[keep], d[keep], y[keep])
    except FitError as e:
        note = f"the backtest cannot fit the {int(keep.sum())} runs below the top budget octave: {e}"
        return Calibration(mask, empty, empty, empty, note)
    theta = fit_surface(n[keep], d[keep], y[keep])
    predicted = surface(theta, n[mask], d[mask])
    box = Box.of(n[keep], d[keep])
    distances = np.array([box.distance(p, t) for p, t in zip(n[mask], d[mask], strict=True)])
    return Calibration(mask, predicted, distances, np.log(y[mask]) - np.log(predicted))


# ---------------------------------------------------------------------------------------------------------
# The fit with its bootstrap, and predictions


@dataclasses.dataclass(frozen=True)
class SurfacePrediction:
    loss: float
    interval: tuple[float, float] | None
    """``bootstrap_interval`` widened by the calibration for ``extrapolation``; None where it cannot be."""
    bootstrap_interval: tuple[float, float] | None
    extrapolation: float
    level: float


def interval(samples: Sequence[float] | np.ndarray, level: float) -> tuple[float, float] | None:
    """The central ``level`` range of the finite samples; None with fewer than 10 of them."""
    values = np.asarray([np.nan if s is None else s for s in samples], dtype=float)
    values = values[np.isfinite(values)]
    if len(values) < 10:
        return None
    tail = (1 - level) / 2 * 100
    return float(np.percentile(values, tail)), float(np.percentile(values, 100 - tail))


@dataclasses.dataclass(frozen=True)
class SurfaceFit:
    """A fitted surface, its bootstrap refits, its log residuals and the backtest that calibrates it."""

    theta: np.ndarray
    samples: np.ndarray
    """One ``[E, A, alpha, B, beta]`` per bootstrap sample."""
    log_residuals: np.ndarray
    box: Box
    calibration: Calibration

    def predict(self, params: float, tokens: float, *, level: float = DEFAULT_LEVEL) -> SurfacePrediction:
        """One run at (N, D): every bootstrap sample's surface there times every residual (so the interval
        covers a single run's scatter, not only the curve's; all pairs, so no draw is left to chance), then
        widened for extrapolation (module docstring)."""
        curves = np.array([float(surface(t, params, tokens)) for t in self.samples])
        draws = np.outer(curves, np.exp(self.log_residuals)).ravel()
        loss = float(surface(self.theta, params, tokens))
        bootstrap = interval(draws, level)
        if bootstrap is not None:  # with no scatter a percentile lands a rounding error past the point estimate
            bootstrap = (min(bootstrap[0], loss), max(bootstrap[1], loss))
        distance = self.box.distance(params, tokens)
        rate = self.calibration.widening(level) if distance > 0 else 0.0
        widened = None
        if bootstrap is not None and rate is not None:
            widened = (bootstrap[0] * math.exp(-rate * distance), bootstrap[1] * math.exp(rate * distance))
        return SurfacePrediction(loss, widened, bootstrap, distance, level)


def fit_loss_surface(
    n: np.ndarray,
    d: np.ndarray,
    y: np.ndarray,
    *,
    budgets: np.ndarray | None = None,
    names: Sequence[str] | None = None,
    samples: int = DEFAULT_SAMPLES,
    rng: np.random.Generator | None = None,
) -> SurfaceFit:
    """The surface over any runs (an isoFLOP grid or not), its residual bootstrap (each sample multiplies the
    fitted losses by resampled residuals, in log space where the fit measures them, and refits) and its
    calibrating backtest. ``budgets``: each run's nominal budget (default its compute 6·N·D), which decides
    the backtest's held-out octave; ``names`` name runs in errors; ``rng`` defaults to ``DEFAULT_SEED``."""
    n, d, y = (np.asarray(v, dtype=float) for v in (n, d, y))
    check_runs(n, d, y, names)
    rng = rng if rng is not None else np.random.default_rng(DEFAULT_SEED)
    theta = fit_surface(n, d, y)
    fitted = surface(theta, n, d)
    log_residuals = np.log(y) - np.log(fitted)
    refits = [
        fit_surface(n, d, fitted * np.exp(rng.choice(log_residuals, size=len(y))), start=theta) for _ in range(samples)
    ]
    budgets = FLOPS_PER_PARAM_TOKEN * n * d if budgets is None else np.asarray(budgets, dtype=float)
    calibration = calibrate(n, d, y, budgets)
    return SurfaceFit(theta, np.array(refits).reshape(-1, 5), log_residuals, Box.of(n, d), calibration)


def compute_optimal(theta: Sequence[float], budget: float) -> tuple[float, float, float]:
    """``(N*, D*, L*)``: the size and tokens that minimize the surface's loss at compute ``budget`` (FLOPs,
    C = 6·N·D), and that loss. Closed form (Hoffmann et al. 2022, eq. 4): N* = G·(C/6)^(beta/(alpha+beta)) with
    G = (alpha·A / (beta·B))^(1/(alpha+beta)), D* = C / (6·N*). ``theta`` is ``[E, A, alpha, B, beta]``."""
    e, a, alpha, b, beta = theta
    g = (alpha * a / (beta * b)) ** (1 / (alpha + beta))
    half = budget / FLOPS_PER_PARAM_TOKEN
    n = g * half ** (beta / (alpha + beta))
    d = half / n
    return n, d, e + a / n**alpha + b / d**beta


def frontier_law(theta: Sequence[float]) -> tuple[float, float, float]:
    """``(E, A', gamma)`` with L*(C) = E + A'·C^-gamma, the surface's compute-optimal loss (exact)."""
    e, a, alpha, b, beta = theta
    gamma = alpha * beta / (alpha + beta)
    _, _, loss_at_1 = compute_optimal(theta, 1.0)
    return e, loss_at_1 - e, gamma
