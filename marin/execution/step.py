"""What an experiment declares: steps, the placeholders their configs hold, and resource requests.

    raw = ExecutorStep(name="raw/numbers", fn=make_numbers, config=NumbersConfig(
        n=versioned(1000), output_path=this_output_path()))
    stats = ExecutorStep(name="stats/numbers", fn=compute_stats, config=StatsConfig(
        input_path=raw / "numbers.jsonl", output_path=this_output_path()))

Nothing here touches storage. The placeholders (``versioned``, ``InputName``, ``OutputName``) are
replaced by concrete values when the executor instantiates a config (``marin.execution.plan``), so
``fn`` always receives plain values and can be called directly in a notebook or a test.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from marin.validation import Placeholder, Wrapper

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class VersionedValue(Wrapper, Generic[T]):
    """A config value that is part of the step's identity: changing it changes the output path.

    A dataclass value counts by its result-defining fields only: fields declared with
    ``marin.identity.runtime_field`` (mesh, remat, microbatching, logging ...) never enter the hash.
    """

    value: T


def versioned(value: T) -> VersionedValue[T]:
    return VersionedValue(value)


@dataclasses.dataclass(frozen=True)
class OutputName(Placeholder):
    """The step's own output directory (optionally a sub-path of it)."""

    name: str | None = None


def this_output_path(name: str | None = None) -> OutputName:
    return OutputName(name)


@dataclasses.dataclass(frozen=True)
class InputName(Placeholder):
    """A path inside another step's output, or a prefix-relative path that no step produces.

    ``step`` is an ``ExecutorStep`` or a step name (resolved against the DAG at plan time); it is None
    for ``InputName.hardcoded(path)``. A nonblocking input counts for identity but is not waited on.
    """

    step: ExecutorStep | str | None
    name: str | None = None
    block_on_step: bool = True

    @staticmethod
    def hardcoded(path: str) -> InputName:
        """A path relative to the prefix (e.g. ``raw/manual-upload``) that is not produced by a step."""
        return InputName(step=None, name=path)

    def nonblocking(self) -> InputName:
        return dataclasses.replace(self, block_on_step=False)

    def cd(self, name: str) -> InputName:
        joined = f"{self.name.rstrip('/')}/{name}" if self.name else name
        return dataclasses.replace(self, name=joined)

    def __truediv__(self, name: str) -> InputName:
        return self.cd(name)


def output_path_of(step: ExecutorStep | str, name: str | None = None) -> InputName:
    """An input that is ``step``'s output directory, or ``name`` inside it."""
    return InputName(step=step, name=name)


# TPU pod types the experiments name: Ray's (accelerator version, topology), hosts per slice, chips per host.
TPU_POD_TYPES: dict[str, tuple[str, str, int, int]] = {
    "v4-8": ("v4", "2x2x1", 1, 4),
    "v4-32": ("v4", "2x2x4", 4, 4),
    "v4-2048": ("v4", "8x8x16", 256, 4),
    "v5e-8": ("v5litepod", "2x4", 1, 8),
    "v5e-256": ("v5litepod", "16x16", 64, 4),
    "v5p-8": ("v5p", "2x2x1", 1, 4),
    "v6e-256": ("v6e", "16x16", 64, 4),
}


@dataclasses.dataclass(frozen=True)
class TpuSlices:
    """Whole TPU slices for one step, reserved together (Ray's ``ray.util.tpu.SlicePlacementGroup``)."""

    version: str
    """Ray's accelerator version: ``v4``, ``v5litepod``, ``v5p``, ``v6e``."""
    topology: str
    """Chips per slice as Ray spells it, e.g. ``16x16`` or ``8x8x16``."""
    slices: int = 1
    """More than one: a multislice job (slices talk over the data-centre network, ``MEGASCALE_*``)."""


