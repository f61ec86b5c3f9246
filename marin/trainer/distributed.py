"""Multi-host training: one process per host, all of them one JAX job (``jax.distributed``).

A step that asks for ``ResourceConfig(hosts=N)`` runs as N Ray tasks (``marin.execution.ray_runner``),
and each task finds the job's coordinates in its environment (the contract is ``marin.multihost``)::

    MARIN_COORDINATOR_ADDRESS=10.0.0.2:8476   MARIN_NUM_PROCESSES=4   MARIN_PROCESS_ID=0..3

``initialize()`` turns them into ``jax.distributed.initialize(...)``; without them it does nothing (one
process: the laptop case). On CPU it selects gloo collectives, so processes exchange gradients over TCP;
that is how the two-process test runs on one machine. After it, ``jax.devices()`` lists every process's
devices, the mesh spans all of them, and each process feeds only the rows of a batch that its own devices
hold (``mesh.shard_batch``). Process 0 is the *primary*: it alone writes checkpoints, metrics and
summaries, so N processes never race on one file.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from marin.multihost import coordinates
from marin.trainer.host_parallel import host_rank

logger = logging.getLogger(__name__)


def initialize(env: Mapping[str, str] = os.environ) -> bool:
    """Join the multi-host job described by ``env`` (idempotent); False when there is none."""
    found = coordinates(env)
    if found is None:
        return False
    if jax.distributed.is_initialized():
        return True
    address, count, index = found
    # Only the CPU client reads this; accelerators use their own interconnect (ICI/DCN, NCCL).
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    logger.info("joining multi-host job: process %d of %d, coordinator %s", index, count, address)
    jax.distributed.initialize(coordinator_address=address, num_processes=count, process_id=index)
    return True


def is_primary() -> bool:
    """Process 0 of the job, and rank 0 of its machine's processes (``TrainerConfig.host_processes``)."""
    return jax.process_index() == 0 and host_rank() == 0


def agree(value: int) -> int:
    """The primary's ``value`` on every process (a decision like "save a checkpoint now" must be taken by all
    processes together, or the collectives inside it deadlock)."""
    if jax.process_count() == 1:
        return value
    from jax.experimental import multihost_utils

    return int(multihost_utils.broadcast_one_to_all(np.int32(value)))


def to_host(leaf: Any) -> np.ndarray:
    """A full host copy of an array, also when other processes hold parts of it (a collective then: every
    process must call it, in the same order)."""
    if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable:
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(leaf, tiled=True))
    return np.array(leaf, copy=True)
