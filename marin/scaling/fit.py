"""Scaling-law fits over an isoFLOP ladder: compute-optimal size and tokens, a loss law, a checked prediction.

    record = fit_ladder(runs, target=Target(name="checkpoints/ladder-target", params=2.1e6, tokens=8e6))
    record.laws.params_opt      # N*(C) = k * C^a, with bootstrap intervals
    record.prediction           # the target's loss, with a calibrated prediction interval
    record.backtest             # the top budget predicted from the smaller budgets; it calibrates the interval

``fit_ladder`` returns the ``FitRecord`` that ``fit.json`` holds (``marin.scaling.record``). Every quantity
uses one definition of size: ``params`` is N = (model FLOPs per token) / 6, so that a run's compute is
exactly C = 6·N·D (D its training tokens) and N is the count of parameters that multiply activations plus
the attention term (PaLM's accounting, ``LlamaConfig.flops_per_token``). The loss is what the ladder
measured on its held-out set (bits per byte).

Two fits, as in Hoffmann et al. (2022), both from the same runs:

1. **IsoFLOP parabolas** (their approach 2, what Marin's ladder tooling does): per budget, loss against
   x = log10 N is fitted with a parabola; its vertex gives N*(C), D*(C) = C / (6 N*) and L*(C). Power laws
   N* = k·C^a and D* = k'·C^b are then fitted across budgets (straight lines in log-log), with intervals
   from a residual bootstrap of each budget's parabola.
2. **A loss surface** (their approach 3, ``marin.scaling.surface``) over every run. Its compute-optimal
   frontier is exactly L*(C) = E + A'·C^-gamma with gamma = alpha·beta / (alpha + beta) (``laws.loss``),
   and it predicts the target run at the target's own N and D, which need not be compute-optimal, with an
   interval calibrated by the ladder's own backtest.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from marin.scaling.record import (
    Backtest,
    BacktestRun,
    Bootstrap,
    BudgetFit,
    FitRecord,
    FrontierLaw,
    LadderRun,
    Laws,
    PowerLaw,
    Prediction,
    SkippedRun,
    SurfaceLaw,
)
from marin.scaling.surface import (
    DEFAULT_LEVEL,
    DEFAULT_SAMPLES,
    DEFAULT_SEED,
    FLOPS_PER_PARAM_TOKEN,
    SURFACE_OBJECTIVE,
    FitError,
    SurfaceFit,
    fit_loss_surface,
    frontier_law,
    interval,
    surface,
)

__all__ = ["FitError", "Run", "Target", "backtest", "fit_ladder"]


@dataclasses.dataclass(frozen=True)
class Run:
    """One finished ladder run: its budget (nominal FLOPs), size N (FLOPs per token / 6), tokens D and loss."""

    budget: float
    params: float
    tokens: float
    loss: float
    name: str = ""

    @property
    def flops(self) -> float:
        return FLOPS_PER_PARAM_TOKEN * self.params * self.tokens

    def problem(self) -> str | None:
        """Why the fit cannot use this run (a loss that is NaN, infinite or not positive, ...), or None."""
        for what in ("loss", "params", "tokens", "budget"):
            value = getattr(self, what)
            if not (math.isfinite(value) and value > 0):
                return f"{what} is {value!r}"
        return None


@dataclasses.dataclass(frozen=True)
class Target:
    """The run to predict: its name, N and D (its compute is 6·N·D), and its nominal budget if it has one."""

    name: str
    params: float
    tokens: float
    budget: float | None = None


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


def _power_laws(budgets: np.ndarray, n_opt: np.ndarray) -> tuple[float, float, float, float]:
    """``(k_N, a_N, k_D, a_D)`` of N* = k_N·C^a_N and D* = C / (6 N*) = k_D·C^a_D."""
    k_n, a_n = power_law(budgets, n_opt)
    k_d, a_d = power_law(budgets, budgets / (FLOPS_PER_PARAM_TOKEN * n_opt))
    return k_n, a_n, k_d, a_d


@dataclasses.dataclass
class ParabolaBootstrap:
    """Per-budget N* samples and the power laws' samples from a residual bootstrap of each parabola."""

    n_opt: dict[float, list[float]]
    laws: list[tuple[float, float, float, float]]
    without_minimum: int = 0


def bootstrap_parabolas(budgets: dict[float, list[Run]], optima: dict, samples: int, rng: np.random.Generator):
    """Each sample adds resampled residuals to each usable budget's fitted parabola and refits; a sample in
    which some budget has no minimum counts in ``without_minimum`` and gives no law sample."""
    usable = [b for b, (_, v) in optima.items() if v is not None]
    fitted = {b: np.polyval(optima[b][0], np.log10([r.params for r in budgets[b]])) for b in usable}
    residuals = {b: np.array([r.loss for r in budgets[b]]) - fitted[b] for b in usable}
    out = ParabolaBootstrap({b: [] for b in usable}, [])
    for _ in range(samples):
        sample = {b: fitted[b] + rng.choice(residuals[b], size=len(fitted[b])) for b in usable}
        sampled = isoflop_optima({b: budgets[b] for b in usable}, sample)
        if any(v is None for _, v in sampled.values()):
            out.without_minimum += 1
            continue
        ns = np.array([sampled[b][1][0] for b in usable])
        for b, value in zip(usable, ns, strict=True):
            out.n_opt[b].append(float(value))
        if len(usable) >= 2:
            out.laws.append(_power_laws(np.array(usable), ns))
    return out


