"""Data parallelism over one machine's cores: N processes, each a one-device JAX program on its own cores.

``TrainerConfig.host_processes=N`` (CPU only). ``train()`` in the calling process becomes rank 0; it starts
ranks 1..N-1 as fresh Python processes (``host_parallel.main``) running the same config,
and every process pins itself to its share of the cores it may use. Each step, rank ``r`` trains on rows
``r·B/N .. (r+1)·B/N`` of the step's batch (the batch, and so the data order, is the one-process run's) and
the summed gradients, losses and token counts are exchanged through a shared-memory segment
(``SharedMemorySum``): every rank adds the N contributions in rank order, so all ranks hold bitwise the same
sum and take the same update. The result equals the one-process run to float rounding (the sum over the
batch's rows is taken in another order). Rank 0 alone evaluates and writes (checkpoints, metrics,
summaries: ``distributed.is_primary``).

Why: at small sizes XLA:CPU splits every operation over the machine's threads for little gain (the baby
Shakespeare model's step took 22.1 ms on one core and 23.5 ms on two), while a step on half the rows takes
half the time on one core. In one process the alternatives failed: two host devices deadlock in XLA:CPU's
in-process collectives on a two-core machine, and gloo's all-reduce between processes costs ~8 ms a step
(docs/real_text.md, "Two cores for one small step").

The contract with the helpers is the environment (``RANK_ENV``, ``WORLD_ENV``, ``SEGMENT_ENV``, ``CORES_ENV``);
a helper whose parent dies, or a rank that waits longer than ``timeout`` for the others, raises an error
naming the rank it waited for, so no process is left spinning.
"""

from __future__ import annotations

import logging
import os
import pickle
import subprocess
import sys
import tempfile
import time
import uuid
from multiprocessing import shared_memory
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

RANK_ENV, WORLD_ENV = "MARIN_HOST_RANK", "MARIN_HOST_WORLD"
SEGMENT_ENV, CORES_ENV = "MARIN_HOST_SEGMENT", "MARIN_HOST_CORES"
_HEADER = 64  # bytes before the slots: one int64 sequence number per rank (at most 8 ranks)
MAX_PROCESSES = _HEADER // 8


def host_rank() -> int:
    """This process's rank among the machine's training processes (0 when there is only one)."""
    return int(os.environ.get(RANK_ENV, "0"))


def host_world() -> int:
    return int(os.environ.get(WORLD_ENV, "1"))


def cores_for(rank: int, world: int, cores: list[int] | None = None) -> list[int]:
    """Rank ``rank``'s contiguous share of ``cores`` (default: the cores this process may run on)."""
    cores = sorted(os.sched_getaffinity(0)) if cores is None else sorted(cores)
    if len(cores) < world:
        raise ValueError(f"TrainerConfig.host_processes={world} needs a core per process; this process may use {cores}")
    per, extra = divmod(len(cores), world)
    start = rank * per + min(rank, extra)
    return cores[start : start + per + (rank < extra)]


class PeerLost(RuntimeError):
    """A rank waited for another that exited or stopped answering."""


class SharedMemorySum:
    """The sum over ``world`` processes of a float32 vector of up to ``size`` values, through shared memory.

    Rank ``r`` writes its vector into slot ``r`` of the step's buffer, publishes the step's sequence number,
    waits until every rank has published it, and adds the slots in rank order (the same bits on every rank).
    Two buffers alternate by step parity: a rank can only be one step ahead of the slowest, whose reads of
    the previous step are finished before it publishes the next. x86's store order makes a published slot
    visible before its sequence number."""

    def __init__(self, name: str, size: int, rank: int, world: int, *, create: bool, timeout: float = 600.0):
        if not 1 <= world <= MAX_PROCESSES:
            raise ValueError(f"host processes must be 1..{MAX_PROCESSES}, got {world}")
        self.name, self.size, self.rank, self.world, self.timeout = name, size, rank, world, timeout
        nbytes = _HEADER + 2 * world * size * 4
        if create:
            self._shm = shared_memory.SharedMemory(name=name, create=True, size=nbytes)
            self._shm.buf[:_HEADER] = bytes(_HEADER)
        else:
            self._shm = _attach(name, timeout)
        self._seq = np.ndarray((world,), np.int64, self._shm.buf, 0)
        self._slots = np.ndarray((2, world, size), np.float32, self._shm.buf, _HEADER)
        self._step = int(self._seq[rank])
        self.alive = lambda: True
        """Set by the owner: False when a peer process is known to be gone (checked while waiting)."""

    def __call__(self, vector: np.ndarray) -> np.ndarray:
        """The sum of every rank's ``vector`` (float32, at most ``size`` values, the same length on every rank)."""
        if vector.ndim != 1 or len(vector) > self.size:
            raise ValueError(f"SharedMemorySum: expected a vector of at most {self.size} values, got {vector.shape}")
        self._step += 1
        step, slots = self._step, self._slots[self._step % 2, :, : len(vector)]
        slots[self.rank] = vector
        self._seq[self.rank] = step
        self._wait_for(step)
        total = slots[0].copy()
        for r in range(1, self.world):
            total += slots[r]
        return total

    def _wait_for(self, step: int) -> None:
        deadline, spins = time.monotonic() + self.timeout, 0
        while True:
            behind = [r for r in range(self.world) if self._seq[r] < step]
            if not behind:
                return
            spins += 1
            if spins > 2000:  # a peer evaluating or checkpointing: stop burning the core
                time.sleep(0.0005)
                if not self.alive():
                    raise PeerLost(f"host process {behind[0]} exited during step {step} of the gradient exchange")
                if time.monotonic() > deadline:
                    raise PeerLost(f"host process {behind[0]} did not reach step {step} within {self.timeout:.0f} s")

    def close(self, unlink: bool = False) -> None:
        self._seq = self._slots = None
        self._shm.close()
        if unlink:
            self._shm.unlink()


