"""Other loss surfaces on the books ladder's runs: does a different form predict its 4x target?

``experiments/exp43_books_ladder.py`` (full corpus, 2026-11-27) fitted Chinchilla's surface
E + A/N^alpha + B/D^beta to its 14 runs and predicted the target (width 96 at 16 TFLOPs) at 1.986 bits per
byte; it reached 1.803 (-10.1%, docs/scaling.md "On real text"). Larger widths gained more from 4x the data
than smaller ones, an interaction that surface cannot express. This refits the same 14 runs
(``benchmarks/results/books_ladder_runs.json``, copied from that run's ``fit.json``) with:

- ``lab``: ``marin.scaling.surface.fit_loss_surface`` (Hoffmann et al.'s Huber objective in log space), the
  ladder's own fit;
- ``chinchilla_ls``: the same form by plain least squares (``scaling_public_fit.least_squares_peer``, the peer
  of the public-runs check);
- ``kaplan``: Kaplan et al. (2020)'s L = E + [(N_c/N)^(alpha_N/alpha_D) + D_c/D]^alpha_D, which couples size
  and data (with an offset E, since bits per byte of English have a floor), least squares on relative errors;

each with N as the ladder counts it (model FLOPs per token / 6, the output head included) and without the
output head (vocab x width: Kaplan et al. count non-embedding parameters, and at this vocabulary the head is
42-70% of N). Several starting points per fit; the best is kept.

    .venv/bin/python benchmarks/books_ladder_refit.py      # prints the table of docs/scaling.md
    .venv/bin/python benchmarks/books_ladder_refit.py benchmarks/results/books_ladder_runs_2to8.json   # 2-8 TFLOPs

Errors are (actual - predicted) / actual, as the experiment report writes them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from marin.scaling.surface import fit_loss_surface, surface

try:
    from benchmarks.scaling_public_fit import least_squares_peer
except ImportError:  # run as a script: benchmarks/ is the script's own directory
    from scaling_public_fit import least_squares_peer

RUNS = Path(__file__).resolve().parent / "results" / "books_ladder_runs.json"
KAPLAN_STARTS = [
    [np.log(1e5), 0.3, np.log(1e6), 0.3, 1.0],
    [np.log(1e4), 0.5, np.log(1e5), 0.5, 1.5],
    [np.log(1e6), 0.1, np.log(1e7), 0.1, 0.5],
]


def kaplan(p, n, d):
    log_nc, alpha_n, log_dc, alpha_d, e = p
    return e + (np.exp((alpha_n / alpha_d) * (log_nc - np.log(n))) + np.exp(log_dc - np.log(d))) ** alpha_d


def least_squares_fit(form, starts, n, d, y):
    """The best of the least-squares fits (relative errors) from ``starts``."""
    best = None
    for p0 in starts:
        try:
            fit = least_squares(lambda p: (form(p, n, d) - y) / y, p0, max_nfev=20000)
        except (ValueError, FloatingPointError):
            continue
        if np.isfinite(fit.cost) and (best is None or fit.cost < best.cost):
            best = fit
    if best is None:
        raise RuntimeError(f"no start of {starts} gave a finite fit")
    return best.x


def refit(data: dict) -> list[dict]:
    """One row per (fit, way of counting N): the target's prediction, its error, the fit's rms relative
    residual on the 14 runs (None for the lab's fit, which minimizes a Huber loss in log space instead)."""
    runs, target, vocab = data["runs"], data["target"], data["vocab_size"]
    d = np.array([r["tokens"] for r in runs], float)
    y = np.array([r["loss"] for r in runs])
    budgets = np.array([r["budget"] for r in runs])
    actual, rows = target["loss"], []
    for count, head in (("flops/6", 0), ("without the head", vocab)):
        n = np.array([r["params"] - head * r["width"] for r in runs])
        tn, td = target["params"] - head * target["width"], float(target["tokens"])
        lab = fit_loss_surface(n, d, y, budgets=budgets, samples=50)
        fits = [("lab", float(lab.predict(tn, td).loss), None)]
        chinchilla = least_squares_peer(n, d, y)
        theta = least_squares_fit(kaplan, KAPLAN_STARTS, n, d, y)
        for name, fitted, predicted in (
            ("chinchilla_ls", surface(chinchilla, n, d), surface(chinchilla, tn, td)),
            ("kaplan", kaplan(theta, n, d), kaplan(theta, tn, td)),
        ):
            fits.append((name, float(predicted), float(np.sqrt(np.mean(((fitted - y) / y) ** 2)))))
        for name, predicted, rms in fits:
            rows.append(
                {
                    "fit": name,
                    "params": count,
                    "predicted": predicted,
                    "error": (actual - predicted) / actual,
                    "rms": rms,
                }
            )
    return rows


def main() -> None:
    data = json.loads((Path(sys.argv[1]) if len(sys.argv) > 1 else RUNS).read_text())
    print(f"target {data['target']['name']}: actual {data['target']['loss']:.4f} bits per byte\n")
    print("| fit | N | predicted | error | fit's rms relative residual |")
    print("|---|---|---|---|---|")
    for r in refit(data):
        residual = f"{r['rms']:.1%}" if r["rms"] is not None else "-"
        print(f"| {r['fit']} | {r['params']} | {r['predicted']:.3f} | {r['error']:+.1%} | {residual} |")


if __name__ == "__main__":
    main()
