"""Planning: from the steps an experiment lists to an ordered DAG with versions, hashes and paths.

A step's identity is its *version*, a small JSON document:

    {"name": "stats/numbers",
     "config": {"bins": 10},                                    # versioned() fields by dotted path
     "inputs": {"input_path": "raw/numbers-1a2b3c4d/numbers.jsonl"}}  # dependency identities

and its output path is ``<prefix>/<name>-<hash>`` with ``hash = sha256(version)[:8]``. Dependencies
enter by identity (``name-hash``), which already folds in their own versions, so versions stay small
and are computed in one pass in topological order: no recursion, no dependence on the prefix, and
``json.dumps(sort_keys=True)`` removes dict ordering. Unversioned fields never enter, and neither do the
fields of a versioned dataclass declared with ``marin.identity.runtime_field`` (how a step runs).

Everything here is pure: it reads no files and starts nothing, so planning 1,000 steps takes
milliseconds and a dry run touches nothing.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from marin.execution.step import ExecutorStep, InputName, OutputName, VersionedValue
from marin.identity import identity_fields
from marin.storage import is_absolute, join

HASH_LENGTH = 8


class PlanError(ValueError):
    """The declared DAG cannot be planned (bad config, dangling input, cycle, ambiguous name)."""


@dataclasses.dataclass(frozen=True)
class Placeholder:
    """A placeholder found in a config, with the dotted path of the field that holds it."""

    field: str
    value: VersionedValue | InputName | OutputName


@dataclasses.dataclass(eq=False)
class PlannedStep:
    step: ExecutorStep
    version: dict[str, Any]
    hash: str
    output_path: str
    deps: list[PlannedStep]
    """Blocking dependencies: must succeed before this step runs."""
    nonblocking_deps: list[PlannedStep]
    inputs: dict[str, str]
    """Concrete input paths by field, for ``.executor_info``."""

    @property
    def name(self) -> str:
        return self.step.name

    @property
    def identity(self) -> str:
        return f"{self.step.name}-{self.hash}"

    @property
    def fn_name(self) -> str:
        fn = self.step.fn
        return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


@dataclasses.dataclass
class Plan:
    prefix: str
    steps: list[PlannedStep]
    """All steps, each once, dependencies before dependents."""

    def by_identity(self) -> dict[str, PlannedStep]:
        return {p.identity: p for p in self.steps}

    def dependents(self) -> dict[str, list[PlannedStep]]:
        out: dict[str, list[PlannedStep]] = collections.defaultdict(list)
        for p in self.steps:
            for dep in p.deps:
                out[dep.identity].append(p)
        return out


def iter_placeholders(config: Any, prefix: str = "") -> Iterator[Placeholder]:
    """Yield every placeholder in a config with its dotted field path (``a.b``, ``items[2]``).

    An ``ExecutorStep`` placed directly in a config counts as ``output_path_of(step)``.
    """
    if isinstance(config, (VersionedValue, InputName, OutputName)):
        yield Placeholder(prefix, config)
    elif isinstance(config, ExecutorStep):
        yield Placeholder(prefix, InputName(step=config))
    elif dataclasses.is_dataclass(config) and not isinstance(config, type):
        for f in dataclasses.fields(config):
            yield from iter_placeholders(getattr(config, f.name), _dotted(prefix, f.name))
    elif isinstance(config, dict):
        for key, value in config.items():
            yield from iter_placeholders(value, _dotted(prefix, str(key)))
    elif isinstance(config, (list, tuple)):
        for i, value in enumerate(config):
            yield from iter_placeholders(value, f"{prefix}[{i}]")


def _dotted(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def plan_steps(steps: Sequence[ExecutorStep], prefix: str) -> Plan:
    """Collect the steps and everything they depend on, order them and compute versions and paths."""
    for step in steps:
        if not isinstance(step, ExecutorStep):
            raise PlanError(f"executor steps must be ExecutorStep instances, got {type(step).__name__}: {step!r}")
    collected = _collect(steps)
    edges = _resolve_edges(collected)
    order = _topological_order(collected, edges)
    planned: dict[int, PlannedStep] = {}
    unique: dict[str, PlannedStep] = {}
    for step in order:
        p = _plan_one(step, edges[id(step)], planned, prefix)
        existing = unique.get(p.identity)
        if existing is not None and existing.step.fn is not step.fn:
            raise PlanError(
                f"steps {p.name!r} share name and version but call different functions "
                f"({existing.fn_name} vs {p.fn_name}); give one a different name or a versioned field"
            )
        planned[id(step)] = existing or p
        unique.setdefault(p.identity, p)
    _check_name_references(collected, edges, planned)
    return Plan(prefix=prefix, steps=list(unique.values()))


def _collect(roots: Sequence[ExecutorStep]) -> list[ExecutorStep]:
    """Every step reachable from ``roots`` through step objects in configs (iterative DFS)."""
    seen: dict[int, ExecutorStep] = {}
    stack = list(reversed(roots))
    while stack:
        step = stack.pop()
        if id(step) in seen:
            continue
        _check_step(step)
        seen[id(step)] = step
        for ph in iter_placeholders(step.config):
            if isinstance(ph.value, InputName) and isinstance(ph.value.step, ExecutorStep):
                stack.append(ph.value.step)
    return list(seen.values())


def _check_step(step: ExecutorStep) -> None:
    if not callable(step.fn):
        raise PlanError(f"step {step.name!r}: fn must be callable, got {step.fn!r}")
    if not dataclasses.is_dataclass(step.config) or isinstance(step.config, type):
        raise PlanError(f"step {step.name!r}: config must be a dataclass instance, got {type(step.config).__name__}")


@dataclasses.dataclass(frozen=True)
class _Edge:
    field: str
    target: ExecutorStep | None  # None for hardcoded paths
    input: InputName


def _resolve_edges(steps: list[ExecutorStep]) -> dict[int, list[_Edge]]:
    """Input placeholders of each step, with name references resolved to declared steps."""
    by_name: dict[str, ExecutorStep] = {}
    for step in steps:
        by_name.setdefault(step.name, step)
    edges: dict[int, list[_Edge]] = {}
    for step in steps:
        out = []
        for ph in iter_placeholders(step.config):
            if not isinstance(ph.value, InputName):
                continue
            target = ph.value.step
            if isinstance(target, str):
                if target not in by_name:
                    raise PlanError(
                        f"step {step.name!r}, field {ph.field!r}: input refers to undeclared step {target!r}; "
                        "pass that step to executor_main or reference the step object"
                    )
                target = by_name[target]
            out.append(_Edge(ph.field, target, ph.value))
        edges[id(step)] = out
    return edges


def _topological_order(steps: list[ExecutorStep], edges: dict[int, list[_Edge]]) -> list[ExecutorStep]:
    """Kahn's algorithm: dependencies first, declaration order kept among independent steps."""
    indegree = {id(s): 0 for s in steps}
    dependents: dict[int, list[ExecutorStep]] = collections.defaultdict(list)
    for step in steps:
        for edge in edges[id(step)]:
            if edge.target is not None:
                indegree[id(step)] += 1
                dependents[id(edge.target)].append(step)
    # Reverse of collection order puts leaves (dependencies) first, matching how users read a DAG.
    ready = collections.deque(s for s in reversed(steps) if indegree[id(s)] == 0)
    order = []
    while ready:
        step = ready.popleft()
        order.append(step)
        for child in dependents[id(step)]:
            indegree[id(child)] -= 1
            if indegree[id(child)] == 0:
                ready.append(child)
    if len(order) != len(steps):
        stuck = [s for s in steps if indegree[id(s)] > 0]
        raise PlanError(f"dependency cycle: {_describe_cycle(stuck, edges)}")
    return order


