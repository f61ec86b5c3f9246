"""``train_lm``: the executor-facing entry point (a plain function of a config, no executor imports).

    step = ExecutorStep(name="checkpoints/nano-stories", fn=train_lm, config=TrainLmConfig(
        output_path=this_output_path(), model=model_preset("nano"), data=..., trainer=...))

Rerunning a preempted or killed step resumes from its newest checkpoint (see ``marin.trainer.loop``).
Besides checkpoints and ``metrics.jsonl`` it writes ``summary.json`` (final step, loss, eval metrics).
"""

from __future__ import annotations

import json
import logging

from marin.storage import join, write_atomic
from marin.trainer import distributed
from marin.trainer.loop import TrainLmConfig, train, tune_host_allocator

logger = logging.getLogger(__name__)


def train_lm(config: TrainLmConfig) -> None:
    # Nothing here may start JAX's runtime: train() first pins a host_processes run's rank 0 to its cores,
    # and XLA sizes its CPU thread pool from the cores the process may use when the runtime starts.
    tune_host_allocator()  # before JAX's runtime starts (marin.allocator)
    distributed.initialize()  # before anything asks JAX for devices
    result = train(config)
    if not distributed.is_primary():
        return
    summary = {"step": result.step, "train_loss": result.train_loss, **result.eval_metrics}
    write_atomic(join(config.output_path, "summary.json"), json.dumps(summary, indent=2))
