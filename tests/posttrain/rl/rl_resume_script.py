"""A tiny RL run for the bitwise-resume test: ``python rl_resume_script.py ROOT OUTPUT_PATH ITERATIONS``.

Checkpoints every 3 iterations (permanent) and every ~0.2 s (temporary). Scoring sleeps a little per
completion so the parent can SIGKILL the run at an iteration of its choosing."""

import dataclasses
import logging
import os
import sys
import time
from pathlib import Path

os.environ["JAX_PLATFORMS"] = "cpu"

from marin.environments import register_reward  # noqa: E402
from marin.posttrain.rl.loop import train_rl  # noqa: E402
from marin.posttrain.rl.loss import LossConfig  # noqa: E402
from marin.trainer.checkpoint import CheckpointConfig  # noqa: E402
from tests.posttrain.rl.rl_setup import letter_o, rl_config  # noqa: E402


@register_reward("test_slow_letter_o")
def slow_letter_o(record, completion: str) -> float:
    time.sleep(0.01)
    return letter_o(record, completion)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    root, output, iterations = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    kl = LossConfig(beta=0.04, max_completion_tokens=12)  # the reference model's log-probabilities too
    config = rl_config(root, output, num_iterations=iterations, ppo_epochs=2, loss=kl)
    env = dataclasses.replace(config.environments["letters"], rewards=(("test_slow_letter_o", 1.0),))
    config = dataclasses.replace(
        config,
        environments={"letters": env},
        checkpoint=CheckpointConfig(keep_every=3, save_interval_minutes=0.2 / 60),
        optimizer=dataclasses.replace(config.optimizer, learning_rate=1e-2),
    )
    train_rl(config)
