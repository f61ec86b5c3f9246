"""Runs step functions as Ray tasks; the only module of the executor that imports Ray.

Ray is started lazily, on the first step that actually has to run, so a rerun with nothing to do never
pays Ray's start-up (seconds and ~700 MB). Without ``RAY_ADDRESS`` a private local Ray is started;
with it, the executor connects to that cluster.

Scheduling is event-driven: the executor blocks in ``ray.wait`` until some task finishes, instead of
sleeping and polling.

A multi-host step (``ResourceConfig.hosts > 1``) is one *gang* task that reserves a placement group (for
TPUs, whole slices through ``ray.util.tpu``), asks host 0 for a coordinator address, and starts one task
per host with the ``jax.distributed`` coordinates in its environment (``marin.multihost``).
The executor sees only the gang's task: it succeeds when every host did; a host whose function raised
fails it at once (the other hosts are cancelled); a host that died (preemption) restarts the whole gang.

Every task body (a single-host step, a gang and each of its hosts) runs under the step's lease fence
(``marin.execution.fence``): it stops itself once the lease is lost. ``RayRunner.cancel`` is the
executor's side: a force-cancel that kills the worker and, for a gang, its hosts.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import socket
from typing import Any

from marin.execution.fence import FenceSpec, StepFence, run_fenced
from marin.execution.step import ResourceConfig
from marin.logs import configure_logging
from marin.multihost import host_env
from marin.parallel import init_ray
from marin.storage import LeaseLost

logger = logging.getLogger(__name__)


class InfeasibleResources(RuntimeError):
    """No node of the cluster can ever satisfy a step's resource request."""


AUTOSCALING_ENV = "MARIN_AUTOSCALING"
"""Set (to 1) on clusters whose autoscaler adds nodes on demand: a request no current node can hold is then
left to the autoscaler (with a warning) instead of failing fast. infra/cluster-*.yaml set it on the head."""


def _call_step_fn(fn, config, env: dict[str, str] | None = None, fence: FenceSpec | None = None) -> None:
    """The Ray task body. Returns nothing: steps communicate through files under the prefix."""
    configure_logging()
    os.environ.update(env or {})
    run_fenced(fn, config, fence)


def _coordinator_address() -> str:
    """``ip:port`` for ``jax.distributed``'s coordinator, run on host 0 (a port free on it right now)."""
    import ray

    with socket.socket() as s:
        s.bind(("", 0))
        port = s.getsockname()[1]
    return f"{ray.util.get_node_ip_address()}:{port}"


_ELSEWHERE = (
    "Run it on a cluster that provides these resources (set RAY_ADDRESS; see docs/cluster.md), or set "
    f"{AUTOSCALING_ENV}=1 if this cluster's autoscaler adds such nodes on demand."
)


class _HostLost(Exception):
    """A host of a gang died (its worker or node), as opposed to its function raising."""


def _run_gang(step_name: str, fn, config, resources: ResourceConfig, fence: FenceSpec | None = None) -> None:
    """The body of a multi-host step's task: run ``fn(config)`` on ``resources.hosts`` hosts together,
    restarting all of them when one is lost, at most ``resources.max_retries`` times."""
    configure_logging()
    if fence is None:
        return _run_gang_attempts(step_name, fn, config, resources, None)
    # On a lost lease the gang cancels its hosts and releases their reservation (each host's own fence
    # also kills that host); it is not SIGKILLed itself, so the placement group is not leaked.
    with StepFence(fence, on_lost=lambda: None) as watch:
        return _run_gang_attempts(step_name, fn, config, resources, watch)


def _run_gang_attempts(step_name: str, fn, config, resources: ResourceConfig, watch: StepFence | None) -> None:
    for attempt in range(resources.max_retries + 1):
        try:
            return _run_gang_once(step_name, fn, config, resources, watch)
        except _HostLost as e:
            logger.warning(
                "%s: attempt %d of %d lost a host (%s)", step_name, attempt + 1, resources.max_retries + 1, e
            )
            last = e
    raise RuntimeError(f"{step_name}: a host was lost in each of {resources.max_retries + 1} attempts; last: {last}")


