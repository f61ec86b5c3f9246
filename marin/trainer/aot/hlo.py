"""The collectives of a compiled program, read from its HLO text: kind, executions per step, bytes, and
whether they cross the data-centre network (DCN) between slices.

    collectives(compiled.as_text(), slice_of=[d.slice_index for d in mesh.devices.flat])
    # [Collective(kind="all-gather", count=64, bytes=..., group_size=4, crosses_dcn=False), ...]

Counting follows the call graph from ``ENTRY``: an op inside a ``while`` body counts once per iteration (the trip
count is read from the loop's condition, ``i < N``), inside a fusion once per call. XLA:TPU clones an async
collective into the fusions that start, overlap and finish it; the clones share their ``channel_id``, so one
channel counts once per execution of the computation that holds it. ``bytes`` is the whole buffer the
collective is about (an all-gather's result, a reduce-scatter's operand, an all-reduce's value) per device and
execution; ``wire_bytes`` what a ring moves per device for it (``(n - 1) / n`` of that, twice for an
all-reduce). Replica groups index the program's devices in mesh order; a group spanning two slices crosses DCN (on
several slices XLA:TPU compiles one program per slice and sends what crosses them through the Megascale
runtime: those sends are the DCN collectives).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence

import numpy as np

KINDS = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all", "ragged-all-to-all", "collective-permute")
_DTYPE_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4, "f32": 4}
_DTYPE_BYTES.update({"s64": 8, "u64": 8, "f64": 8, "s4": 0.5, "u4": 0.5})
_ARRAY = re.compile(r"\b([a-z]+[0-9]*[a-z0-9]*)\[([0-9,]*)\]")
_INSTRUCTION = re.compile(r"^\s+(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*?)\s([a-z][a-z0-9\-]*)\((.*)$")
_HEADER = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s*\(.*\{\s*$")


@dataclasses.dataclass(frozen=True)
class Collective:
    kind: str
    count: int
    """Executions per run of the program (loop trip counts included)."""
    bytes: float
    """Per device and execution (see the module docstring)."""
    group_size: int | None
    """Devices taking part in each group; None where the groups could not be read."""
    crosses_dcn: bool | None
    """Whether a group spans slices; None where unknown."""

    @property
    def wire_bytes(self) -> float:
        """What a ring moves per device per execution."""
        n = self.group_size or 1
        if self.kind == "collective-permute":
            return self.bytes
        factor = (n - 1) / n if n > 1 else 0.0
        return self.bytes * factor * (2 if self.kind == "all-reduce" else 1)


@dataclasses.dataclass
class _Computation:
    name: str
    lines: list[str]


def _computations(text: str) -> tuple[dict[str, _Computation], str | None]:
    comps: dict[str, _Computation] = {}
    entry, current = None, None
    for line in text.splitlines():
        if current is None:
            match = _HEADER.match(line)
            if match and not line.startswith(" "):
                current = _Computation(match.group(1), [])
                comps[current.name] = current
                entry = current.name if line.startswith("ENTRY") else entry
            continue
        if line.rstrip() == "}":  # not "}}, metadata=...": an attribute may run over several lines
            current = None
        else:
            current.lines.append(line)
    return comps, entry


def _array_bytes(shape_text: str) -> list[float]:
    out = []
    for dtype, dims in _ARRAY.findall(shape_text):
        if dtype in _DTYPE_BYTES or dtype.startswith("f8"):
            size = math.prod(int(d) for d in dims.split(",") if d) if dims else 1
            out.append(size * _DTYPE_BYTES.get(dtype, 1))
    return out


def _trip_count(condition: _Computation | None) -> int | None:
    """N of a counted loop ``i < N`` (as ``lax.scan``/``fori_loop`` compile) from its condition computation."""
    if condition is None:
        return None
    constants = {}
    for line in condition.lines:
        match = _INSTRUCTION.match(line)
        if match and match.group(3) == "constant":
            value = re.match(r"\s*(-?\d+)\)", match.group(4))
            if value:
                constants[match.group(1)] = int(value.group(1))
        if match and match.group(3) == "compare" and "direction=LT" in line:
            operands = re.findall(r"%([\w.\-]+)", match.group(4).split(")")[0])
            for name in operands[1:]:
                if name in constants:
                    return constants[name]
    return None


def _groups(attributes: str, num_devices: int) -> list[list[int]] | None:
    """The device groups of a collective from its attributes, in the program's device numbering."""
    pairs = re.search(r"source_target_pairs=\{(.*?)\}\}", attributes)
    if pairs:
        return [[int(x) for x in pair.split(",")] for pair in re.findall(r"\{(\d+,\d+)", pairs.group(1) + "}")]
    iota = re.search(r"replica_groups=\[([\d,]+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?", attributes)
    if iota:
        shape = [int(x) for x in iota.group(1).split(",")]
        ids = np.arange(num_devices).reshape([int(x) for x in iota.group(2).split(",")])
        if iota.group(3):
            ids = ids.transpose([int(x) for x in iota.group(3).split(",")])
        return ids.reshape(shape).reshape(-1, shape[-1]).tolist()
    mesh = re.search(r"replica_groups=mesh\[([^\]]*)\]\s*\{([^}]*)\}", attributes)
    if mesh:
        axes = re.findall(r"'([^']+)'=(\d+)", mesh.group(1))
        names, sizes = [a for a, _ in axes], [int(s) for _, s in axes]
        over = [names.index(a) for a in re.findall(r"'([^']+)'", mesh.group(2))]
        ids = np.arange(math.prod(sizes)).reshape(sizes)
        rest = [i for i in range(len(sizes)) if i not in over]
        return ids.transpose(rest + over).reshape(-1, math.prod(sizes[i] for i in over) or 1).tolist()
    explicit = re.search(r"replica_groups=\{(\{[\d,]*\}(?:,\{[\d,]*\})*)?\}", attributes)
    if explicit:
        groups = [[int(x) for x in g.split(",") if x] for g in re.findall(r"\{([\d,]*)\}", explicit.group(1) or "")]
        return groups or [list(range(num_devices))]
    return None