@dataclasses.dataclass(frozen=True)
class ResourceConfig:
    """What one step's Ray task asks the cluster for.

    ``resources`` carries custom resources, e.g. ``{"TPU-v4-8-head": 1}`` for a one-host TPU.
    ``max_retries`` is how often Ray reruns the task after its worker or node died (preemption);
    an exception raised by the step's function is never retried.

    ``hosts > 1`` runs the step as that many tasks, one per host, each with the resources above, as one
    ``jax.distributed`` job (``marin.trainer.distributed``): they start together, and if a host dies
    all of them are restarted (up to ``max_retries`` times). ``tpu`` reserves whole TPU slices for them;
    ``ResourceConfig.tpu_pod("v5e-256", slices=2)`` fills in hosts, chips and topology.
    """

    num_cpus: float = 1
    num_gpus: float = 0
    memory: int | None = None
    """Bytes of memory Ray reserves for the task (None: no reservation)."""
    resources: Mapping[str, float] = dataclasses.field(default_factory=dict)
    max_retries: int = 0
    hosts: int = 1
    tpu: TpuSlices | None = None
    env_vars: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Environment variables the step's processes start with (Ray's runtime env: a worker of its own, never
    one pooled with steps of another environment), e.g. allocator tunables that glibc reads only at start."""

    def __post_init__(self):
        for field in ("num_cpus", "num_gpus"):
            if getattr(self, field) < 0:
                raise ValueError(f"ResourceConfig.{field} must be >= 0, got {getattr(self, field)}")
        if self.memory is not None and self.memory <= 0:
            raise ValueError(f"ResourceConfig.memory must be a positive number of bytes, got {self.memory}")
        if not isinstance(self.hosts, int) or self.hosts < 1:
            raise ValueError(f"ResourceConfig.hosts must be an int >= 1, got {self.hosts!r}")
        if self.tpu is not None and self.hosts % self.tpu.slices:
            raise ValueError(
                f"ResourceConfig.hosts ({self.hosts}) must be a multiple of tpu.slices ({self.tpu.slices})"
            )

    @staticmethod
    def tpu_pod(pod_type: str, slices: int = 1, *, num_cpus: float = 0, max_retries: int = 0) -> ResourceConfig:
        """Every host of ``slices`` TPU slices of ``pod_type`` (a key of ``TPU_POD_TYPES``)."""
        if pod_type not in TPU_POD_TYPES:
            raise ValueError(
                f"unknown TPU pod type {pod_type!r}; known: {sorted(TPU_POD_TYPES)} "
                "(or build ResourceConfig(hosts=..., tpu=TpuSlices(...)) yourself)"
            )
        version, topology, hosts, chips = TPU_POD_TYPES[pod_type]
        resources = {"TPU": chips}
        if hosts * slices == 1:  # one task: the pod's head resource keeps it off hosts of bigger slices
            resources[f"TPU-{version}-{pod_type.split('-')[1]}-head"] = 1
        return ResourceConfig(
            num_cpus=num_cpus,
            resources=resources,
            hosts=hosts * slices,
            tpu=TpuSlices(version, topology, slices),
            max_retries=max_retries,
        )

    def as_ray_options(self) -> dict[str, Any]:
        """Options of one host's task."""
        options: dict[str, Any] = {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus}
        if self.memory:
            options["memory"] = self.memory
        if self.resources:
            options["resources"] = dict(self.resources)
        return options

    def demands(self) -> dict[str, float]:
        """One host's request in Ray's resource vocabulary (``CPU``, ``GPU``, ``memory``, custom names)."""
        out = {"CPU": float(self.num_cpus), "GPU": float(self.num_gpus)}
        if self.memory:
            out["memory"] = float(self.memory)
        out.update({k: float(v) for k, v in self.resources.items()})
        return {k: v for k, v in out.items() if v > 0}


@dataclasses.dataclass(frozen=True, eq=False)
class ExecutorStep(Placeholder, Generic[T]):
    """A unit of work: ``fn(config)`` writes its outputs under the step's output path.

    ``name`` looks like a path (``tokenized/stories``); with the step's hash it forms the output
    directory ``<prefix>/<name>-<hash>``. ``override_output_path`` pins the directory instead
    (relative to the prefix unless it is a URL or absolute path).
    """

    name: str
    fn: Callable[[T], Any]
    config: T
    description: str | None = None
    resources: ResourceConfig | Mapping[str, Any] | None = None
    pip_extras: tuple[str, ...] = ()
    override_output_path: str | None = None

    def __post_init__(self):
        if not self.name or self.name.startswith("/") or ".." in self.name.split("/"):
            raise ValueError(f"ExecutorStep.name must be a relative path like 'tokenized/x', got {self.name!r}")
        if isinstance(self.resources, Mapping):
            object.__setattr__(self, "resources", ResourceConfig(**self.resources))
        object.__setattr__(self, "pip_extras", tuple(self.pip_extras))

    @property
    def resource_config(self) -> ResourceConfig:
        return self.resources or ResourceConfig()

    def cd(self, name: str) -> InputName:
        return output_path_of(self, name)

    def __truediv__(self, name: str) -> InputName:
        return self.cd(name)

    def __repr__(self) -> str:
        return f"ExecutorStep(name={self.name!r}, fn={getattr(self.fn, '__qualname__', self.fn)!r})"
