"""Ahead of time: the trainer's own programs compiled by libtpu for a TPU slice, on a machine without one.

    from marin.trainer.aot import compile_run, fit_verdict
    print(compile_run(config, "2 x v5e-256").describe())   # HBM per chip, collectives (DCN marked), step bound

Needs libtpu (``pip install -e ".[tpu-compile]"``); nothing here runs on or needs a TPU. See docs/tpu.md.
"""

from marin.trainer.aot.compile import PROGRAMS, ProgramReport, RunReport, compile_run, per_device_bytes, state_shapes
from marin.trainer.aot.hlo import Collective, collectives
from marin.trainer.aot.targets import CHIPS, TPU_EXTRA, Chip, TpuTarget, check_libtpu, known_targets, parse_target

__all__ = [
    "CHIPS",
    "PROGRAMS",
    "TPU_EXTRA",
    "Chip",
    "Collective",
    "ProgramReport",
    "RunReport",
    "TpuTarget",
    "check_libtpu",
    "collectives",
    "compile_run",
    "known_targets",
    "parse_target",
    "per_device_bytes",
    "state_shapes",
]
