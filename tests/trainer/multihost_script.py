"""One process of a multi-host training job on this machine: ``python multihost_script.py OUTPUT_DIR``.

The job's coordinates come from the environment exactly as the executor's Ray runner sets them
(``MARIN_COORDINATOR_ADDRESS``, ``MARIN_NUM_PROCESSES``, ``MARIN_PROCESS_ID``); without them this is the
one-process baseline. Each process has one CPU device, the mesh puts all devices on fsdp, and the tiny
run trains 5 steps with a validation set. The process prints a JSON report: how many processes and
devices the job had, and which rows of each training batch this process built (it must build only its
own devices' rows).
"""

import os
import sys

os.environ["JAX_PLATFORMS"] = "cpu"

import json  # noqa: E402
from pathlib import Path  # noqa: E402

import jax  # noqa: E402

from marin.trainer.data.loader import TrainBatches  # noqa: E402
from marin.trainer.mesh import MeshConfig  # noqa: E402
from marin.trainer.train_lm import train_lm  # noqa: E402
from tests.trainer.tiny_run import tiny_config  # noqa: E402

rows_built: list[list[int]] = []
_batch = TrainBatches.batch


def recording_batch(self, step, rows=None):
    span = rows or slice(0, self.batch_size)
    rows_built.append([step, span.start, span.stop])
    return _batch(self, step, rows)


TrainBatches.batch = recording_batch

if __name__ == "__main__":
    train_lm(tiny_config(Path(sys.argv[1]), MeshConfig(fsdp=-1), "fsdp", evaluate=True))
    print(
        json.dumps(
            {
                "process_index": jax.process_index(),
                "process_count": jax.process_count(),
                "devices": jax.device_count(),
                "rows": rows_built,
            }
        )
    )
