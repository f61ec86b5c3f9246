"""Scaling-law fits over an isoFLOP ladder: compute-optimal size and tokens, a loss law, a checked prediction.

    fit = fit_ladder(runs, target=Target(name="checkpoints/ladder-target", params=2.1e6, tokens=8e6))
    fit["laws"]["params_opt"]   # N*(C) = k * C^a, with bootstrap intervals
    fit["prediction"]           # the target's loss, with a prediction interval
    fit["backtest"]             # the largest budget's runs predicted from the smaller budgets

Every quantity uses one definition of size: ``params`` is N = (model FLOPs per token) / 6, so that a run's
compute is exactly C = 6·N·D (D its training tokens) and N is the count of parameters that multiply
activations plus the attention term (PaLM's accounting, ``LlamaConfig.flops_per_token``). The loss is what
the ladder measured on its held-out set (bits per byte).

Two fits, as in Hoffmann et al. (2022), both from the same runs:

1. **IsoFLOP parabolas** (their approach 2, what Marin's ladder tooling does): per budget, loss against
   x = log10 N is fitted with a parabola; its vertex gives N*(C), D*(C) = C / (6 N*) and L*(C). Power laws
   N* = k·C^a and D* = k'·C^b are then fitted across budgets (straight lines in log-log).
2. **A loss surface** (their approach 3): L(N, D) = E + A/N^alpha + B/D^beta over every run, minimizing
   their objective, the Huber loss of log predicted - log measured loss (``HUBER_DELTA``; chosen over plain
   least squares on public runs). For fixed (alpha, beta) the surface is linear in (E, A, B), so a grid
   over the exponents with non-negative least squares in relative error finds the basins, and a bounded
   refinement of the best few finishes. Its compute-optimal frontier is exactly L*(C) = E + A'·C^-gamma
   with gamma = alpha·beta / (alpha + beta) (``laws.loss``), and it predicts the target run at the
   target's own N and D, which need not be compute-optimal. ``fit_loss_surface`` fits it over any runs.

Intervals come from a residual bootstrap: each sample adds resampled residuals of the fit to its fitted
values (the surface's in log space, where it measures them) and refits (the parabolas per budget, the
surface over all runs). The prediction interval also applies one resampled residual to each sample's
predicted loss, so it covers a single run's scatter (seed, data order), not only the uncertainty of the
curve: the actual target run is one such draw.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

FLOPS_PER_PARAM_TOKEN = 6.0
"""C = 6·N·D: forward (2) plus backward (4) FLOPs per parameter per token."""


class FitError(ValueError):
    """The runs cannot support the fit (too few sizes per budget, a parabola with no minimum, ...)."""


@dataclasses.dataclass(frozen=True)
class Run:
    """One finished ladder run: its budget (FLOPs), size N (FLOPs per token / 6), tokens D and loss."""

    budget: float
    params: float
    tokens: float
    loss: float
    name: str = ""

    @property
    def flops(self) -> float:
        return FLOPS_PER_PARAM_TOKEN * self.params * self.tokens


@dataclasses.dataclass(frozen=True)
class Target:
    """The run to predict: its name, N and D (it has its own budget, 6·N·D)."""

    name: str
    params: float
    tokens: float


# ---------------------------------------------------------------------------------------------------------
# Approach 2: isoFLOP parabolas and power laws


def parabola(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``[a, b, c]`` of y = a·x² + b·x + c by least squares."""
    return np.polyfit(x, y, 2)


def vertex(coefficients: Sequence[float]) -> tuple[float, float] | None:
    """``(x*, y*)`` of a parabola's minimum; None when it opens downward (no minimum)."""
    a, b, c = coefficients
    if a <= 0:
        return None
    x = -b / (2 * a)
    return x, c - b * b / (4 * a)