def _run_gang_once(step_name: str, fn, config, resources: ResourceConfig, watch: StepFence | None) -> None:
    import ray
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    bundles, release = _reserve_hosts(resources)
    try:

        def on(i: int) -> PlacementGroupSchedulingStrategy:
            pg, index = bundles[i]
            return PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_bundle_index=index)

        fence = watch.spec if watch is not None else None
        coordinator = ray.get(ray.remote(_coordinator_address).options(num_cpus=0, scheduling_strategy=on(0)).remote())
        envs = _host_envs(coordinator, resources)
        # A fresh process per host: jax.distributed must be initialised before anything touches JAX's
        # backend, and a pooled worker may have run JAX already. Distinct env_vars in the runtime env make
        # Ray start a new worker for each host (Ray merges them into the step's own runtime env), and
        # max_calls=1 retires it after the call.
        host, options = ray.remote(max_calls=1)(_call_step_fn), {**_host_options(resources), "max_retries": 0}
        refs = {
            host.options(
                **options,
                name=f"{step_name}[host {i}]",
                scheduling_strategy=on(i),
                runtime_env={"env_vars": {**resources.env_vars, **envs[i]}},
            ).remote(fn, config, envs[i], fence): i
            for i in range(resources.hosts)
        }
        try:
            _wait_hosts(step_name, refs, resources, watch)
        except KeyboardInterrupt:  # the executor cancelled this gang (RayRunner.cancel): kill every host
            _cancel(list(refs))
            raise
    finally:
        release()


def _wait_hosts(step_name: str, refs: dict, resources: ResourceConfig, watch: StepFence | None) -> None:
    """Wait for every host; the first failure, or the loss of the lease, cancels the rest."""
    import ray

    pending = list(refs)
    while pending:
        done, pending = ray.wait(pending, num_returns=1, timeout=watch.spec.check_s if watch else None)
        if watch is not None and watch.lost is not None:
            _cancel(pending + done)
            raise LeaseLost(f"{step_name}: {watch.lost}; cancelled its {resources.hosts} hosts")
        if not done:
            continue
        try:
            ray.get(done[0])
        except ray.exceptions.RayTaskError as e:
            _cancel(pending)
            cause = e.cause if getattr(e, "cause", None) is not None else e
            raise RuntimeError(f"host {refs[done[0]]} of {resources.hosts}: {type(cause).__name__}: {cause}") from None
        except ray.exceptions.RayError as e:
            _cancel(pending)
            if watch is not None:  # a host stopped by its own lease fence is no host to restart
                watch.confirm()
            raise _HostLost(f"host {refs[done[0]]}: {type(e).__name__}: {e}") from None


def _reserve_hosts(resources: ResourceConfig):
    """[(placement group, bundle index)] per host, and a function that releases the reservation."""
    import ray

    if resources.tpu is not None:
        from ray.util.tpu import SlicePlacementGroup

        tpu = resources.tpu
        # No head-reservation timeout: on an autoscaling cluster the slices may take minutes to boot.
        handle = SlicePlacementGroup(
            topology=tpu.topology,
            accelerator_version=tpu.version,
            num_slices=tpu.slices,
            pg_per_slice=True,
            head_reservation_timeout_s=None,
        )
        groups = handle.slice_placement_groups
        ray.get([pg.ready() for pg in groups])
        handle.release_head_pgs()
        per_slice = handle.num_bundles // tpu.slices
        if per_slice * tpu.slices != resources.hosts:
            handle.shutdown()
            raise ValueError(
                f"TPU {tpu.version} {tpu.topology} x{tpu.slices} has {handle.num_bundles} hosts, "
                f"the step asks for hosts={resources.hosts}"
            )
        return [(pg, i) for pg in groups for i in range(per_slice)], handle.shutdown
    bundle = resources.demands()
    pg = ray.util.placement_group([bundle] * resources.hosts, strategy="SPREAD")
    ray.get(pg.ready())
    return [(pg, i) for i in range(resources.hosts)], lambda: ray.util.remove_placement_group(pg)


def _host_options(resources: ResourceConfig) -> dict[str, Any]:
    if resources.tpu is not None:  # a TPU slice bundle holds the host's chips only
        return {"num_cpus": 0, "resources": {"TPU": resources.resources.get("TPU", 4)}}
    return resources.as_ray_options()


