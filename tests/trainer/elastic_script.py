"""One leg of an elastic resume: ``python elastic_script.py OUTPUT_DIR DEVICES RUN STOP_AT``.

Trains the tiny run (``tiny_run.py``; 6 steps in all, a permanent checkpoint every 2) on ``DEVICES`` simulated
CPU devices per process (one process, or one of a multi-host job whose coordinates are in the environment, as
the executor sets them: ``marin.multihost``) under ``RUN``'s mesh and rules (``fsdp``: every device on the fsdp
axis, ``dp``: pure data parallel), resuming from whatever checkpoint ``OUTPUT_DIR`` holds, and stops before
update ``STOP_AT + 1`` (after the checkpoint at ``STOP_AT`` is written; ``STOP_AT`` = 6 runs to the end).

It prints one JSON line: for every update it ran, the SHA-256 of the global batch exactly as the jitted step
received it (gathered from the devices, of every process) and the loss. The device count is fixed when JAX
starts, hence one process per leg.
"""

import dataclasses
import hashlib
import json
import os
import sys

os.environ["JAX_PLATFORMS"] = "cpu"
os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={sys.argv[2]}"

from pathlib import Path  # noqa: E402

import jax  # noqa: E402

from marin.trainer import CheckpointConfig, distributed, train  # noqa: E402
from marin.trainer import loop as loop_module  # noqa: E402
from marin.trainer.mesh import MeshConfig  # noqa: E402
from tests.trainer.tiny_run import tiny_config  # noqa: E402

TOTAL_STEPS, CHECKPOINT_EVERY = 6, 2
RUNS = {"fsdp": (MeshConfig(fsdp=-1), "fsdp"), "dp": (MeshConfig(data=-1, fsdp=1), "dp")}


class Stop(Exception):
    """Raised where a preemption would hit: after the checkpoint at STOP_AT."""


def main() -> None:
    output, devices, run, stop_at = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    distributed.initialize()  # train() does it too; here first, to check the devices before training
    assert jax.local_device_count() == devices, jax.local_devices()
    config = tiny_config(output, *RUNS[run])
    trainer = dataclasses.replace(
        config.trainer,
        num_train_steps=TOTAL_STEPS,
        checkpoint=CheckpointConfig(save_interval_minutes=None, keep_every=CHECKPOINT_EVERY),
    )
    config = dataclasses.replace(config, trainer=trainer)

    seen: dict[int, dict] = {}
    make_train_step = loop_module.make_train_step

    def recording_make_train_step(*args, **kwargs):
        step_fn = make_train_step(*args, **kwargs)

        def step(state, batch):
            update = int(state.step)
            if update == stop_at:
                raise Stop
            digest = hashlib.sha256()
            for key in sorted(batch):
                digest.update(key.encode() + distributed.to_host(batch[key]).tobytes())
            state, metrics = step_fn(state, batch)
            seen[update] = {"batch_sha256": digest.hexdigest(), "loss": float(metrics["loss"])}
            return state, metrics

        return step

    loop_module.make_train_step = recording_make_train_step
    try:
        train(config)
    except Stop:
        pass
    report = {"process": jax.process_index(), "processes": jax.process_count(), "devices": jax.device_count()}
    print(json.dumps({**report, "run": run, "updates": seen}), flush=True)


if __name__ == "__main__":
    main()
