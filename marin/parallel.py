"""Run many small tasks of a data step as Ray tasks, or in this process when Ray is not wanted.

Data steps (download, dedupe, ...) split their work into tasks (one per file, shard or partition) and
call ``run_tasks(fn, args)``. The results come back in the order of ``args`` whatever order the tasks
finish in, so a step's output never depends on the number of workers.

Inside an executor step the code already runs in a Ray worker: ``ray.is_initialized()`` is true and the
tasks go to the same cluster. A worker blocked in ``ray.wait`` lends its CPU back to the cluster, so
nested tasks cannot deadlock the step that waits for them. Outside Ray (a notebook, a benchmark) Ray is
started by ``init_ray``, the policy the executor uses too, unless ``use_ray=False``.

Every process that runs tasks (a Ray worker, or this one with ``use_ray=False``) first gets the data steps'
malloc policy (``marin.allocator.keep_record_batches_mapped``): freed record batches stay mapped.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from marin.allocator import keep_record_batches_mapped
from marin.logs import configure_logging
from marin.progress import progress_bar

logger = logging.getLogger(__name__)
R = TypeVar("R")


class TaskFailed(RuntimeError):
    """A task raised; the message names the task and carries the original error."""


def init_ray(num_cpus: int | None = None) -> None:
    """The lab's one way to start Ray: connect to the cluster at ``RAY_ADDRESS`` when set, else start a
    local Ray (no dashboard) with ``num_cpus`` (None: all). Nothing happens when Ray is already up (inside
    an executor step's task, say)."""
    import ray

    if ray.is_initialized():
        return
    if os.environ.get("RAY_ADDRESS"):
        logger.info("connecting to Ray cluster at %s", os.environ["RAY_ADDRESS"])
        ray.init(log_to_driver=True)
    else:
        logger.info("starting a local Ray instance (set RAY_ADDRESS to use a cluster)")
        ray.init(include_dashboard=False, num_cpus=num_cpus, log_to_driver=True)


def run_tasks(
    fn: Callable[..., R],
    args: Sequence[tuple],
    *,
    use_ray: bool = True,
    max_workers: int | None = None,
    num_cpus: float = 1,
    memory: int | None = None,
    label: str | None = None,
) -> list[R]:
    """``[fn(*a) for a in args]``, in parallel on Ray with at most ``max_workers`` tasks in flight."""
    label = label or getattr(fn, "__name__", "task")
    start = time.monotonic()
    results: list = [None] * len(args)
    bar = progress_bar(len(args), label, unit="task")
    try:
        for index, result in iter_tasks(
            fn, args, use_ray=use_ray, max_workers=max_workers, num_cpus=num_cpus, memory=memory, label=label
        ):
            results[index] = result
            bar.update()
    finally:
        bar.close()
    where = "Ray tasks" if use_ray else "tasks in-process"
    logger.info("%s: %d %s in %.1fs", label, len(args), where, time.monotonic() - start)
    return results


def iter_tasks(
    fn: Callable[..., R],
    args: Sequence[tuple],
    *,
    use_ray: bool = True,
    max_workers: int | None = None,
    num_cpus: float = 1,
    memory: int | None = None,
    label: str | None = None,
) -> Iterator[tuple[int, R]]:
    """``(index, fn(*args[index]))`` as tasks finish (in order without Ray), at most ``max_workers`` in
    flight; the first failure cancels the rest and raises ``TaskFailed`` naming the task."""
    label = label or getattr(fn, "__name__", "task")
    if not use_ray:
        keep_record_batches_mapped()
        for index, a in enumerate(args):
            try:
                result = fn(*a)
            except Exception as e:
                raise TaskFailed(f"{label} task {index} of {len(args)} failed: {type(e).__name__}: {e}") from e
            yield index, result
        return
    if args:
        yield from _iter_on_ray(fn, args, max_workers, num_cpus, memory, label)


def _iter_on_ray(fn, args, max_workers, num_cpus, memory, label) -> Iterator[tuple[int, Any]]:
    import ray

    init_ray()
    if max_workers is None:
        max_workers = max(1, int(ray.cluster_resources().get("CPU", 1) // max(num_cpus, 1e-3)))
    options: dict[str, Any] = {"num_cpus": num_cpus, "max_retries": 2, "retry_exceptions": False}
    if memory:
        options["memory"] = memory
    remote = ray.remote(_call).options(name=label, **options)
    pending: dict = {}
    next_index = 0
    while next_index < len(args) or pending:
        while next_index < len(args) and len(pending) < max_workers:
            pending[remote.remote(fn, args[next_index])] = next_index
            next_index += 1
        done, _ = ray.wait(list(pending), num_returns=1)
        for ref in done:
            index = pending.pop(ref)
            try:
                result = ray.get(ref)
            except ray.exceptions.RayTaskError as e:
                for other in pending:
                    ray.cancel(other)
                cause = getattr(e, "cause", None) or e
                raise TaskFailed(
                    f"{label} task {index} of {len(args)} failed: {type(cause).__name__}: {cause}"
                ) from cause
            yield index, result


def _call(fn, a):
    configure_logging()
    keep_record_batches_mapped()
    return fn(*a)
