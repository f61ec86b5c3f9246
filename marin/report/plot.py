"""The loss-curve image of a report: training loss per run, and eval bits-per-byte per validation set.

    plot_curves(report.steps, "reports/exp42_loss.png")   # False when no step logged metrics

Drawn with matplotlib's Agg canvas directly (``Figure`` + ``FigureCanvasAgg``) rather than ``pyplot``:
no global backend is selected, so this works headless (CI, a TPU VM) and inside processes that already
imported pyplot with another backend.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from marin.report.collect import StepReport

logger = logging.getLogger(__name__)


def plot_curves(steps: Sequence[StepReport], path: str) -> bool:
    """Write a PNG to the local ``path``; returns False (and writes nothing) if no step has a ``train/loss`` curve."""
    runs = [s for s in steps if "train/loss" in s.curves]
    if not runs:
        return False
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as e:
        raise ImportError(f"the loss-curve image needs matplotlib: pip install -e '.[report]' ({e})") from e

    bpb_runs = [s for s in runs if s.eval_bpb()]
    fig = Figure(figsize=(11 if bpb_runs else 6.5, 4), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 2 if bpb_runs else 1, squeeze=False, sharex=True)[0]  # eval points line up with steps
    for s in runs:
        curve = s.curves["train/loss"]
        axes[0].plot(curve.steps, curve.values, label=s.name, linewidth=1.2)
    axes[0].set(title="training loss", xlabel="step", ylabel="loss")
    for s in bpb_runs:
        for name in sorted(s.eval_bpb()):
            curve = s.curves[f"eval/{name}/bpb"]
            label = name if len(bpb_runs) == 1 else f"{s.name}: {name}"
            axes[1].plot(curve.steps, curve.values, marker="o", markersize=3, label=label)
    if bpb_runs:
        axes[1].set(title="eval bits per byte (lower is better)", xlabel="step", ylabel="bits/byte")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.savefig(path, format="png")
    logger.info("wrote %s", path)
    return True
