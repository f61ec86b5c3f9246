"""What sets runs apart: the fields in which their resolved configs (``.executor_info``'s ``config``) differ.

    a = {"model": {"hidden_dim": 64, "seq_len": 128}, "trainer": {"batch_size": 8}, "output_path": "/x/a-1"}
    b = {"model": {"hidden_dim": 128, "seq_len": 128}, "trainer": {"batch_size": 8}, "output_path": "/x/b-2"}
    differing_fields([a, b])   # [["model.hidden_dim=64"], ["model.hidden_dim=128"]]

Configs are flattened to dotted paths (list items as ``stages[0]``); ``output_path`` is left out, every run
has its own. A run whose config is unknown (no readable ``.executor_info``) gets no fields and does not
count in the comparison, so one old run does not make every field look different.
"""

from __future__ import annotations

import json
from typing import Any

IGNORED = ("output_path",)
"""Leaf names that differ between any two runs and say nothing about them."""
_MISSING = object()


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}, "c": [2]}`` -> ``{"a.b": 1, "c[0]": 2}``; an empty dict or list is a leaf."""
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for k, v in value.items():
            if str(k) not in IGNORED:
                out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(value, list) and value:
        out = {}
        for i, v in enumerate(value):
            out.update(flatten(v, f"{prefix}[{i}]"))
        return out
    return {prefix: value}


def show(value: Any) -> str:
    """A field's value as it reads in a label: strings bare, everything else as JSON (``null``, ``true``)."""
    if value is _MISSING:
        return "(absent)"
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _key(value: Any) -> str:
    return "\0absent" if value is _MISSING else json.dumps(value, sort_keys=True, default=str)


def differing_fields(configs: list[dict | None]) -> list[list[str]]:
    """For each config, ``path=value`` of every field whose value is not the same in all known configs
    (a field absent from some counts as differing), in the order fields first appear."""
    flat = [flatten(c) if isinstance(c, dict) else None for c in configs]
    known = [f for f in flat if f is not None]
    paths = list(dict.fromkeys(p for f in known for p in f))
    differing = [p for p in paths if len({_key(f.get(p, _MISSING)) for f in known}) > 1]
    return [[] if f is None else [f"{p}={show(f.get(p, _MISSING))}" for p in differing] for f in flat]
