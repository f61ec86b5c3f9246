"""Run many small tasks of a data step as Ray tasks, or in this process when Ray is not wanted.

Data steps (download, dedupe, ...) split their work into tasks (one per file, shard or partition) and
call ``run_tasks(fn, args)``. The results come back in the order of ``args`` whatever order the tasks
finish in, so a step's output never depends on the number of workers.

Inside an executor step the code already runs in a Ray worker: ``ray.is_initialized()`` is true and the
tasks go to the same cluster. A worker blocked in ``ray.wait`` lends its CPU back to the cluster, so
nested tasks cannot deadlock the step that waits for them. Outside Ray (a notebook, a benchmark) a
local Ray is started, like the executor does, unless ``use_ray=False``.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from marin.progress import progress_bar

logger = logging.getLogger(__name__)
R = TypeVar("R")


class TaskFailed(RuntimeError):
    """A task raised; the message names the task and carries the original error."""


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
    if not args:
        return []
    start = time.monotonic()
    bar = progress_bar(len(args), label, unit="task")
    try:
        if not use_ray:
            out = []
            for i, a in enumerate(args):
                try:
                    out.append(fn(*a))
                except Exception as e:
                    raise TaskFailed(f"{label} task {i} of {len(args)} failed: {type(e).__name__}: {e}") from e
                bar.update()
            logger.info("%s: %d tasks in-process in %.1fs", label, len(args), time.monotonic() - start)
            return out
        out = _run_on_ray(fn, args, max_workers, num_cpus, memory, label, bar)
    finally:
        bar.close()
    logger.info("%s: %d Ray tasks in %.1fs", label, len(args), time.monotonic() - start)
    return out


def _run_on_ray(fn, args, max_workers, num_cpus, memory, label, bar) -> list:
    import ray

    if not ray.is_initialized():
        if os.environ.get("RAY_ADDRESS"):
            ray.init(log_to_driver=True)
        else:
            ray.init(include_dashboard=False, log_to_driver=True)
    if max_workers is None:
        max_workers = max(1, int(ray.cluster_resources().get("CPU", 1) // max(num_cpus, 1e-3)))
    options: dict[str, Any] = {"num_cpus": num_cpus, "max_retries": 2, "retry_exceptions": False}
    if memory:
        options["memory"] = memory
    remote = ray.remote(_call).options(name=label, **options)
    results: list = [None] * len(args)
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
                results[index] = ray.get(ref)
                bar.update()
            except ray.exceptions.RayTaskError as e:
                for other in pending:
                    ray.cancel(other)
                cause = getattr(e, "cause", None) or e
                raise TaskFailed(f"{label} task {index} of {len(args)} failed: {type(cause).__name__}: "
                                 f"{cause}") from cause
    return results


def _call(fn, a):
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return fn(*a)