def _describe_cycle(stuck: list[ExecutorStep], edges: dict[int, list[_Edge]]) -> str:
    """Walk input edges among the stuck steps until one repeats; that loop is a cycle."""
    stuck_ids = {id(s) for s in stuck}
    path: list[tuple[ExecutorStep, str]] = []
    position: dict[int, int] = {}
    step = stuck[0]
    while id(step) not in position:
        position[id(step)] = len(path)
        edge = next(e for e in edges[id(step)] if e.target is not None and id(e.target) in stuck_ids)
        path.append((step, edge.field))
        step = edge.target
    loop = path[position[id(step)] :]
    return " -> ".join(f"{s.name!r} (field {f!r})" for s, f in loop) + f" -> {step.name!r}"


def _plan_one(step: ExecutorStep, edges: list[_Edge], planned: dict[int, PlannedStep], prefix: str) -> PlannedStep:
    config_version: dict[str, Any] = {}
    for ph in iter_placeholders(step.config):
        if isinstance(ph.value, VersionedValue):
            config_version[ph.field] = _json_value(ph.value.value, step.name, ph.field)
    input_version: dict[str, str] = {}
    deps: list[PlannedStep] = []
    nonblocking: list[PlannedStep] = []
    for edge in edges:
        sub = edge.input.name
        if edge.target is None:
            input_version[edge.field] = f"hardcoded:{sub}"
            continue
        dep = planned[id(edge.target)]
        input_version[edge.field] = join(dep.identity, sub) if sub else dep.identity
        bucket = deps if edge.input.block_on_step else nonblocking
        if dep not in bucket:
            bucket.append(dep)
    version = {"name": step.name, "config": config_version, "inputs": input_version}
    digest = hashlib.sha256(json.dumps(version, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    step_hash = digest[:HASH_LENGTH]
    output_path = _output_path(step, step_hash, prefix)
    inputs = {}
    for edge in edges:
        inputs[edge.field] = _input_path(edge.input, planned.get(id(edge.target)), prefix)
    nonblocking = [d for d in nonblocking if d not in deps]
    return PlannedStep(step, version, step_hash, output_path, deps, nonblocking, inputs)


def _output_path(step: ExecutorStep, step_hash: str, prefix: str) -> str:
    if step.override_output_path is None:
        return join(prefix, f"{step.name}-{step_hash}")
    override = step.override_output_path
    if is_absolute(override):
        return override
    return join(prefix, override)


def _input_path(name: InputName, dep: PlannedStep | None, prefix: str) -> str:
    if dep is None:
        return join(prefix, name.name or "")
    return join(dep.output_path, name.name) if name.name else dep.output_path


def _check_name_references(steps, edges, planned) -> None:
    """A name reference is ambiguous when two different versions of that step name are in the DAG."""
    identities_by_name: dict[str, set[str]] = collections.defaultdict(set)
    for step in steps:
        identities_by_name[step.name].add(planned[id(step)].identity)
    for step in steps:
        for edge in edges[id(step)]:
            if isinstance(edge.input.step, str) and len(identities_by_name[edge.input.step]) > 1:
                raise PlanError(
                    f"step {step.name!r}, field {edge.field!r}: name {edge.input.step!r} matches "
                    f"{len(identities_by_name[edge.input.step])} different steps; reference the step object"
                )


def _json_value(value: Any, step_name: str, field: str) -> Any:
    """A versioned value as canonical JSON data (dataclasses as dicts, tuples as lists)."""
    if isinstance(value, VersionedValue):
        return _json_value(value.value, step_name, field)
    if isinstance(value, (InputName, OutputName, ExecutorStep)):
        raise PlanError(f"step {step_name!r}, field {field!r}: inputs and outputs must not be wrapped in versioned()")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):  # how it runs never counts
        return {f.name: _json_value(getattr(value, f.name), step_name, field) for f in identity_fields(value)}
    if isinstance(value, dict):
        return {str(k): _json_value(v, step_name, field) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_value(v, step_name, field) for v in value]
    raise PlanError(
        f"step {step_name!r}, field {field!r}: versioned value of type {type(value).__name__} is not "
        "JSON-serializable; use numbers, strings, lists, dicts or dataclasses of those"
    )


def instantiate_config(planned: PlannedStep) -> Any:
    """The step's config with every placeholder replaced by its concrete value or path."""

    def resolve(value: Any, field: str) -> Any:
        if isinstance(value, VersionedValue):
            return resolve(value.value, field)
        if isinstance(value, OutputName):
            return join(planned.output_path, value.name) if value.name else planned.output_path
        if isinstance(value, (InputName, ExecutorStep)):
            return planned.inputs[field]
        return _map_container(value, field, resolve)

    return resolve(planned.step.config, "")


def _map_container(value: Any, field: str, fn: Callable[[Any, str], Any]) -> Any:
    """Rebuild a container with ``fn(child, dotted_path)`` applied to each child (same paths as
    ``iter_placeholders``)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {
            f.name: fn(getattr(value, f.name), _dotted(field, f.name)) for f in dataclasses.fields(value) if f.init
        }
        return dataclasses.replace(value, **changes)
    if isinstance(value, dict):
        return {k: fn(v, _dotted(field, str(k))) for k, v in value.items()}
    if isinstance(value, list):
        return [fn(v, f"{field}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, tuple):
        return tuple(fn(v, f"{field}[{i}]") for i, v in enumerate(value))
    return value
