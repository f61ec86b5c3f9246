"""``executor_main``: the command line every experiment file ends with.

python experiments/hello_world.py --prefix gs://bucket/lab --dry_run true
python experiments/hello_world.py --run_only 'stats/.*' --max_concurrent 4
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Sequence

import draccus

from marin.execution.executor import Executor, PreviouslyFailed, StepsFailed
from marin.execution.experiment import caller_file
from marin.execution.lease import LeaseConfig
from marin.execution.plan import PlanError
from marin.execution.ray_runner import InfeasibleResources
from marin.execution.status import StatusFileError
from marin.execution.step import ExecutorStep
from marin.logs import configure_logging
from marin.storage import MissingBackend, StoreUnavailable, is_url

DEFAULT_PREFIX = "./local_store"


@dataclasses.dataclass(frozen=True)
class ExecutorMainConfig:
    prefix: str | None = None
    """Where outputs go: a local path or a gs:// / s3:// URL. Default: $MARIN_PREFIX, else ./local_store."""
    dry_run: bool = False
    """Print what would run, skip or wait (and why) without touching anything."""
    force_run_failed: bool = False
    """Rerun steps whose last run FAILED (otherwise they are an error)."""
    run_only: list[str] | None = None
    """Regexes of step names: run only those (and their dependencies that have not succeeded)."""
    max_concurrent: int | None = None
    """At most this many steps in flight at once (default: as many as are ready)."""
    lease_heartbeat_s: float = 30.0
    """How often a running step's lease is refreshed."""
    lease_stale_after_s: float = 90.0
    """A lease not refreshed for this long is taken over by another executor."""
    poll_s: float = 1.0
    """How often to check on steps that another executor is running."""

    def resolved_prefix(self) -> str:
        prefix = self.prefix or os.environ.get("MARIN_PREFIX") or DEFAULT_PREFIX
        return prefix.rstrip("/") if is_url(prefix) else os.path.abspath(prefix)


def executor_main(steps: Sequence[ExecutorStep], description: str | None = None, args: Sequence[str] | None = None):
    """Parse the command line, then plan, dry-run or run ``steps``. Exits non-zero on failure."""
    config = draccus.parse(ExecutorMainConfig, args=_list_args(sys.argv[1:] if args is None else list(args)))
    configure_logging()
    prefix = config.resolved_prefix()
    executor = Executor(
        prefix,
        force_run_failed=config.force_run_failed,
        run_only=config.run_only,
        max_concurrent=config.max_concurrent,
        lease=LeaseConfig(heartbeat_s=config.lease_heartbeat_s, stale_after_s=config.lease_stale_after_s),
        poll_s=config.poll_s,
        description=description,
        caller_file=caller_file(),
    )
    try:
        if config.dry_run:
            print(f"dry run under {prefix}:")
            for line in executor.dry_run(steps):
                print(line)
            return None
        result = executor.run(steps)
    except (
        PlanError,
        PreviouslyFailed,
        StepsFailed,
        ValueError,
        MissingBackend,
        StoreUnavailable,
        StatusFileError,
        InfeasibleResources,
    ) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    print(
        f"outputs are under {prefix}: ran {len(result.ran)}, reused {len(result.skipped) + len(result.waited)} "
        f"of {len(result.plan.steps)} steps; experiment record {result.record_url}"
    )
    return result


def _list_args(argv: list[str], list_flags: tuple[str, ...] = ("--run_only",)) -> list[str]:
    """Let list flags take several words (``--run_only a b``) by turning them into draccus's YAML list."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        flag, _, inline = arg.partition("=")
        if flag in list_flags:
            values = [inline] if inline else []
            while i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                i += 1
                values.append(argv[i])
            if len(values) == 1 and values[0].startswith("["):
                out += [flag, values[0]]
            else:
                out += [flag, "[" + ", ".join("'" + v.replace("'", "''") + "'" for v in values) + "]"]
        else:
            out.append(arg)
        i += 1
    return out