def _host_envs(coordinator: str, resources: ResourceConfig) -> list[dict[str, str]]:
    envs = [host_env(coordinator, resources.hosts, i) for i in range(resources.hosts)]
    if resources.tpu is not None and resources.tpu.slices > 1:  # multislice: slices meet over the DCN
        from ray.util.tpu import get_tpu_coordinator_env_vars

        per_slice = resources.hosts // resources.tpu.slices
        for i, env in enumerate(envs):
            env.update(
                get_tpu_coordinator_env_vars(coordinator.rsplit(":", 1)[0], resources.tpu.slices, i // per_slice)
            )
    return envs


def _cancel(refs: list) -> None:
    import ray

    for ref in refs:
        ray.cancel(ref, force=True)


class RayRunner:
    def __init__(self, num_cpus: int | None = None):
        self._num_cpus = num_cpus
        self._ray = None
        self._remote = None
        self._gangs: set = set()

    def start(self) -> None:
        if self._ray is not None:
            return
        import ray

        self._ray = ray
        init_ray(self._num_cpus)
        # One task per worker process (max_calls=1): a step's worker exits when the step ends. A cancel that
        # force-kills a lost step's worker (Ray kills by worker id) can then never land on another step's
        # task that Ray had handed the same, reused, worker in the meantime; and no step inherits another's
        # process state (imports, JAX runtime, malloc arenas, leaked memory).
        self._remote = ray.remote(max_calls=1)(_call_step_fn)
        self._gang = ray.remote(_run_gang)

    def check_feasible(self, step_name: str, resources: ResourceConfig) -> None:
        """Fail fast when no node can host the task (Ray would otherwise leave it pending forever)."""
        demands = resources.demands()
        nodes = [n["Resources"] for n in self._ray.nodes() if n.get("Alive")]
        fits = sum(_copies_that_fit(demands, node) for node in nodes)
        if fits >= resources.hosts:
            return
        if os.environ.get(AUTOSCALING_ENV, "") not in ("", "0"):
            logger.warning(
                "step %r asks for %d x %s, more than the cluster's nodes hold now; waiting for the "
                "autoscaler (%s is set)",
                step_name,
                resources.hosts,
                demands,
                AUTOSCALING_ENV,
            )
            return
        if fits:
            raise InfeasibleResources(
                f"step {step_name!r} needs {resources.hosts} hosts of {demands}; this Ray cluster holds only {fits}. "
                f"{_ELSEWHERE}"
            )
        missing = sorted({k for k, v in demands.items() if not any(node.get(k, 0) >= v for node in nodes)})
        largest = {k: max((node.get(k, 0) for node in nodes), default=0) for k in demands}
        detail = ", ".join(
            f"{k}: needs {_amount(k, demands[k])}, largest node has {_amount(k, largest[k])}" for k in missing
        ) or (f"no single node has all of {demands}")
        raise InfeasibleResources(
            f"step {step_name!r} can never be scheduled on this Ray cluster ({detail}). {_ELSEWHERE}"
        )

    def submit(
        self,
        step_name: str,
        fn,
        config,
        resources: ResourceConfig,
        pip_extras: tuple[str, ...],
        fence: FenceSpec | None = None,
    ):
        runtime_env: dict[str, Any] = {"pip": extra_requirements(pip_extras)} if pip_extras else {}
        if resources.env_vars:
            runtime_env["env_vars"] = dict(resources.env_vars)
        if resources.hosts > 1:  # the gang task holds nothing itself; its hosts hold the resources
            options = {
                "num_cpus": 0,
                "name": step_name,
                "max_retries": resources.max_retries,
                "retry_exceptions": False,
            }
            if runtime_env:
                options["runtime_env"] = runtime_env  # inherited by the host tasks it starts
            ref = self._gang.options(**options).remote(step_name, fn, config, resources, fence)
            self._gangs.add(ref)
            return ref
        options: dict[str, Any] = resources.as_ray_options()
        options.update(name=step_name, max_retries=resources.max_retries, retry_exceptions=False)
        if runtime_env:
            options["runtime_env"] = runtime_env
        return self._remote.options(**options).remote(fn, config, None, fence)

    def cancel(self, ref) -> None:
        """Stop a submitted step now. A single-host task's worker is killed (``force``). A gang task is
        interrupted instead, so that it force-cancels every host and releases their reservation."""
        gang = ref in self._gangs
        self._ray.cancel(ref, force=not gang, recursive=True)

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


def _copies_that_fit(demands: dict[str, float], node: dict[str, float]) -> int:
    """How many hosts' worth of ``demands`` one node's total resources hold."""
    return int(min((node.get(k, 0) // v for k, v in demands.items()), default=1_000_000))


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
