"""Data parallelism over one machine's cores: N processes, each a one-device JAX program on its own cores.

``TrainerConfig.host_processes=N`` (CPU only). ``train()`` in the calling process becomes rank 0; it starts
ranks 1..N-1 first thing as fresh Python processes (``start_helper``, then the loop's ``run_host_helper`` on
the pickled config), and every process pins itself to its share of the cores rank 0 may use. Each step,
rank ``r`` trains on rows ``r·B/N .. (r+1)·B/N`` of the step's batch (the batch, and so the data order, is
the one-process run's) and the summed gradients, losses and token counts are exchanged through a
shared-memory segment (``SharedMemorySum``) between the step's two programs (``make_train_step``): every
rank adds the N contributions in rank order, so all ranks hold bitwise the same sum and take the same
update. The result equals the one-process run to float rounding (the sum over the batch's rows is taken in
another order). Rank 0 alone evaluates and writes (checkpoints, metrics, summaries:
``distributed.is_primary``). The group shares one persistent compilation cache (``_SharedCompileCache``), so
each program is compiled once.

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

import os
import pickle
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from multiprocessing import shared_memory
from typing import Any

import numpy as np

RANK_ENV, WORLD_ENV = "MARIN_HOST_RANK", "MARIN_HOST_WORLD"
SEGMENT_ENV, CORES_ENV = "MARIN_HOST_SEGMENT", "MARIN_HOST_CORES"
MAX_PROCESSES = 8
_HEADER = 128  # bytes before the slots: a sequence number per rank, the slots' size, flags; then 64-byte aligned
_FLAGS = 4  # words for ``announce``


def host_rank() -> int:
    """This process's rank among the machine's training processes (0 when there is only one)."""
    return int(os.environ.get(RANK_ENV, "0"))


def host_world() -> int:
    """How many training processes this machine runs (1 unless ``host_processes`` started this one)."""
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

    Rank ``r`` writes its vector into row ``r`` of the step's block, publishes the step's sequence number
    and waits until every rank has published it (``contributions``); the sum adds the rows in rank order (the
    same bits on every rank). Two blocks alternate by step parity: a rank can only be one step ahead of the
    slowest, whose reads of the previous step are finished before it publishes the next. x86's store order
    makes a published row visible before its sequence number. Each block starts 64-byte aligned, so XLA:CPU
    can take it as a program's input without a copy (``make_train_step``)."""

    def __init__(
        self,
        name: str,
        size: int | None,
        rank: int,
        world: int,
        *,
        create: bool,
        timeout: float = 600.0,
        alive: Callable[[], bool] = lambda: True,
    ) -> None:
        """``create`` (rank 0): make the segment for vectors of up to ``size`` values; otherwise attach to it,
        waiting up to ``timeout`` for rank 0 to make it, and read ``size`` from it."""
        if not 1 <= world <= MAX_PROCESSES:
            raise ValueError(f"host processes must be 1..{MAX_PROCESSES}, got {world}")
        self.name, self.rank, self.world, self.timeout = name, rank, world, timeout
        self.alive = alive
        """False when a peer process is known to be gone (checked while waiting)."""
        if create:
            self._shm = shared_memory.SharedMemory(name=name, create=True, size=_HEADER + 2 * _block_bytes(world, size))
            header = np.ndarray((MAX_PROCESSES + 1 + _FLAGS,), np.int64, self._shm.buf, 0)
            header[:] = 0
            header[MAX_PROCESSES] = size  # last: a rank that sees the size sees a zeroed header
        else:
            self._shm, size = _attach(name, timeout, lambda: self.alive())
        self.size = size
        self._seq = np.ndarray((world,), np.int64, self._shm.buf, 0)
        self._flags = np.ndarray((_FLAGS,), np.int64, self._shm.buf, 8 * (MAX_PROCESSES + 1))
        self._step = int(self._seq[rank])

    def contributions(self, vector: np.ndarray) -> np.ndarray:
        """Every rank's ``vector`` (float32, at most ``size`` values, the same length on every rank) as the rows
        of a ``[world, len(vector)]`` view of the segment: valid until this rank's call after next."""
        if vector.ndim != 1 or len(vector) > self.size:
            raise ValueError(f"SharedMemorySum: expected a vector of at most {self.size} values, got {vector.shape}")
        self._step += 1
        step = self._step
        offset = _HEADER + (step % 2) * _block_bytes(self.world, self.size)
        block = np.ndarray((self.world, len(vector)), np.float32, self._shm.buf, offset)
        block[self.rank] = vector
        self._seq[self.rank] = step
        self._wait_for(step)
        return block

    def announce(self, program: int) -> None:
        """Tell the other ranks that ``program`` (a small integer) is compiled: its word in the header."""
        self._flags[program] = 1

    def await_announcement(self, program: int, what: str) -> None:
        """Wait until a rank announced ``program``; ``what`` names it in the error if none does in time."""
        self._wait(
            lambda: not self._flags[program],
            lost=f"a host process exited before announcing {what}",
            late=f"no host process announced {what} within {self.timeout:.0f} s",
        )

    def __call__(self, vector: np.ndarray) -> np.ndarray:
        """The sum of every rank's ``vector``, added in rank order."""
        block = self.contributions(vector)
        total = block[0].copy()
        for r in range(1, self.world):
            total += block[r]
        return total

    def _wait_for(self, step: int) -> None:
        self._wait(
            lambda: [r for r in range(self.world) if self._seq[r] < step],
            lost=f"host process {{0[0]}} exited during step {step} of the gradient exchange",
            late=f"host process {{0[0]}} did not reach step {step} within {self.timeout:.0f} s",
            spins=2000,
        )

    def _wait(self, pending: Callable[[], Any], *, lost: str, late: str, spins: int = 0) -> None:
        """Until ``pending()`` is falsy: ``spins`` quick checks, then one every 0.5 ms (a peer evaluating or
        checkpointing: stop burning the core) with a ``PeerLost`` when a peer is gone (``lost``) or the
        timeout passed (``late``); both are formatted with the last ``pending()``."""
        deadline, checks = time.monotonic() + self.timeout, 0
        while waiting := pending():
            checks += 1
            if checks <= spins:
                continue
            time.sleep(0.0005)
            if not self.alive():
                raise PeerLost(lost.format(waiting))
            if time.monotonic() > deadline:
                raise PeerLost(late.format(waiting))

    def close(self, unlink: bool = False) -> None:
        self._seq = self._flags = None
        try:
            self._shm.close()
        except BufferError:  # a block still lent to an array: the mapping goes with the process
            pass
        if unlink:
            self._shm.unlink()


