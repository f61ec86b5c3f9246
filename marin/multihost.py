"""The multi-host contract: how the executor tells each process of a multi-host step who it is.

    MARIN_COORDINATOR_ADDRESS=10.0.0.2:8476   MARIN_NUM_PROCESSES=4   MARIN_PROCESS_ID=0..3

The executor (``marin.execution.ray_runner``) starts one process per host with ``host_env(...)`` in its
environment; a program that runs as one job over them (the trainer's ``marin.trainer.distributed``) reads
``coordinates()``. Neither side imports the other: both import this module, which imports nothing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

ENV_COORDINATOR = "MARIN_COORDINATOR_ADDRESS"
ENV_NUM_PROCESSES = "MARIN_NUM_PROCESSES"
ENV_PROCESS_ID = "MARIN_PROCESS_ID"


def host_env(coordinator: str, num_processes: int, process_id: int) -> dict[str, str]:
    """The environment of process ``process_id`` of a job of ``num_processes`` coordinated at ``host:port``."""
    return {ENV_COORDINATOR: coordinator, ENV_NUM_PROCESSES: str(num_processes), ENV_PROCESS_ID: str(process_id)}


def coordinates(env: Mapping[str, str] = os.environ) -> tuple[str, int, int] | None:
    """(coordinator address, number of processes, this process's id) from ``env``; None when unset."""
    if ENV_COORDINATOR not in env:
        return None
    try:
        address, count, index = env[ENV_COORDINATOR], int(env[ENV_NUM_PROCESSES]), int(env[ENV_PROCESS_ID])
    except (KeyError, ValueError) as e:
        raise ValueError(
            f"{ENV_COORDINATOR} is set, so {ENV_NUM_PROCESSES} and {ENV_PROCESS_ID} must be integers: {e}"
        ) from None
    if ":" not in address or not 0 <= index < count:
        raise ValueError(
            f"bad multi-host coordinates: {ENV_COORDINATOR}={address!r} (want host:port), "
            f"{ENV_PROCESS_ID}={index} of {ENV_NUM_PROCESSES}={count}"
        )
    return address, count, index
