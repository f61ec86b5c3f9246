"""Which config fields define a result and which only say how it is computed.

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class TrainerConfig:
        batch_size: int                                   # defines the result: part of a step's identity
        num_microbatches: int = runtime_field(1)          # how it runs: never part of the identity

A field declared with ``runtime_field`` changes speed, memory or placement but not what is computed (up
to float rounding): the device mesh, rematerialisation, layer scan, the attention kernel, gradient
accumulation, checkpoint cadence, logging. The executor leaves such fields out of a versioned value's
hash, so moving a run to another slice or turning on remat to fit it reuses (and resumes) its output,
and checkpoints record only the result-defining part of a model config.

A field declared with ``added_field`` defines the result, but was added after results existed: at its default
(what they were computed with) it is left out of the hash, so adding an option never renames old outputs.

This module imports nothing from the lab: configs at every layer (trainer, data steps) declare their
fields with it, and the executor reads the marker without knowing any step's content.
"""

from __future__ import annotations

import dataclasses
from typing import Any

RUNTIME = "marin.runtime"


def runtime_field(default: Any = dataclasses.MISSING, *, default_factory: Any = dataclasses.MISSING) -> Any:
    """A dataclass field that does not change the result (see the module docstring)."""
    return dataclasses.field(default=default, default_factory=default_factory, metadata={RUNTIME: True})


ADDED = "marin.added"


def added_field(default: Any) -> Any:
    """A result-defining field added after results were computed without it (a new model option, say): while
    it holds ``default``, which must be what those results were computed with, it is left out of identities
    (``identity_fields``), so every existing step keeps its identity and its output; set to anything else, it
    counts like any field."""
    return dataclasses.field(default=default, metadata={ADDED: True})


def identity_fields(obj: Any) -> list[dataclasses.Field]:
    """The fields of a dataclass instance that make up its identity: its result fields, less the ``added_field``s
    that hold their default."""
    return [f for f in result_fields(obj) if not (f.metadata.get(ADDED) and getattr(obj, f.name) == f.default)]


def is_runtime(field: dataclasses.Field) -> bool:
    return bool(field.metadata.get(RUNTIME))


def result_fields(obj: Any) -> list[dataclasses.Field]:
    """The fields of a dataclass instance or class that define its result."""
    return [f for f in dataclasses.fields(obj) if not is_runtime(f)]


def result_dict(obj: Any) -> dict[str, Any]:
    """``dataclasses.asdict`` without runtime fields, recursively (nested dataclasses, lists, dicts)."""

    def convert(value: Any) -> Any:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return {f.name: convert(getattr(value, f.name)) for f in result_fields(value)}
        if isinstance(value, (list, tuple)):
            return [convert(v) for v in value]
        if isinstance(value, dict):
            return {k: convert(v) for k, v in value.items()}
        return value

    return convert(obj)
