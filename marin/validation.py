"""Config checks that tolerate executor placeholders.

A step's config is built twice: once when the experiment declares it, with placeholders such as
``versioned(300)`` or ``output_path_of(step)``, and again by the executor (``dataclasses.replace``)
with concrete values. ``__post_init__`` runs both times; ``check`` validates a versioned value's
content and skips paths that are not known yet, so the second construction is the one that enforces
path-dependent rules.

    check("CorpusConfig", "seed", self.seed, lambda v: v >= 0, ">= 0")
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class Placeholder:
    """Base of the executor's path placeholders (inputs, outputs, steps used as inputs): their value is
    known only when the executor runs the step. Declared here so that configs can be checked without
    importing the executor."""

    __slots__ = ()


class Wrapper:
    """Base of the executor's wrappers around a known value (``versioned``): ``.value`` is the value."""

    __slots__ = ()
    value: Any


def concrete(value: Any) -> tuple[bool, Any]:
    """(True, plain value) for concrete values and versioned ones; (False, None) for unresolved paths."""
    while isinstance(value, Wrapper):
        value = value.value
    if isinstance(value, Placeholder):
        return False, None
    return True, value


def check(owner: str, field: str, value: Any, ok: Callable[[Any], bool], expected: str) -> None:
    """Raise ``ValueError("<owner>.<field> must be <expected>, got <value>")`` unless ``ok(value)``."""
    known, value = concrete(value)
    if known and not ok(value):
        raise ValueError(f"{owner}.{field} must be {expected}, got {value!r}")
