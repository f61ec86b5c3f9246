"""The loss a ladder is made of: bits per byte on one held-out set, from an eval step's ``results.json``.

    heldout_bpb(eval_path, "stories")                    # 0.1581, read from <eval_path>/results.json
    bits_per_byte(results, "stories", where=url)         # the same from a parsed document

One reader for the fit's runs (``marin.scaling.step``), the target's actual loss in the report and in the
data browser (``data_browser.fit``): ``results.json → validation[<heldout>].bits_per_byte``, as
``marin.evaluation.step`` writes it. A value that is there but not finite (a diverged run) is returned as
it is, for the caller to name; a missing file raises ``FileNotFoundError``; a file without that set (or
not a number there) raises ``HeldoutError`` naming the file, the field and the sets it does have.
Numpy-free: the browser and the report import it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from marin.storage import join, read_text

RESULTS_FILE = "results.json"


class HeldoutError(ValueError):
    """``results.json`` has no number at ``validation[<heldout>].bits_per_byte``."""


def bits_per_byte(results: Any, heldout: str, where: str = RESULTS_FILE) -> float:
    """``results["validation"][heldout]["bits_per_byte"]`` as a float (NaN and infinities included)."""
    validation = results.get("validation") if isinstance(results, dict) else None
    scores = validation.get(heldout) if isinstance(validation, dict) else None
    value = scores.get("bits_per_byte") if isinstance(scores, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        sets = sorted(validation) if isinstance(validation, dict) else []
        found = "no such field" if value is None else f"{value!r}"
        raise HeldoutError(
            f"{where}: validation[{heldout!r}].bits_per_byte must be a number, got {found} (sets there: {sets})"
        )
    return float(value)


def _read_json(url: str) -> Any:
    return json.loads(read_text(url))


def heldout_bpb(eval_path: str, heldout: str, read_json: Callable[[str], Any] = _read_json) -> float:
    """Bits per byte on ``heldout`` from ``<eval_path>/results.json``. ``read_json`` reads a URL (the
    browser passes its own, bounded and confined to its roots); it raises ``FileNotFoundError`` when the
    eval has not run yet. An unparseable file is a ``HeldoutError`` naming it."""
    url = join(eval_path, RESULTS_FILE)
    try:
        results = read_json(url)
    except ValueError as e:
        raise HeldoutError(f"{url}: not valid JSON ({e})") from None
    return bits_per_byte(results, heldout, where=url)
