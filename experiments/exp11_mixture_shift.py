"""Does the quickstart's mid-run mixture shift pay for itself? Issue #11 (the experiment-issue convention).

An example of the workflow in docs/experiment_issues.md: one question, one file named after its issue,
one report posted back to the issue. The quickstart shifts its training mixture from 70/30 to 40/60
(stories/arithmetic) at step 120, a miniature of Tootsie's phase change. This file adds the control arm:
the same run with the 70/30 mixture throughout. Everything else (data, tokenizer, model, schedule, seed,
evaluation) is the quickstart's own step, so after `make quickstart` only the control arm trains.

Hypothesis: the shift lowers arithmetic bits-per-byte by more than it raises stories bits-per-byte,
compared with the constant mixture (both measured by the evaluation step on held-out documents).

    python experiments/exp11_mixture_shift.py --dry_run true   # the quickstart + the control run and its eval
    python experiments/exp11_mixture_shift.py
    python -m marin.report experiments/exp11_mixture_shift.py --prefix ./local_store --post
"""

import dataclasses

from experiments import quickstart
from marin.execution import executor_main, versioned

shifted_run = quickstart.STEPS["checkpoints"]
shifted_eval = quickstart.STEPS["evaluation"]

# The control arm: the quickstart's first mixture stage kept for the whole run.
first_stage = shifted_run.config.data.stages.value[0]
constant_run = dataclasses.replace(
    shifted_run,
    name="checkpoints/exp11-constant-mixture",
    config=dataclasses.replace(
        shifted_run.config,
        data=dataclasses.replace(shifted_run.config.data, stages=versioned((first_stage,))),
    ),
    description="control arm: the quickstart's run with its first mixture throughout",
)
constant_eval = dataclasses.replace(
    shifted_eval,
    name="evaluation/exp11-constant-mixture",
    config=dataclasses.replace(shifted_eval.config, checkpoint_path=constant_run),
)

if __name__ == "__main__":
    executor_main(steps=[shifted_eval, constant_eval], description="exp11: mixture shift vs constant mixture")