def _attach(name: str, timeout: float) -> shared_memory.SharedMemory:
    deadline = time.monotonic() + timeout
    while True:
        try:
            # track=False (Python 3.13) does not exist on 3.11; the resource tracker would unlink rank 0's
            # segment when a helper exits, so unregister it by hand.
            shm = shared_memory.SharedMemory(name=name)
            from multiprocessing import resource_tracker

            resource_tracker.unregister(shm._name, "shared_memory")  # noqa: SLF001
            return shm
        except FileNotFoundError:
            if time.monotonic() > deadline:
                raise PeerLost(f"host process 0's segment {name} did not appear within {timeout:.0f} s") from None
            time.sleep(0.01)


class HostGroup:
    """Rank 0's side: the helper processes and the segment they share; a context manager."""

    def __init__(self, config: Any, world: int, size: int, cores: list[list[int]]):
        self.world, self.cores = world, cores
        self.segment = f"marin_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        self.sum = SharedMemorySum(self.segment, size, 0, world, create=True)
        self.sum.alive = self._helpers_alive
        self._dir = tempfile.TemporaryDirectory(prefix="marin-host-")
        path = os.path.join(self._dir.name, "config.pkl")
        with open(path, "wb") as f:
            pickle.dump(config, f)
        self.helpers = [self._start(path, rank, size) for rank in range(1, world)]

    def _start(self, path: str, rank: int, size: int) -> subprocess.Popen:
        env = {
            **os.environ,
            RANK_ENV: str(rank),
            WORLD_ENV: str(self.world),
            SEGMENT_ENV: f"{self.segment}:{size}",
            CORES_ENV: ",".join(map(str, self.cores[rank])),
        }
        entry = f"from marin.trainer.host_parallel import main; main({path!r})"
        return subprocess.Popen([sys.executable, "-c", entry], env=env)

    def _helpers_alive(self) -> bool:
        return all(p.poll() is None for p in self.helpers)

    def __enter__(self) -> HostGroup:
        return self

    def __exit__(self, kind, error, tb) -> None:
        try:
            for rank, proc in enumerate(self.helpers, start=1):
                if error is not None:
                    proc.kill()
                try:
                    code = proc.wait(timeout=600)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    code = proc.wait()
                if code != 0 and error is None:
                    raise RuntimeError(f"host process {rank} of {self.world} exited with code {code}")
        finally:
            self.sum.close(unlink=True)
            self._dir.cleanup()


def helper_sum() -> SharedMemorySum:
    """A helper's side of the exchange, from the environment its rank 0 set."""
    name, size = os.environ[SEGMENT_ENV].rsplit(":", 1)
    summed = SharedMemorySum(name, int(size), host_rank(), host_world(), create=False)
    parent = os.getppid()
    summed.alive = lambda: os.getppid() == parent
    return summed


def pin_to_cores(cores: list[int]) -> None:
    """Run this process on ``cores`` only: every thread it has (XLA's pool, if JAX already started it) and every
    thread it starts from now on (``sched_setaffinity`` moves one thread; new threads inherit their creator's)."""
    try:
        threads = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:  # no procfs: the calling thread, and the threads it starts
        threads = [0]
    for thread in threads:
        try:
            os.sched_setaffinity(thread, cores)
        except ProcessLookupError:  # the thread ended meanwhile
            pass


def main(path: str) -> None:
    """A helper: pin, then ``train()`` the pickled config as rank ``RANK_ENV``."""
    pin_to_cores([int(c) for c in os.environ[CORES_ENV].split(",")])
    from marin.logs import configure_logging
    from marin.trainer.loop import train

    configure_logging()
    with open(path, "rb") as f:
        config = pickle.load(f)
    train(config)
