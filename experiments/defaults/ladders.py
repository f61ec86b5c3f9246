"""Scaling ladders: an isoFLOP grid of training runs, their evals, and a fit that predicts a larger target run.

    ladder = default_scaling_ladder("nano-ladder", tok, tokenizer=tok / "tokenizer", family=nano_family(),
                                    budgets=(1e12, 2e12, 4e12), target_budget=1.6e13, target_model=..., train=...)
    executor_main(steps=ladder.steps)

The grid's rules (``marin.scaling.ladder``) set each run's steps, batch, learning rate and schedule; the fit
(``marin.scaling.step``) writes ``fit.json``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from experiments.defaults.evaluation import default_eval
from experiments.defaults.inputs import Input
from experiments.defaults.training import default_train
from experiments.models import SimpleTrainConfig
from marin.execution import ExecutorStep, output_path_of, this_output_path, versioned
from marin.scaling.ladder import LadderPoint, LadderRules, isoflop_grid, target_point
from marin.scaling.step import INTERVALS, FitLadderConfig, LadderRunRef, fit_ladder_step
from marin.scaling.surface import SURFACE_OBJECTIVE
from marin.trainer.model.config import LlamaConfig


@dataclasses.dataclass(frozen=True)
class ScalingLadder:
    """The steps of ``default_scaling_ladder``: ``executor_main(steps=ladder.steps)`` runs all of them."""

    runs: tuple[ExecutorStep, ...]
    evals: tuple[ExecutorStep, ...]
    fit: ExecutorStep
    target: ExecutorStep
    target_eval: ExecutorStep

    @property
    def steps(self) -> list[ExecutorStep]:
        return [*self.evals, self.fit, self.target_eval]


def default_scaling_ladder(
    name: str,
    tokenized: ExecutorStep,
    *,
    tokenizer: Input,
    family: Sequence[LlamaConfig],
    budgets: Sequence[float],
    target_budget: float,
    target_model: LlamaConfig,
    rules: LadderRules = LadderRules(),
    train: SimpleTrainConfig,
    heldout: str = "heldout",
    bootstrap_samples: int = 1000,
    skip_invalid_runs: bool = False,
    eval_max_documents: int | None = 1000,
) -> ScalingLadder:
    """An isoFLOP ladder over ``family`` at ``budgets`` (``marin.scaling.ladder``), trained on ``tokenized``'s
    ``train/`` cache and evaluated on its ``validation/`` cache (named ``heldout`` in the results), an
    analysis step ``analysis/<name>-fit`` (``fit.json``), and the target run it predicts: ``target_model``
    trained on ``target_budget``'s tokens under the same rules.

    Each run is ``checkpoints/<name>-<budget>-<size>``, an ordinary training step configured from ``train``
    (precision, seed, cadences) with the rules' steps, batch, learning rate and schedule; its config depends
    on its own budget and size only, so adding a budget adds steps and reruns none. The fit depends on the
    target only ``nonblocking()``: it predicts without waiting for the target and names where its actual
    loss will be. ``skip_invalid_runs``: a run whose loss is NaN or infinite is left out of the fit (and listed
    in ``fit.json``) instead of failing it. ``eval_max_documents`` caps the held-out documents each run is
    scored on (None: all of them; whole books are long)."""

    def run(point: LadderPoint, label: str) -> tuple[ExecutorStep, ExecutorStep, LadderRunRef]:
        return _ladder_run(
            f"{name}-{label}",
            point,
            tokenized,
            tokenizer=tokenizer,
            train=train,
            rules=rules,
            heldout=heldout,
            eval_max_documents=eval_max_documents,
        )

    grid = [run(p, f"{_budget_label(p.budget)}-{p.label}") for p in isoflop_grid(budgets, family, rules)]
    point = target_point(target_budget, target_model, rules)
    target, target_eval, target_ref = run(point, f"target-{_budget_label(target_budget)}-{point.label}")
    config = FitLadderConfig(
        runs=tuple(ref for _, _, ref in grid),
        heldout=versioned(heldout),
        output_path=this_output_path(),
        target=dataclasses.replace(
            target_ref, run_path=target_ref.run_path.nonblocking(), eval_path=target_ref.eval_path.nonblocking()
        ),
        bootstrap_samples=versioned(bootstrap_samples),
        skip_invalid_runs=versioned(skip_invalid_runs),
        objective=versioned(SURFACE_OBJECTIVE),
        intervals=versioned(INTERVALS),
    )
    fit = ExecutorStep(
        name=f"analysis/{name}-fit",
        fn=fit_ladder_step,
        config=config,
        description=f"isoFLOP fit of {len(grid)} runs at {len(budgets)} budgets; predicts {target.name}",
    )
    return ScalingLadder(
        runs=tuple(c for c, _, _ in grid),
        evals=tuple(e for _, e, _ in grid),
        fit=fit,
        target=target,
        target_eval=target_eval,
    )


def _budget_label(budget: float) -> str:
    return f"{budget:.3g}".replace("+", "")


def _ladder_run(
    run_name: str,
    point: LadderPoint,
    tokenized: ExecutorStep,
    *,
    tokenizer: Input,
    train: SimpleTrainConfig,
    rules: LadderRules,
    heldout: str,
    eval_max_documents: int | None = 1000,
) -> tuple[ExecutorStep, ExecutorStep, LadderRunRef]:
    """One ladder run: its training step (``train`` with the rules' steps, batch, rate and schedule), its eval
    on ``heldout``, and the analysis step's reference to both."""
    config = dataclasses.replace(
        train,
        num_train_steps=point.steps,
        batch_size=point.batch_size,
        learning_rate=point.learning_rate,
        schedule="wsd",
        warmup=rules.warmup,
        decay=rules.decay,
        min_lr_ratio=rules.min_lr_ratio,
    )
    checkpoint = default_train(run_name, {heldout: tokenized}, point.model, config, validation={})
    evaluation = default_eval(
        run_name,
        checkpoint,
        tokenizer=tokenizer,
        validation={heldout: tokenized / "validation"},
        model=point.model,
        max_documents=eval_max_documents,
    )
    ref = LadderRunRef(
        run=checkpoint.name,
        run_path=output_path_of(checkpoint),
        eval_path=output_path_of(evaluation),
        budget=point.budget,
        params=point.params,
        tokens=point.tokens,
    )
    return checkpoint, evaluation, ref
