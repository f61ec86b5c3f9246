"""A ladder's evals written as ``marin.evaluation.step`` writes them (``results.json``), and the analysis step's
config over them, so that tests run the real writer (``fit_ladder_step``) and read what it wrote."""

import json
from collections.abc import Callable
from pathlib import Path

from marin.scaling.step import FitLadderConfig, LadderRunRef
from marin.scaling.surface import compute_optimal, surface

FIT_V1 = Path(__file__).resolve().parents[1] / "data" / "scaling" / "fit_v1.json"
"""A ``fit.json`` as format 1 wrote it (``tests/data/scaling/README.md``)."""
TRUE = (1.69, 406.4, 0.34, 410.7, 0.28)
"""Hoffmann et al.'s fitted law (their approach 3): E, A, alpha, B, beta."""


def write_results(eval_path: Path, heldout: str, bpb: float) -> None:
    eval_path.mkdir(parents=True, exist_ok=True)
    scores = {"documents": 50, "bytes": 16000, "loss": 2.0, "bits_per_byte": bpb}
    (eval_path / "results.json").write_text(json.dumps({"checkpoint_step": 50, "validation": {heldout: scores}}))


def ladder_config(
    root: Path,
    budgets=(1e15, 3e15, 1e16),
    factors=(1 / 4, 1 / 2, 1, 2, 4),
    theta=TRUE,
    loss: Callable[[str, float, float], float] | None = None,
    heldout: str = "stories",
    target: LadderRunRef | None = None,
    samples: int = 50,
) -> FitLadderConfig:
    """Runs at each budget's compute-optimal size times ``factors``, each with an eval whose bits per byte is
    ``loss(name, N, D)`` (default: ``theta``'s surface, no noise), and the fit's config over them."""
    refs = []
    for budget in budgets:
        n_opt, _, _ = compute_optimal(theta, budget)
        for f in factors:
            n, name = n_opt * f, f"checkpoints/ladder-{budget:.0e}-x{f:g}"
            d = budget / (6 * n)
            eval_path = root / "evaluation" / name.split("/")[1]
            write_results(eval_path, heldout, loss(name, n, d) if loss else float(surface(theta, n, d)))
            refs.append(LadderRunRef(name, str(root / name), str(eval_path), budget, n, d))
    return FitLadderConfig(
        runs=tuple(refs),
        heldout=heldout,
        output_path=str(root / "analysis" / "ladder-fit"),
        target=target,
        bootstrap_samples=samples,
    )
