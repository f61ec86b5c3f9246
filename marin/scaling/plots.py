"""The analysis steps' plots. Beside ``fit.json``: ``isoflop.png`` (loss against size per budget, with the
parabolas and their minima) and ``laws.png`` (N*(C), D*(C) and L*(C) with the target's prediction), drawn
from the ``FitRecord`` alone, so they show exactly what the file says. Beside an optimizer study's
``study.json``: ``speedup.png`` (speedup over AdamW against size)."""

from __future__ import annotations

import io
import logging

from marin.scaling.record import FitRecord
from marin.storage import join, write_atomic

logger = logging.getLogger(__name__)


def plot_fit(record: FitRecord, output_path: str) -> list[str]:
    """``isoflop.png`` and ``laws.png`` in ``output_path`` (names returned); none without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        logger.warning("matplotlib is not installed (the report extra): the fit has no plots")
        return []

    def save(figure, name: str) -> str:
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
        plt.close(figure)
        write_atomic(join(output_path, name), buffer.getvalue())
        return name

    figure, ax = plt.subplots(figsize=(6.4, 4.2))
    draw_isoflop(ax, record)
    names = [save(figure, "isoflop.png")]
    figure, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    draw_laws(axes, record)
    names.append(save(figure, "laws.png"))
    return names


def draw_isoflop(ax, record: FitRecord) -> None:
    """Each budget's runs, its parabola and its minimum (a star), one colour per budget."""
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.ticker import NullFormatter

    colors = plt.cm.viridis(np.linspace(0, 0.9, len(record.budgets)))
    for color, b in zip(colors, record.budgets, strict=True):
        runs = [r for r in record.runs if r.budget == b.budget]
        x = np.log10([r.params for r in runs])
        ax.scatter(10**x, [r.loss for r in runs], color=color, label=f"C = {b.budget:.2g}")
        grid = np.linspace(x.min() - 0.1, x.max() + 0.1, 100)
        ax.plot(10**grid, np.polyval(b.quadratic, grid), color=color, lw=1)
        if b.params_opt is not None:
            ax.scatter([b.params_opt], [b.loss_opt], color=color, marker="*", s=120, edgecolor="black")
    ax.set(xscale="log", xlabel="params N (FLOPs per token / 6)", ylabel=f"{record.heldout} bits/byte")
    ax.xaxis.set_minor_formatter(NullFormatter())  # 3x10^5 and 4x10^5 overlap otherwise
    ax.set_title("isoFLOP curves")
    ax.legend(fontsize=8)


def draw_laws(axes, record: FitRecord) -> None:
    """N*(C) and D*(C) with the parabola minima, and L*(C) with the target's prediction and its interval."""
    import numpy as np
    from matplotlib.ticker import NullFormatter

    optima = [b for b in record.budgets if b.params_opt is not None]
    budgets = np.array([b.budget for b in optima] or [b.budget for b in record.budgets])
    prediction = record.prediction
    span = np.geomspace(budgets.min() / 2, max(budgets.max(), prediction.flops if prediction else 0) * 2, 50)
    for ax, law, key, label in (
        (axes[0], record.laws.params_opt, "params_opt", "N*"),
        (axes[1], record.laws.tokens_opt, "tokens_opt", "D*"),
    ):
        ax.set(xscale="log", yscale="log", xlabel="compute C (FLOPs)", ylabel=label)
        ax.yaxis.set_minor_formatter(NullFormatter())
        if law is None:  # fewer than two budgets with a minimum
            ax.set_title(f"{label}(C): not fitted", fontsize=9)
            continue
        ax.scatter(budgets, [getattr(b, key) for b in optima], color="black")
        ax.plot(span, law.at(span), label=f"{label} = {law.coefficient:.3g} C^{law.exponent:.3f}")
        ax.legend(fontsize=8)
    ax = axes[2]
    if record.laws.loss is not None:
        ax.plot(span, record.laws.loss.at(span), label="L*(C) of the loss surface")
    if optima:
        ax.scatter(budgets, [b.loss_opt for b in optima], color="black", label="parabola minima")
    if prediction:
        lo, hi = prediction.interval or prediction.bootstrap_interval or (prediction.loss, prediction.loss)
        # never negative: an interval from an older file may miss the point estimate by a rounding error
        below, above = max(prediction.loss - lo, 0.0), max(hi - prediction.loss, 0.0)
        label = "target: predicted" + ("" if prediction.interval else " (bootstrap interval, not calibrated)")
        ax.errorbar(
            [prediction.flops],
            [prediction.loss],
            yerr=[[below], [above]],
            fmt="o",
            color="tab:red",
            capsize=4,
            label=label,
        )
    ax.set(xscale="log", xlabel="compute C (FLOPs)", ylabel=f"{record.heldout} bits/byte")
    ax.legend(fontsize=8)


def plot_speedups(settings: list[dict], output_path: str) -> list[str]:
    """``speedup.png``: each optimizer's speedup over AdamW against model size, one line per data ratio
    (``settings``: ``study.json``'s); none without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        logger.warning("matplotlib is not installed (the report extra): the optimizer study has no plot")
        return []
    figure, ax = plt.subplots(figsize=(6.4, 4.2))
    kinds = sorted({s["kind"] for s in settings if s.get("speedup") is not None})
    ratios = sorted({s["ratio"] for s in settings})
    for i, kind in enumerate(kinds):
        for j, ratio in enumerate(ratios):
            points = sorted((s["params"], s["speedup"]) for s in settings if s["kind"] == kind and s["ratio"] == ratio)
            points = [p for p in points if p[1] is not None]
            if points:
                ax.plot(
                    *zip(*points),
                    marker="o",
                    color=f"C{i}",
                    linestyle=("-", "--", ":")[j % 3],
                    label=f"{kind}, {ratio:g}x Chinchilla",
                )
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("parameters N")
    ax.set_ylabel("speedup over AdamW (AdamW's data / its own)")
    ax.legend(fontsize=7)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(figure)
    write_atomic(join(output_path, "speedup.png"), buffer.getvalue())
    return ["speedup.png"]
