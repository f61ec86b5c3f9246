"""A scaling ladder's analysis for ``/fit``: its ``fit.json`` read part by part, and the target run's actual
loss beside the prediction.

The schema is ``marin.scaling.record``'s (the writer's own, format 1 or 2); a damaged part (``runs``,
``budgets``, ``laws.loss``, ``prediction``, ...) is an error naming the file and field, shown in place of that
part, and the rest of the page still renders. The actual loss is read as the ladder reads its runs'
(``marin.scaling.heldout``): ``<prediction.eval_path>/results.json`` → ``validation[<heldout>].bits_per_byte``;
until that exists the page says "not run yet", and the relative error is (actual − predicted) / actual.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from data_browser.readers import ReadFailure
from marin.scaling.heldout import HeldoutError, heldout_bpb
from marin.scaling.record import FitRecord, Prediction


@dataclasses.dataclass
class Actual:
    loss: float | None
    """The target's measured loss, None until its eval has run (or when it cannot be read)."""
    relative_error: float | None
    """(actual − predicted) / actual."""
    status: str
    """``measured``, ``not run yet``, or why it cannot be read."""

    def inside(self, interval: tuple[float, float] | None) -> bool | None:
        if self.loss is None or interval is None:
            return None
        return interval[0] <= self.loss <= interval[1]


@dataclasses.dataclass
class FitView:
    url: str
    record: FitRecord
    errors: dict[str, str] = dataclasses.field(default_factory=dict)
    """Part (``file``, ``runs``, ``budgets``, ``laws.params_opt``, ...) → what is wrong with it."""
    actual: Actual | None = None


def read_fit(url: str, document: Any) -> FitView:
    """Every part of a parsed ``fit.json`` that is of the schema; the others become ``errors``."""
    errors: dict[str, str] = {}
    record = FitRecord.from_json(document, errors)
    return FitView(url, record, {part: f"{url}: {message}" for part, message in errors.items()})


def actual_loss(prediction: Prediction, heldout: str | None, read_json: Callable[[str], Any]) -> Actual:
    """The target's measured loss from its eval's ``results.json`` (``read_json`` raises ``FileNotFoundError``
    when it is absent, ``Forbidden`` outside the roots, ``ReadFailure`` when damaged)."""
    if not prediction.eval_path:
        return Actual(None, None, "not run yet (the prediction names no eval_path)")
    if heldout is None:
        return Actual(None, None, "cannot be read: fit.json names no held-out set")
    try:
        value = heldout_bpb(prediction.eval_path, heldout, read_json)
    except FileNotFoundError:
        return Actual(None, None, "not run yet")
    except (ReadFailure, OSError, HeldoutError) as e:
        return Actual(None, None, f"cannot be read: {e}")
    if not math.isfinite(value) or value <= 0:
        return Actual(None, None, f"not a positive finite number: {value!r} (a diverged run?)")
    return Actual(value, (value - prediction.loss) / value, "measured")
