"""The ladder's analysis step: read each run's eval, fit, predict the target, write ``fit.json`` and plots.

The step depends on every ladder run's eval (so it runs when they are done) and on the target run's
steps only ``nonblocking()``: the prediction is made from the ladder alone, before or without the target,
and names the target's output paths so that the report and the data browser can put the target's actual
loss beside it once it exists (``marin.report.leaderboard.heldout_bpb``).

``fit.json`` is ``marin.scaling.fit.fit_ladder``'s dictionary, plus ``metric``/``heldout``, each run's
``run_path``/``eval_path`` and the prediction's, and ``plots``: ``isoflop.png`` (loss against size per
budget, with the parabolas and their minima) and ``laws.png`` (N*(C), D*(C) and L*(C) with the target).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any

from marin.scaling.fit import SURFACE_OBJECTIVE, Run, Target, fit_ladder
from marin.storage import join, read_text, write_atomic

logger = logging.getLogger(__name__)


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
    bootstrap_samples: int = 1000
    seed: int = 0
    level: float = 0.9
    objective: str = SURFACE_OBJECTIVE
    """The loss surface's objective, named so that it enters the step's version (a ladder fitted by another
    objective fits again); only ``marin.scaling.fit.SURFACE_OBJECTIVE`` is computed here."""


def eval_loss(eval_path: str, heldout: str) -> float:
    """Bits per byte on ``heldout`` from an eval step's ``results.json``; a missing set is an error naming it."""
    url = join(eval_path, "results.json")
    results = json.loads(read_text(url))
    try:
        return float(results["validation"][heldout]["bits_per_byte"])
    except (KeyError, TypeError):
        sets = sorted((results.get("validation") or {}).keys()) if isinstance(results, dict) else []
        raise ValueError(f"{url}: no validation[{heldout!r}].bits_per_byte (sets there: {sets})") from None


def fit_ladder_step(config: FitLadderConfig) -> None:
    if config.objective != SURFACE_OBJECTIVE:
        raise ValueError(f"FitLadderConfig.objective: {config.objective!r}; this version fits {SURFACE_OBJECTIVE!r}")
    runs = [Run(r.budget, r.params, r.tokens, eval_loss(r.eval_path, config.heldout), r.run) for r in config.runs]
    target = config.target
    fit = fit_ladder(
        runs,
        Target(target.run, target.params, target.tokens) if target else None,
        samples=config.bootstrap_samples,
        seed=config.seed,
        level=config.level,
    )
    fit["metric"], fit["heldout"] = "bpb", config.heldout
    for record, ref in zip(fit["runs"], config.runs, strict=True):
        record.update(run_path=ref.run_path, eval_path=ref.eval_path)
    if target:
        fit["prediction"].update(run_path=target.run_path, eval_path=target.eval_path)
    fit["plots"] = plot_fit(fit, config.output_path)
    write_atomic(join(config.output_path, "fit.json"), json.dumps(fit, indent=2))
    logger.info("ladder fit: N*(C) %s; prediction %s", fit["laws"]["params_opt"], fit.get("prediction"))


def plot_fit(fit: dict[str, Any], output_path: str) -> list[str]:
    """``isoflop.png`` and ``laws.png`` beside ``fit.json`` (names returned); none without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import NullFormatter
    except ImportError:
        logger.warning("matplotlib is not installed (the report extra): the fit has no plots")
        return []
    import io

    import numpy as np

    def save(figure, name):
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
        plt.close(figure)
        write_atomic(join(output_path, name), buffer.getvalue())
        return name

    figure, ax = plt.subplots(figsize=(6.4, 4.2))
    colors = plt.cm.viridis(np.linspace(0, 0.9, len(fit["budgets"])))
    for color, b in zip(colors, fit["budgets"], strict=True):
        runs = [r for r in fit["runs"] if r["budget"] == b["budget"]]
        x = np.log10([r["params"] for r in runs])
        ax.scatter(10**x, [r["loss"] for r in runs], color=color, label=f"C = {b['budget']:.2g}")
        grid = np.linspace(x.min() - 0.1, x.max() + 0.1, 100)
        ax.plot(10**grid, np.polyval(b["quadratic"], grid), color=color, lw=1)
        if b["params_opt"] is not None:
            ax.scatter([b["params_opt"]], [b["loss_opt"]], color=color, marker="*", s=120, edgecolor="black")
    ax.set(xscale="log", xlabel="params N (FLOPs per token / 6)", ylabel=f"{fit['heldout']} bits/byte")
    ax.xaxis.set_minor_formatter(NullFormatter())  # 3x10^5 and 4x10^5 overlap otherwise
    ax.set_title("isoFLOP curves")
    ax.legend(fontsize=8)
    names = [save(figure, "isoflop.png")]

    figure, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    optima = [b for b in fit["budgets"] if b["params_opt"] is not None]
    budgets = np.array([b["budget"] for b in optima] or [b["budget"] for b in fit["budgets"]])
    prediction = fit.get("prediction")
    span = np.geomspace(budgets.min() / 2, max(budgets.max(), prediction["budget"] if prediction else 0) * 2, 50)
    for ax, key, label in ((axes[0], "params_opt", "N*"), (axes[1], "tokens_opt", "D*")):
        law = fit["laws"][key]
        ax.set(xscale="log", yscale="log", xlabel="compute C (FLOPs)", ylabel=label)
        ax.yaxis.set_minor_formatter(NullFormatter())
        if law is None:  # fewer than two budgets with a minimum
            ax.set_title(f"{label}(C): not fitted", fontsize=9)
            continue
        ax.scatter(budgets, [b[key] for b in optima], color="black")
        ax.plot(
            span,
            law["coefficient"] * span ** law["exponent"],
            label=f"{label} = {law['coefficient']:.3g} C^{law['exponent']:.3f}",
        )
        ax.set(xscale="log", yscale="log", xlabel="compute C (FLOPs)", ylabel=label)
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.legend(fontsize=8)
    law = fit["laws"]["loss"]
    axes[2].plot(span, law["E"] + law["A"] * span ** -law["alpha"], label="L*(C) of the loss surface")
    if optima:
        axes[2].scatter(budgets, [b["loss_opt"] for b in optima], color="black", label="parabola minima")
    if prediction:
        lo, hi = prediction["interval"] or (prediction["loss"], prediction["loss"])
        axes[2].errorbar(
            [prediction["budget"]],
            [prediction["loss"]],
            yerr=[[prediction["loss"] - lo], [hi - prediction["loss"]]],
            fmt="o",
            color="tab:red",
            capsize=4,
            label="target: predicted",
        )
    axes[2].set(xscale="log", xlabel="compute C (FLOPs)", ylabel=f"{fit['heldout']} bits/byte")
    axes[2].legend(fontsize=8)
    names.append(save(figure, "laws.png"))
    return names
