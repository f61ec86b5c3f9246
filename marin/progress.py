"""Progress bars for the long parts of steps (tasks of a data step, shards of a tokenization, eval sets).

One look everywhere: ``tqdm`` with the step's label, items done of the total and a rate. In a terminal
it redraws every second; in a log (a Ray worker's output forwarded to the driver, a CI log) it writes a
line at most every 30 s, so hours of tokenization leave a readable trace rather than a flood.
``MARIN_PROGRESS=0`` turns every bar off.
"""

from __future__ import annotations

import os
import sys


def progress_bar(total: int | None, desc: str, unit: str = "it", initial: int = 0):
    """A tqdm bar; ``update(n)`` as work completes, ``set_postfix`` for extra numbers, ``close()`` at the end."""
    from tqdm.auto import tqdm

    interactive = sys.stderr.isatty()
    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        initial=initial,
        dynamic_ncols=True,
        mininterval=1.0 if interactive else 30.0,
        disable=os.environ.get("MARIN_PROGRESS") == "0",
    )