def power_law(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """``(k, a)`` of y = k·x^a, fitted as a straight line in log10-log10."""
    slope, intercept = np.polyfit(np.log10(x), np.log10(y), 1)
    return float(10**intercept), float(slope)


def by_budget(runs: Sequence[Run]) -> dict[float, list[Run]]:
    groups: dict[float, list[Run]] = {}
    for run in runs:
        groups.setdefault(run.budget, []).append(run)
    return dict(sorted(groups.items()))


def isoflop_optima(budgets: dict[float, list[Run]], losses: dict[float, np.ndarray] | None = None):
    """Per budget: parabola coefficients and the vertex ``(N*, L*)`` (None where there is no minimum).

    ``losses`` replaces the measured losses (a bootstrap sample), budget by budget, in run order."""
    out = {}
    for budget, runs in budgets.items():
        x = np.log10([r.params for r in runs])
        y = losses[budget] if losses is not None else np.array([r.loss for r in runs])
        coefficients = parabola(x, y)
        v = vertex(coefficients)
        out[budget] = (coefficients, None if v is None else (10 ** v[0], v[1]))
    return out


# ---------------------------------------------------------------------------------------------------------
# Approach 3: the loss surface L(N, D) = E + A/N^alpha + B/D^beta

EXPONENT_GRID = np.linspace(0.05, 1.5, 30)
EXPONENT_BOUNDS = (0.01, 3.0)
HUBER_DELTA = 1e-3
"""The surface minimizes the Huber loss (this delta) of log predicted - log measured loss, as Hoffmann et al.
(2022) do. Chosen on public runs nobody here trained (Gadre et al. 2024: 104 open_lm models, 11M-6.9B
parameters, three data sets; ``tests/data/open_lm_scaling``): fitted on the four sizes up to 412M, plain
least squares on the loss predicted the 1.4B and 6.9B runs' C4 loss 5.8% off on average (6.9B: 8-13% too
low), this objective 2.5% (6.9B: 3-8% too low); a run stopped inside its warmup sits 0.5 nats above the
law: it drags a squares fit and barely moves this one (docs/scaling.md)."""
SURFACE_OBJECTIVE = f"huber-log-{HUBER_DELTA:g}"
STARTS = 3
"""Grid points refined from: the best few by the Huber objective (the refinement from the best alone found
the same optimum as a 5,400-start L-BFGS search like Hoffmann et al.'s on all six public fits tried, in
0.05 s instead of 45 s; three for margin)."""


def surface(theta: Sequence[float], n: np.ndarray, d: np.ndarray) -> np.ndarray:
    e, a, alpha, b, beta = theta
    return e + a / n**alpha + b / d**beta


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
    ``start``, with a tighter evaluation budget: bootstrap samples start from the full fit)."""
    if np.any(y <= 0):
        raise FitError(f"losses must be positive to fit in log space; got {float(y.min())}")
    if start is not None:
        return _refine(start, n, d, y, max_evaluations=200)
    grid = [_linear_part(alpha, beta, n, d, y) for alpha in EXPONENT_GRID for beta in EXPONENT_GRID]
    grid.sort(key=lambda theta: _cost(theta, n, d, y))
    refined = [_refine(theta, n, d, y, max_evaluations=2000) for theta in grid[:STARTS]]
    return min(refined, key=lambda theta: _cost(theta, n, d, y))


@dataclasses.dataclass(frozen=True)
class SurfaceFit:
    """A fitted surface, its bootstrap refits and its log residuals (what a bootstrap sample redraws)."""

    theta: np.ndarray
    samples: np.ndarray
    """One ``[E, A, alpha, B, beta]`` per bootstrap sample."""
    log_residuals: np.ndarray

    def predict(self, params: float, tokens: float, rng: np.random.Generator, level: float):
        """``(loss, interval)`` of one run at (N, D): each sample's surface there times one resampled
        residual, so the interval covers a single run's scatter (seed, data order), not only the curve's."""
        draws = [float(surface(t, params, tokens)) * math.exp(rng.choice(self.log_residuals)) for t in self.samples]
        return float(surface(self.theta, params, tokens)), _interval(draws, level)


def fit_loss_surface(
    n: np.ndarray, d: np.ndarray, y: np.ndarray, *, samples: int, rng: np.random.Generator
) -> SurfaceFit:
    """The surface over any runs (an isoFLOP grid or not) with a residual bootstrap: each sample multiplies
    the fitted losses by resampled residuals (in log space, where the fit measures them) and refits."""
    if len(y) < 6:
        raise FitError(f"{len(y)} runs: the loss surface has 5 parameters and needs at least 6")
    theta = fit_surface(n, d, y)
    fitted = surface(theta, n, d)
    log_residuals = np.log(y) - np.log(fitted)
    refits = [
        fit_surface(n, d, fitted * np.exp(rng.choice(log_residuals, size=len(y))), start=theta) for _ in range(samples)
    ]
    return SurfaceFit(theta, np.array(refits).reshape(-1, 5), log_residuals)


def compute_optimal(theta: Sequence[float], budget: float) -> tuple[float, float, float]:
    """``(N*, D*, L*)`` of the surface at compute ``budget`` (closed form, C = 6·N·D)."""
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


# ---------------------------------------------------------------------------------------------------------
# The whole fit, with bootstrap intervals


def _interval(samples: Sequence[float], level: float) -> list[float] | None:
    values = np.asarray([s for s in samples if s is not None and np.isfinite(s)], dtype=float)
    if len(values) < 10:
        return None
    tail = (1 - level) / 2 * 100
    return [float(np.percentile(values, tail)), float(np.percentile(values, 100 - tail))]


def _power_laws(budgets: np.ndarray, n_opt: np.ndarray) -> tuple[float, float, float, float]:
    """``(k_N, a_N, k_D, a_D)`` of N* = k_N·C^a_N and D* = C / (6 N*) = k_D·C^a_D."""
    k_n, a_n = power_law(budgets, n_opt)
    k_d, a_d = power_law(budgets, budgets / (FLOPS_PER_PARAM_TOKEN * n_opt))
    return k_n, a_n, k_d, a_d


def _law(coefficient: float, exponent: float, coefficients: list, exponents: list, level: float) -> dict:
    return {
        "form": "k * C^a",
        "coefficient": coefficient,
        "exponent": exponent,
        "interval": {"coefficient": _interval(coefficients, level), "exponent": _interval(exponents, level)},
    }


BACKTEST_SAMPLES = 200
"""Bootstrap samples of the backtest's fit (at most the ladder's own): its intervals need not be as fine."""


def backtest(runs: Sequence[Run], *, samples: int, rng: np.random.Generator, level: float) -> dict[str, Any]:
    """The check a ladder can make on itself before its target runs: the surface fitted on every budget but
    the largest predicts the largest budget's runs. Its errors say how far this ladder's extrapolation can
    be trusted (one budget out, where the target is usually 4x or more)."""
    budgets = by_budget(runs)
    top = max(budgets)
    below = [r for r in runs if r.budget < top]
    if len(budgets) < 2 or len(below) < 6:
        return {"note": f"{len(below)} runs below the largest budget: the backtest's surface needs at least 6"}
    n, d, y = (np.array([getattr(r, key) for r in below]) for key in ("params", "tokens", "loss"))
    shape = fit_loss_surface(n, d, y, samples=samples, rng=rng)
    checked = []
    for r in budgets[top]:
        predicted, interval = shape.predict(r.params, r.tokens, rng, level)
        checked.append(
            {"run": r.name, "params": r.params, "tokens": r.tokens, "actual": r.loss, "predicted": predicted}
            | {"interval": interval, "error": (r.loss - predicted) / r.loss}
        )
    return {
        "method": "the loss surface fitted on the budgets below the largest predicts the largest budget's runs",
        "budget": top,
        "fitted_runs": len(below),
        "runs": checked,
        "mean_abs_error": float(np.mean([abs(c["error"]) for c in checked])),
        "inside": sum(
            c["interval"] is not None and c["interval"][0] <= c["actual"] <= c["interval"][1] for c in checked
        ),
        "level": level,
    }


def fit_ladder(
    runs: Sequence[Run],
    target: Target | None = None,
    *,
    samples: int = 1000,
    seed: int = 0,
    level: float = 0.9,
) -> dict[str, Any]:
    """The ladder's fit as ``fit.json`` holds it (without run paths, which the step adds).

    A budget whose parabola has no minimum (its sizes do not bracket an optimum) is reported as such, with
    ``params_opt`` None, and left out of the power laws, which need two budgets with a minimum (else they
    are None, with the reason). The loss surface and the prediction use every run either way."""
    budgets = by_budget(runs)
    for budget, group in budgets.items():
        if len({r.params for r in group}) < 3:
            raise FitError(f"budget {budget:.3g} has {len(group)} run sizes; a parabola needs at least 3")
    if len(budgets) < 2:
        raise FitError(f"{len(budgets)} budget(s): the power laws need at least 2 (3 or more to check them)")
    n, d, y = (np.array([getattr(r, key) for r in runs]) for key in ("params", "tokens", "loss"))
    if len(runs) < 6:
        raise FitError(f"{len(runs)} runs: the loss surface has 5 parameters and needs at least 6")
    if min(y) <= 0:
        raise FitError(f"run {runs[int(np.argmin(y))].name or int(np.argmin(y))} has loss {min(y)}: losses must be > 0")
    optima = isoflop_optima(budgets)
    usable = [b for b, (_, v) in optima.items() if v is not None]
    c = np.array(usable)
    laws = _power_laws(c, np.array([optima[b][1][0] for b in usable])) if len(usable) >= 2 else None

    rng = np.random.default_rng(seed)
    boot: dict[str, list] = {key: [] for key in ("k_n", "a_n", "k_d", "a_d")}
    boot_n_opt: dict[float, list] = {b: [] for b in usable}
    log_n = {b: np.log10([r.params for r in group]) for b, group in budgets.items()}
    fitted = {b: np.polyval(optima[b][0], log_n[b]) for b in usable}
    budget_residuals = {b: np.array([r.loss for r in budgets[b]]) - fitted[b] for b in usable}
    failed = 0
    for _ in range(samples):
        sample = {b: fitted[b] + rng.choice(budget_residuals[b], size=len(fitted[b])) for b in usable}
        sampled = isoflop_optima({b: budgets[b] for b in usable}, sample)
        if laws is not None and all(v is not None for _, v in sampled.values()):
            ns = np.array([sampled[b][1][0] for b in usable])
            for b, value in zip(usable, ns, strict=True):
                boot_n_opt[b].append(value)
            for key, value in zip(("k_n", "a_n", "k_d", "a_d"), _power_laws(c, ns), strict=True):
                boot[key].append(value)
        else:
            failed += 1

    shape = fit_loss_surface(n, d, y, samples=samples, rng=rng)
    theta, thetas = shape.theta, shape.samples
    residuals = y - surface(theta, n, d)
    frontier_b = np.array([frontier_law(t) for t in thetas])
    e_law, a_law, gamma = frontier_law(theta)
    surface_names = ("E", "A", "alpha", "B", "beta")

    def budget_record(b: float, group: list[Run]) -> dict[str, Any]:
        coefficients, vertex_ = optima[b]
        record: dict[str, Any] = {"budget": b, "quadratic": [float(v) for v in coefficients]}
        if vertex_ is None:
            return record | {
                "params_opt": None,
                "tokens_opt": None,
                "loss_opt": None,
                "params_opt_interval": None,
                "bracketed": False,
                "note": "the loss curves downward over these sizes: no minimum (add smaller and larger sizes)",
            }
        n_star, loss_star = vertex_
        return record | {
            "params_opt": float(n_star),
            "tokens_opt": float(b / (FLOPS_PER_PARAM_TOKEN * n_star)),
            "loss_opt": float(loss_star),
            "params_opt_interval": _interval(boot_n_opt[b], level),
            # an optimum outside the sizes run is an extrapolation: the grid should bracket it
            "bracketed": bool(min(r.params for r in group) <= n_star <= max(r.params for r in group)),
        }

    out: dict[str, Any] = {
        "kind": "isoflop_fit",
        "params_definition": "model FLOPs per token / 6, so that a run's compute is 6 * params * tokens",
        "runs": [
            {"budget": r.budget, "run": r.name, "params": r.params, "tokens": r.tokens, "flops": r.flops}
            | {"loss": r.loss}
            for r in runs
        ],
        "budgets": [budget_record(b, group) for b, group in budgets.items()],
        "laws": {
            "params_opt": None if laws is None else _law(laws[0], laws[1], boot["k_n"], boot["a_n"], level),
            "tokens_opt": None if laws is None else _law(laws[2], laws[3], boot["k_d"], boot["a_d"], level),
            "loss": {
                "form": "E + A * C^-alpha",
                "E": e_law,
                "A": a_law,
                "alpha": gamma,
                "interval": {name: _interval(frontier_b[:, i], level) for i, name in enumerate(("E", "A", "alpha"))},
            },
            "surface": {
                "form": "E + A / N^alpha + B / D^beta",
                **{name: float(v) for name, v in zip(surface_names, theta, strict=True)},
                "interval": {name: _interval(thetas[:, i], level) for i, name in enumerate(surface_names)},
                "residual_rms": float(np.sqrt(np.mean(residuals**2))),
                "objective": SURFACE_OBJECTIVE,
            },
        },
        "bootstrap": {"samples": samples, "seed": seed, "level": level, "parabola_samples_without_minimum": failed},
    }
    if laws is None:
        out["laws"]["note"] = (
            f"{len(usable)} budget(s) with a minimum: N*(C) and D*(C) need 2; the loss surface uses every run"
        )
    if target is not None:
        predicted, interval = shape.predict(target.params, target.tokens, rng, level)
        out["prediction"] = {
            "run": target.name,
            "budget": FLOPS_PER_PARAM_TOKEN * target.params * target.tokens,
            "params": target.params,
            "tokens": target.tokens,
            "loss": predicted,
            "interval": interval,
            "level": level,
            "method": "loss surface at the target's N and D; interval: residual bootstrap plus one run's scatter",
        }
    out["backtest"] = backtest(runs, samples=min(samples, BACKTEST_SAMPLES), rng=rng, level=level)
    return out
