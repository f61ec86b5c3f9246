"""Scaling ladders: isoFLOP grids of small runs, the loss-surface fit over them, and its ``fit.json`` record
(docs/scaling.md).

    from marin.scaling import compute_optimal, fit_ladder, isoflop_grid

Names load on first use (PEP 562): importing a submodule runs this file first, and the data browser and the
report read ``fit.json`` through ``marin.scaling.record``, which must not pull in the fit's numerics (numpy,
scipy) or the trainer's model configs that the grid is built from.
"""

import importlib

_HOMES = {
    "LadderRules": "ladder",
    "isoflop_grid": "ladder",
    "nano_family": "ladder",
    "FitError": "fit",
    "Run": "fit",
    "Target": "fit",
    "fit_ladder": "fit",
    "compute_optimal": "surface",
    "fit_loss_surface": "surface",
    "FitRecord": "record",
    "heldout_bpb": "heldout",
}
"""Each public name and the submodule that defines it."""

__all__ = sorted(_HOMES)


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
    globals()[name] = value  # found once; later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
