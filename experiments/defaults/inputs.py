"""What every step builder shares: how an input counts for a step's identity, and a data step's resources.

step_input(tokenize_step)             # another step's output: counts by that step's hash
step_input("meta-llama/Llama-3.1-8B") # a hub name or a bucket path: counts by its value (versioned)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from marin.execution import ExecutorStep, InputName, ResourceConfig, versioned

Input = ExecutorStep | InputName | str
"""A step's input: another step (its output directory), a sub-path of one (``step / "train"``), or a literal
path or hub name."""

CPU_DATA = ResourceConfig(num_cpus=1)
"""Where data steps and the quickstart's small evals run: one CPU worker."""


def step_input(value: Input):
    """A step input: another step's output counts for identity by that step's hash; a literal path or hub
    name counts by its value."""
    return versioned(value) if isinstance(value, str) else value


def step_inputs(values: Sequence[Input]) -> tuple:
    return tuple(step_input(v) for v in values)


def named_inputs(values: Mapping[str, Input] | None) -> dict:
    return {name: step_input(v) for name, v in (values or {}).items()}