def _block_bytes(world: int, size: int) -> int:
    """Bytes of one step's block of ``world`` rows of up to ``size`` float32s, rounded up to 64."""
    return -(-world * size * 4 // 64) * 64


def _attach(name: str, timeout: float, alive: Callable[[], bool]) -> tuple[shared_memory.SharedMemory, int]:
    """Rank 0's segment once it exists and holds its size (rank 0 makes it after its helpers start)."""
    from multiprocessing import resource_tracker

    deadline, shm = time.monotonic() + timeout, None
    while True:
        if shm is None:
            try:
                # The resource tracker would unlink rank 0's segment when this process exits (Python 3.11 has
                # no track=False): unregister it.
                shm = shared_memory.SharedMemory(name=name)
                resource_tracker.unregister(shm._name, "shared_memory")  # noqa: SLF001
            except FileNotFoundError:
                pass
        if shm is not None and len(shm.buf) >= _HEADER:
            size = int(np.ndarray((MAX_PROCESSES + 1,), np.int64, shm.buf, 0)[MAX_PROCESSES])
            if size:
                return shm, size
        if not alive():
            raise PeerLost(f"host process 0 exited before making its segment {name}")
        if time.monotonic() > deadline:
            raise PeerLost(f"host process 0's segment {name} did not appear within {timeout:.0f} s")
        time.sleep(0.01)


class HostGroup:
    """Rank 0's side: the helper processes and the segment they share; a context manager."""

    def __init__(self, config: Any, world: int, cores: list[list[int]]):
        """Start the helpers now (their start overlaps this process's own set-up); ``open`` makes the segment."""
        self.world, self.cores, self.sum = world, cores, None
        self.segment = f"marin_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        self._dir = tempfile.TemporaryDirectory(prefix="marin-host-")
        path = os.path.join(self._dir.name, "config.pkl")
        with open(path, "wb") as f:
            pickle.dump(config, f)
        self._cache = _SharedCompileCache(os.path.join(self._dir.name, "jax-cache"))
        self.helpers = [self._start(path, rank) for rank in range(1, world)]

    def open(self, size: int) -> SharedMemorySum:
        """Rank 0's side of the exchange, for vectors of up to ``size`` values; the helpers attach to it."""
        self.sum = SharedMemorySum(self.segment, size, 0, self.world, create=True, alive=self._helpers_alive)
        return self.sum

    def _start(self, path: str, rank: int) -> subprocess.Popen:
        env = {
            **os.environ,
            RANK_ENV: str(rank),
            WORLD_ENV: str(self.world),
            SEGMENT_ENV: self.segment,
            CORES_ENV: ",".join(map(str, self.cores[rank])),
            **self._cache.env,
        }
        entry = (
            "from marin.trainer.host_parallel import start_helper; start_helper()\n"
            f"from marin.trainer.loop import run_host_helper; run_host_helper({path!r})"
        )
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
            if self.sum is not None:
                self.sum.close(unlink=True)
            self._cache.restore()
            self._dir.cleanup()


class _SharedCompileCache:
    """One persistent compilation cache for a group's processes, so that a program compiled by one is loaded
    by the others: the helpers start ~3 s after rank 0 (a fresh interpreter's imports) and find every
    program of rank 0's initialisation already compiled (~1 s of their start on the baby Shakespeare model).
    Rank 0 uses ``directory`` unless its process already has a cache (kept, and shared), and gets its own
    settings back on ``restore``."""

    _OPTIONS = (
        "jax_compilation_cache_dir",
        "jax_persistent_cache_min_compile_time_secs",
        "jax_persistent_cache_min_entry_size_bytes",
    )

    def __init__(self, directory: str):
        import jax

        self._previous = {name: getattr(jax.config, name) for name in self._OPTIONS}
        shared = self._previous["jax_compilation_cache_dir"] or directory
        settings = dict(zip(self._OPTIONS, (shared, 0, 0)))
        self.env = {name.upper(): str(value) for name, value in settings.items()}
        """The helpers' environment: JAX reads these settings at import."""
        self._set(settings)

    def restore(self) -> None:
        self._set(self._previous)

    @staticmethod
    def _set(settings: dict) -> None:
        import jax
        from jax.experimental.compilation_cache import compilation_cache

        if all(getattr(jax.config, name) == value for name, value in settings.items()):
            return
        for name, value in settings.items():
            jax.config.update(name, value)
        compilation_cache.reset_cache()  # the cache is set up once per process: again, with these settings


def helper_sum() -> SharedMemorySum:
    """A helper's side of the exchange, from the environment its rank 0 set."""
    parent = _PARENT or os.getppid()
    alive = lambda: os.getppid() == parent  # noqa: E731
    return SharedMemorySum(os.environ[SEGMENT_ENV], None, host_rank(), host_world(), create=False, alive=alive)


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


_PARENT: int | None = None  # a helper's rank 0, noted first thing (a helper outliving it is re-parented)


def start_helper() -> None:
    """A helper's first act (before it imports the trainer): note its rank 0 and pin to its cores. Then
    ``marin.trainer.loop.run_host_helper`` trains (this module never imports the loop that imports it)."""
    global _PARENT
    _PARENT = os.getppid()
    pin_to_cores([int(c) for c in os.environ[CORES_ENV].split(",")])


def load_config(path: str) -> Any:
    """The config rank 0 pickled for its helpers."""
    with open(path, "rb") as f:
        return pickle.load(f)