def budget_record(budget: float, group: list[Run], optimum, n_opt_samples: list[float], level: float) -> BudgetFit:
    coefficients, vertex_ = optimum
    quadratic = tuple(float(v) for v in coefficients)
    if vertex_ is None:
        note = "the loss curves downward over these sizes: no minimum (add smaller and larger sizes)"
        return BudgetFit(budget, quadratic, None, None, None, None, bracketed=False, note=note)
    n_star, loss_star = vertex_
    return BudgetFit(
        budget,
        quadratic,
        params_opt=float(n_star),
        tokens_opt=float(budget / (FLOPS_PER_PARAM_TOKEN * n_star)),
        loss_opt=float(loss_star),
        params_opt_interval=interval(n_opt_samples, level),
        # an optimum outside the sizes run is an extrapolation: the grid should bracket it
        bracketed=bool(min(r.params for r in group) <= n_star <= max(r.params for r in group)),
    )


def _power_law_records(optima: dict, boot: ParabolaBootstrap, level: float) -> tuple[PowerLaw | None, ...]:
    usable = [b for b, (_, v) in optima.items() if v is not None]
    if len(usable) < 2:
        return None, None
    k_n, a_n, k_d, a_d = _power_laws(np.array(usable), np.array([optima[b][1][0] for b in usable]))
    columns = list(zip(*boot.laws, strict=True)) if boot.laws else [[], [], [], []]

    def law(k: float, a: float, ks, exps) -> PowerLaw:
        return PowerLaw(k, a, {"coefficient": interval(ks, level), "exponent": interval(exps, level)})

    return law(k_n, a_n, columns[0], columns[1]), law(k_d, a_d, columns[2], columns[3])


# ---------------------------------------------------------------------------------------------------------
# Approach 3 as fit.json records it


SURFACE_NAMES = ("E", "A", "alpha", "B", "beta")


def surface_laws(shape: SurfaceFit, n: np.ndarray, d: np.ndarray, y: np.ndarray, level: float):
    """``(laws.loss, laws.surface)``: the frontier L*(C) and the surface, with bootstrap intervals."""
    frontier = np.array([frontier_law(t) for t in shape.samples]).reshape(-1, 3)
    e, a, gamma = frontier_law(shape.theta)
    loss = FrontierLaw(e, a, gamma, {k: interval(frontier[:, i], level) for i, k in enumerate(("E", "A", "gamma"))})
    residuals = y - surface(shape.theta, n, d)
    values = {name: float(v) for name, v in zip(SURFACE_NAMES, shape.theta, strict=True)}
    intervals = {name: interval(shape.samples[:, i], level) for i, name in enumerate(SURFACE_NAMES)}
    law = SurfaceLaw(
        **values,
        interval=intervals,
        residual_rms=float(np.sqrt(np.mean(residuals**2))),
        objective=SURFACE_OBJECTIVE,
    )
    return loss, law


def predict_target(shape: SurfaceFit, target: Target, level: float) -> Prediction:
    p = shape.predict(target.params, target.tokens, level=level)
    method = "loss surface at the target's N and D; interval: residual bootstrap widened by the backtest"
    if p.interval is None and p.bootstrap_interval is not None:
        method += f" (not calibrated: {shape.calibration.note})"
    return Prediction(
        run=target.name,
        params=target.params,
        tokens=target.tokens,
        flops=FLOPS_PER_PARAM_TOKEN * target.params * target.tokens,
        budget=target.budget,
        loss=p.loss,
        interval=p.interval,
        bootstrap_interval=p.bootstrap_interval,
        extrapolation=p.extrapolation,
        level=level,
        method=method,
    )


BACKTEST_SAMPLES = 200
"""Bootstrap samples of the backtest's fit (at most the ladder's own): its intervals need not be as fine."""


