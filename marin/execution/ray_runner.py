"""Runs step functions as Ray tasks; the only module of the executor that imports Ray.

Ray is started lazily, on the first step that actually has to run, so a rerun with nothing to do never
pays Ray's start-up (seconds and ~700 MB). Without ``RAY_ADDRESS`` a private local Ray is started;
with it, the executor connects to that cluster.

Scheduling is event-driven: the executor blocks in ``ray.wait`` until some task finishes, instead of
sleeping and polling.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
from typing import Any

from marin.execution.step import ResourceConfig

logger = logging.getLogger(__name__)


class InfeasibleResources(RuntimeError):
    """No node of the cluster can ever satisfy a step's resource request."""


def _call_step_fn(fn, config) -> None:
    """The Ray task body. Returns nothing: steps communicate through files under the prefix."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    fn(config)


class RayRunner:
    def __init__(self, num_cpus: int | None = None):
        self._num_cpus = num_cpus
        self._ray = None
        self._remote = None

    def start(self) -> None:
        if self._ray is not None:
            return
        import ray

        self._ray = ray
        if not ray.is_initialized():
            if os.environ.get("RAY_ADDRESS"):
                logger.info("connecting to Ray cluster at %s", os.environ["RAY_ADDRESS"])
                ray.init(log_to_driver=True)
            else:
                logger.info("starting a local Ray instance (set RAY_ADDRESS to use a cluster)")
                ray.init(include_dashboard=False, num_cpus=self._num_cpus, log_to_driver=True)
        self._remote = ray.remote(_call_step_fn)

    def check_feasible(self, step_name: str, resources: ResourceConfig) -> None:
        """Fail fast when no node can host the task (Ray would otherwise leave it pending forever)."""
        demands = resources.demands()
        nodes = [n["Resources"] for n in self._ray.nodes() if n.get("Alive")]
        if any(all(node.get(k, 0) >= v for k, v in demands.items()) for node in nodes):
            return
        missing = sorted({k for k, v in demands.items() if not any(node.get(k, 0) >= v for node in nodes)})
        largest = {k: max((node.get(k, 0) for node in nodes), default=0) for k in demands}
        detail = ", ".join(f"{k}: needs {_amount(k, demands[k])}, largest node has {_amount(k, largest[k])}"
                           for k in missing) or (
            f"no single node has all of {demands}"
        )
        raise InfeasibleResources(
            f"step {step_name!r} can never be scheduled on this Ray cluster ({detail}). "
            "Run it on a cluster that provides these resources (set RAY_ADDRESS; see docs/cluster.md)."
        )

    def submit(self, step_name: str, fn, config, resources: ResourceConfig, pip_extras: tuple[str, ...]):
        options: dict[str, Any] = resources.as_ray_options()
        options.update(name=step_name, max_retries=resources.max_retries, retry_exceptions=False)
        if pip_extras:
            options["runtime_env"] = {"pip": extra_requirements(pip_extras)}
        return self._remote.options(**options).remote(fn, config)

    def wait(self, refs: list, timeout: float | None) -> list:
        if not refs:
            return []
        done, _ = self._ray.wait(refs, num_returns=1, timeout=timeout)
        return done

    def outcome(self, ref) -> str | None:
        """None if the task succeeded, else a message saying why it failed."""
        try:
            self._ray.get(ref)
            return None
        except self._ray.exceptions.RayTaskError as e:
            cause = e.cause if getattr(e, "cause", None) is not None else e
            return f"{type(cause).__name__}: {cause}"
        except self._ray.exceptions.RayError as e:
            return f"{type(e).__name__} (the worker or its node died): {e}"


def _amount(resource: str, value: float) -> str:
    return f"{value / 2**30:.1f} GiB" if resource == "memory" else f"{value:g}"


def extra_requirements(extras: tuple[str, ...], distribution: str = "marin") -> list[str]:
    """The requirement strings behind pyproject extras, read from the installed package metadata."""
    from packaging.requirements import Requirement

    try:
        declared = importlib.metadata.metadata(distribution).get_all("Provides-Extra") or []
        requires = importlib.metadata.requires(distribution) or []
    except importlib.metadata.PackageNotFoundError:
        raise ValueError(f"pip_extras need the {distribution!r} package installed (pip install -e .)") from None
    unknown = [e for e in extras if e not in declared]
    if unknown:
        raise ValueError(f"pip_extras {unknown} are not extras of {distribution!r}; known: {sorted(declared)}")
    out = []
    for line in requires:
        req = Requirement(line)
        if req.marker is None or "extra" not in str(req.marker):
            continue
        if any(req.marker.evaluate({"extra": e}) for e in extras):
            req.marker = None
            out.append(str(req))
    return sorted(set(out))