def _collective(kind: str, opcode: str, shape_text: str, attributes: str, slice_of: Sequence[int]):
    arrays = _array_bytes(shape_text)
    if not arrays:
        return None
    value = max(arrays) if opcode.endswith("-start") else sum(arrays)
    groups = _groups(attributes, len(slice_of))
    size = len(groups[0]) if groups else None
    if kind == "reduce-scatter" and size:
        value *= size  # the operand: the result is one group member's share
    crosses = None
    if groups is not None and all(0 <= i < len(slice_of) for g in groups for i in g):
        crosses = any(len({slice_of[i] for i in g}) > 1 for g in groups)
    return kind, value, size, crosses


def collectives(text: str, slice_of: Sequence[int]) -> list[Collective]:
    """The program's collectives, merged by (kind, bytes, group size, DCN), most bytes first.

    On several slices XLA compiles one program per slice: its replica groups stay within the slice (ICI), and
    what crosses slices is a ``send`` to the Megascale runtime naming the collective it is part of; each such
    send counts as that collective over the slices, its bytes the chunk it sends."""
    slices = len(set(slice_of))
    comps, entry = _computations(text)
    found: dict[tuple, int] = {}

    def walk(name: str, times: int, seen: set, stack: tuple) -> None:
        comp = comps.get(name)
        if comp is None or name in stack:
            return
        for line in comp.lines:
            match = _INSTRUCTION.match(line)
            if not match:
                continue
            opcode = match.group(3)
            kind = opcode.removesuffix("-start")
            megascale = re.search(r'_xla_megascale_transfer_type="(\w+)"', line) if opcode == "send" else None
            if megascale:  # a collective across slices: host transfers through the Megascale runtime, over DCN
                arrays = _array_bytes(match.group(2).split("u32[]")[0])
                parsed = (megascale.group(1).lower().replace("_", "-"), sum(arrays), slices, True)
                found[parsed] = found.get(parsed, 0) + times
            elif kind in KINDS and not opcode.endswith("-done"):
                channel = re.search(r"channel_id=(\d+)", line)
                key = channel.group(1) if channel else match.group(1)
                if key not in seen:
                    seen.add(key)
                    parsed = _collective(kind, opcode, match.group(2), line, slice_of)
                    if parsed:
                        found[parsed] = found.get(parsed, 0) + times
            body = re.search(r"body=%?([\w.\-]+)", line)
            if opcode == "while" and body:
                condition = re.search(r"condition=%?([\w.\-]+)", line)
                trips = _trip_count(comps.get(condition.group(1))) if condition else None
                walk(body.group(1), times * (trips or 1), set(), (*stack, name))
                continue
            for callee in re.findall(r"(?:calls|called_computations)=\{?%?([\w.\-]+)", line):
                walk(callee, times, seen, (*stack, name))
            branches = re.search(r"branch_computations=\{([^}]*)\}", line)
            for callee in re.findall(r"%?([\w.\-]+)", branches.group(1)) if branches else ():
                walk(callee, times, set(), (*stack, name))

    if entry is not None:
        walk(entry, 1, set(), ())
    merged = [Collective(kind, count, value, size, crosses) for (kind, value, size, crosses), count in found.items()]
    return sorted(merged, key=lambda c: -c.count * c.bytes)