def backtest(runs: Sequence[Run], shape: SurfaceFit, *, samples: int, rng: np.random.Generator, level: float):
    """The check a ladder makes on itself before its target runs, and what calibrates the target's interval:
    the surface fitted without the top budget octave (``shape.calibration``) predicts that octave's runs.
    Each run also gets the bootstrap interval of that smaller fit, to show what it alone would have held."""
    calibration = shape.calibration
    if calibration.note is not None:
        return Backtest(note=calibration.note)
    mask = calibration.held_out
    below = [r for r, out in zip(runs, mask, strict=True) if not out]
    top = [r for r, out in zip(runs, mask, strict=True) if out]
    n, d, y, c = (np.array([getattr(r, k) for r in below]) for k in ("params", "tokens", "loss", "budget"))
    smaller = fit_loss_surface(n, d, y, budgets=c, samples=samples, rng=rng)
    checked = []
    for r, predicted, distance in zip(top, calibration.predicted, calibration.distances, strict=True):
        bounds = smaller.predict(r.params, r.tokens, level=level).bootstrap_interval
        error = (r.loss - predicted) / r.loss
        checked.append(
            BacktestRun(r.name, r.params, r.tokens, r.loss, float(predicted), float(error), distance, bounds)
        )
    return Backtest(
        held_out_budgets=sorted({r.budget for r in top}),
        fitted_runs=len(below),
        runs=checked,
        mean_abs_error=float(np.mean([abs(c.error) for c in checked])),
        inside_bootstrap=sum(
            c.bootstrap_interval is not None and c.bootstrap_interval[0] <= c.actual <= c.bootstrap_interval[1]
            for c in checked
        ),
        level=level,
        widening=calibration.widening(level),
    )


# ---------------------------------------------------------------------------------------------------------
# The whole fit


def usable_runs(runs: Sequence[Run], skip_invalid: bool) -> tuple[list[Run], list[SkippedRun]]:
    """The runs the fit can use; one whose loss (or size, tokens, budget) is not positive and finite is an
    error naming it, or with ``skip_invalid`` left out and listed."""
    kept, skipped = [], []
    for i, r in enumerate(runs):
        problem = r.problem()
        if problem is None:
            kept.append(r)
        elif skip_invalid:
            skipped.append(SkippedRun(r.name or f"#{i}", r.budget if math.isfinite(r.budget) else None, problem))
        else:
            raise FitError(
                f"run {r.name or f'#{i}'!r} (budget {r.budget:.3g}, params {r.params:.3g}): {problem}; a loss must "
                "be a positive finite number (a diverged run?). skip_invalid=True leaves such runs out, listed in "
                "fit.json's skipped"
            )
    return kept, skipped


def check_budgets(budgets: dict[float, list[Run]]) -> None:
    for budget, group in budgets.items():
        sizes = sorted({r.params for r in group})
        if len(sizes) < 3:
            shown = ", ".join(f"{s:.3g}" for s in sizes)
            raise FitError(
                f"budget {budget:.3g} has {len(sizes)} distinct run size(s) ({shown}; {len(group)} runs); "
                "a parabola needs at least 3"
            )
    if len(budgets) < 2:
        raise FitError(f"{len(budgets)} budget(s): the power laws need at least 2 (3 or more to check them)")


def fit_ladder(
    runs: Sequence[Run],
    target: Target | None = None,
    *,
    samples: int = DEFAULT_SAMPLES,
    seed: int = DEFAULT_SEED,
    level: float = DEFAULT_LEVEL,
    skip_invalid: bool = False,
) -> FitRecord:
    """The ladder's fit as ``fit.json`` holds it (without run paths, metric and plots, which the step adds).

    A budget whose parabola has no minimum (its sizes do not bracket an optimum) is reported as such, with
    ``params_opt`` None, and left out of the power laws, which need two budgets with a minimum (else they
    are None, with the reason). The loss surface and the prediction use every run either way."""
    runs, skipped = usable_runs(runs, skip_invalid)
    budgets = by_budget(runs)
    check_budgets(budgets)
    n, d, y, c = (np.array([getattr(r, key) for r in runs]) for key in ("params", "tokens", "loss", "budget"))
    optima = isoflop_optima(budgets)
    rng = np.random.default_rng(seed)
    boot = bootstrap_parabolas(budgets, optima, samples, rng)
    shape = fit_loss_surface(n, d, y, budgets=c, names=[r.name for r in runs], samples=samples, rng=rng)
    params_law, tokens_law = _power_law_records(optima, boot, level)
    loss_law, surface_law = surface_laws(shape, n, d, y, level)
    usable = sum(v is not None for _, v in optima.values())
    note = (
        None
        if params_law
        else f"{usable} budget(s) with a minimum: N*(C) and D*(C) need 2; the loss surface uses every run"
    )
    return FitRecord(
        runs=[LadderRun(r.name, r.budget, r.params, r.tokens, r.flops, r.loss) for r in runs],
        skipped=skipped,
        budgets=[budget_record(b, g, optima[b], boot.n_opt.get(b, []), level) for b, g in budgets.items()],
        laws=Laws(params_law, tokens_law, loss_law, surface_law, note),
        prediction=predict_target(shape, target, level) if target is not None else None,
        backtest=backtest(runs, shape, samples=min(samples, BACKTEST_SAMPLES), rng=rng, level=level),
        bootstrap=Bootstrap(samples, seed, level, boot.without_minimum),
    )
