"""The executor: experiments declare DAGs of versioned steps; the executor materializes them under a prefix.

See ``marin.execution.plan`` for identity (versions and hashes) and ``marin.execution.executor`` for how
steps run exactly once across executors.
"""

from marin.execution.executor import Executor, PreviouslyFailed, RunResult, StepsFailed
from marin.execution.lease import LeaseConfig
from marin.execution.main import ExecutorMainConfig, executor_main
from marin.execution.plan import Plan, PlanError, PlannedStep
from marin.execution.status import StepState
from marin.execution.step import (
    ExecutorStep,
    InputName,
    OutputName,
    ResourceConfig,
    TpuSlices,
    VersionedValue,
    output_path_of,
    this_output_path,
    versioned,
)

__all__ = [
    "Executor",
    "ExecutorMainConfig",
    "ExecutorStep",
    "InputName",
    "LeaseConfig",
    "OutputName",
    "Plan",
    "PlanError",
    "PlannedStep",
    "PreviouslyFailed",
    "ResourceConfig",
    "TpuSlices",
    "RunResult",
    "StepState",
    "StepsFailed",
    "VersionedValue",
    "executor_main",
    "output_path_of",
    "this_output_path",
    "versioned",
]
