"""A run's programs compiled for a TPU slice on a CPU: HBM per chip, collectives, a step-time bound.

    report = compile_run(config, "v5e-4")        # config: the TrainLmConfig a training step would run
    print(report.describe())                     # per program: HBM per chip against 16 GiB, collectives, ...
    verdict = fit_verdict(config, "v5e-4")       # does the train step fit? if not, which lever makes it fit

The programs are the trainer's own: ``run_layout`` builds the optimizer, step options, mesh (over the slice's
compile-only devices) and state shardings exactly as ``train()`` does, ``fresh_state`` / ``train_step_of`` /
``eval_step_of`` give the jitted init, update and held-out loss, and each is lowered from ``ShapeDtypeStruct``s
and compiled by libtpu. Trace-time choices read the mesh's platform (``axes.target_platform``): layers scan,
attention is splash through Mosaic inside ``shard_map``, a MoE dispatches with ``ragged_dot``, as on a TPU.

What the numbers mean (docs/tpu.md): HBM per chip is ``memory_analysis()`` (arguments + outputs - donated
aliases + temporaries + code); a program that does not fit fails to compile with the compiler's own bytes, kept
as the program's ``error``. The step-time bound is a roofline: the model's FLOPs per chip at the chip's bf16
peak, against the collectives' bytes over ICI and DCN (each at its documented per-chip bandwidth), perfectly
overlapped: ``max(compute, ici, dcn)``; its MFU ceiling is ``compute / bound``. libtpu's own cost model is
reported beside it (``cost_analysis``), but it counts a loop body once, gives Mosaic kernels no FLOPs, and its
``optimal_seconds`` is negative for programs it cannot cost (every train step here), so the bound does not
rest on it.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import re
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from marin.trainer.aot.hlo import Collective, collectives
from marin.trainer.aot.targets import GIB, TpuTarget, parse_target, topology_devices
from marin.trainer.axes import BATCH, SEQ
from marin.trainer.data.loader import assemble
from marin.trainer.loop import RunConfig, RunLayout, eval_step_of, fresh_state, run_layout, train_step_of
from marin.trainer.mesh import MeshConfig, batch_shards, dcn_axis, num_slices

logger = logging.getLogger(__name__)

PROGRAMS = ("init", "train_step", "eval_step")


@dataclasses.dataclass(frozen=True)
class ProgramReport:
    """One compiled program on one chip of the slice."""

    name: str
    compile_seconds: float
    argument_bytes: int = 0
    output_bytes: int = 0
    alias_bytes: int = 0
    """Outputs written into donated arguments' buffers (counted once)."""
    temp_bytes: int = 0
    code_bytes: int = 0
    flops: float | None = None
    """libtpu's cost model, per chip: a loop body counted once, Mosaic kernels not at all."""
    bytes_accessed: float | None = None
    optimal_seconds: float | None = None
    """libtpu's cost model as returned (negative: it could not cost every op)."""
    collectives: tuple[Collective, ...] = ()
    mosaic_kernels: int = 0
    """Pallas kernels lowered through Mosaic (``tpu_custom_call``s: splash's forward and backward, ...)."""
    error: str | None = None
    """The compiler's refusal (e.g. RESOURCE_EXHAUSTED with its bytes), when it did not compile."""
    needed_bytes: float | None = None
    """What the compiler said the program needs, read from an out-of-memory error."""

    @property
    def hbm_bytes(self) -> int:
        return self.argument_bytes + self.output_bytes - self.alias_bytes + self.temp_bytes + self.code_bytes

    @property
    def compiled(self) -> bool:
        return self.error is None


@dataclasses.dataclass(frozen=True)
class RunReport:
    target: TpuTarget
    mesh: dict[str, int]
    dcn_axis: str | None
    """The mesh axis spanning the slices (multislice only)."""
    tokens_per_step: int
    model_flops_per_step: float
    """``flops_per_token`` x tokens: the FLOPs the trainer's MFU counts."""
    programs: dict[str, ProgramReport]

    @property
    def capacity(self) -> int:
        return self.target.chip.hbm_bytes

    def fits(self, program: str = "train_step") -> bool:
        report = self.programs[program]
        return report.compiled and report.hbm_bytes <= self.capacity

    def step_bound(self) -> dict[str, float | None]:
        """The roofline of the train step per chip (seconds): compute, ICI, DCN, and their max."""
        chip, step = self.target.chip, self.programs["train_step"]
        compute = self.model_flops_per_step / self.target.total_chips / chip.peak_flops
        ici = sum(c.count * c.wire_bytes for c in step.collectives if c.crosses_dcn is not True)
        dcn = sum(c.count * c.wire_bytes for c in step.collectives if c.crosses_dcn)
        ici_s = ici / chip.ici_bytes_per_s if chip.ici_bytes_per_s else None
        dcn_s = dcn / chip.dcn_bytes_per_s if chip.dcn_bytes_per_s and dcn else (0.0 if not dcn else None)
        bound = max(t for t in (compute, ici_s, dcn_s) if t is not None)
        return {"compute": compute, "ici": ici_s, "dcn": dcn_s, "bound": bound}

    def tokens_per_s_per_chip(self) -> float:
        return self.tokens_per_step / self.target.total_chips / self.step_bound()["bound"]

    def mfu_ceiling(self) -> float:
        bound = self.step_bound()
        return bound["compute"] / bound["bound"]

    def describe(self) -> str:
        mesh = " x ".join(f"{k} {v}" for k, v in self.mesh.items() if v > 1) or "one chip"
        dcn = f", {self.dcn_axis} spans the {self.target.slices} slices over DCN" if self.dcn_axis else ""
        chips = f"{self.target.total_chips} chips, {self.capacity / GIB:.0f} GiB each"
        lines = [f"{self.target.name} ({chips}): {mesh}{dcn}"]
        for report in self.programs.values():
            lines.append("  " + _describe_program(report, self.capacity))
            for c in report.collectives[:6]:
                where = "DCN" if c.crosses_dcn else "ICI" if c.crosses_dcn is False else "?"
                lines.append(
                    f"      {c.kind:18s} x{c.count:<5d} {c.bytes / 2**20:9.2f} MiB  group {c.group_size}  {where}"
                )
        if self.programs.get("train_step") and self.programs["train_step"].compiled:
            b = self.step_bound()
            parts = ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in b.items() if v is not None and k != "bound")
            lines.append(
                f"  step bound {b['bound'] * 1e3:.1f} ms ({parts}): {self.tokens_per_s_per_chip():,.0f} tokens/s per "
                f"chip, MFU ceiling {self.mfu_ceiling():.0%}"
            )
        return "\n".join(lines)


def _describe_program(r: ProgramReport, capacity: int) -> str:
    if not r.compiled:
        needed = f" (needs {r.needed_bytes / GIB:.2f} GiB)" if r.needed_bytes else ""
        return f"{r.name:10s} does not compile{needed}: {r.error[:160]}"
    verdict = "fits" if r.hbm_bytes <= capacity else "DOES NOT FIT"
    return (
        f"{r.name:10s} {r.hbm_bytes / GIB:7.2f} GiB per chip {verdict} "
        f"(headroom {(capacity - r.hbm_bytes) / GIB:.2f}): "
        f"args {r.argument_bytes / GIB:.2f}, out {r.output_bytes / GIB:.2f}, aliased {r.alias_bytes / GIB:.2f}, "
        f"temp {r.temp_bytes / GIB:.2f}, code {r.code_bytes / 2**20:.1f} MiB; {r.mosaic_kernels} Mosaic kernels; "
        f"compiled in {r.compile_seconds:.1f} s"
    )


def state_shapes(config: RunConfig, layout: RunLayout) -> Any:
    """The train state as ShapeDtypeStructs in its shardings (nothing allocated)."""
    key = jax.ShapeDtypeStruct((2,), jnp.uint32)
    shapes = jax.eval_shape(fresh_state(config, layout.optimizer, layout.shardings), key)
    return jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), shapes, layout.shardings)


def batch_shapes(config: RunConfig, layout: RunLayout, rows: int) -> dict[str, jax.ShapeDtypeStruct]:
    """A batch of ``rows`` sequences as the loader assembles it (its keys and dtypes), split over the batch axis."""
    seq = config.model.seq_len
    one = assemble([(np.zeros(seq + 1, np.int32), np.zeros(seq + 1, np.int32), None)])
    sharding = layout.context.sharding((BATCH, SEQ))
    return {k: jax.ShapeDtypeStruct((rows, *v.shape[1:]), v.dtype, sharding=sharding) for k, v in one.items()}


def per_device_bytes(tree: Any) -> int:
    """Bytes one device holds of a tree of sharded ShapeDtypeStructs (the hand count of arguments)."""
    total = 0
    for leaf in jax.tree.leaves(tree):
        shard = leaf.sharding.shard_shape(leaf.shape)
        total += math.prod(shard) * jnp.dtype(leaf.dtype).itemsize
    return total


def _compile(name: str, jitted: Any, args: tuple, slice_of: list[int]) -> ProgramReport:
    start = time.perf_counter()
    try:
        compiled = jitted.lower(*args).compile()
    except Exception as e:  # the compiler's refusal is the finding (an OOM carries its bytes)
        message = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return ProgramReport(name, time.perf_counter() - start, error=message, needed_bytes=_needed_bytes(str(e)))
    seconds = time.perf_counter() - start
    memory, text = compiled.memory_analysis(), compiled.as_text()
    cost = compiled.cost_analysis() or {}
    cost = cost[0] if isinstance(cost, list) else cost
    return ProgramReport(
        name,
        seconds,
        argument_bytes=memory.argument_size_in_bytes,
        output_bytes=memory.output_size_in_bytes,
        alias_bytes=memory.alias_size_in_bytes,
        temp_bytes=memory.temp_size_in_bytes,
        code_bytes=memory.generated_code_size_in_bytes,
        flops=cost.get("flops"),
        bytes_accessed=cost.get("bytes accessed"),
        optimal_seconds=cost.get("optimal_seconds"),
        collectives=tuple(collectives(text, slice_of)),
        mosaic_kernels=text.count('custom_call_target="tpu_custom_call"'),
    )


_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def _needed_bytes(message: str) -> float | None:
    """The bytes an out-of-memory compile error says the program needs ("... required ... (751.74G) exceeds")."""
    match = re.search(r"\(([\d.]+)([KMGT]?)\)?\s*exceeds", message) or re.search(r"([\d.]+)([KMGT])\s+of HBM", message)
    return float(match.group(1)) * _UNITS[match.group(2)] if match else None


def compile_run(
    config: RunConfig,
    target: str | TpuTarget,
    programs: tuple[str, ...] = PROGRAMS,
    *,
    devices: list | None = None,
) -> RunReport:
    """Compile ``config``'s programs (``init``, ``train_step``, ``eval_step``) for ``target`` with libtpu."""
    target = parse_target(target) if isinstance(target, str) else target
    _check_mesh(config, target)
    devices = devices if devices is not None else topology_devices(target)
    layout = run_layout(config, devices, sharded=True)
    mesh = layout.context.mesh
    slice_of = [getattr(d, "slice_index", 0) for d in mesh.devices.flat]
    trainer, reports = config.trainer, {}
    state = state_shapes(config, layout)
    key = jax.ShapeDtypeStruct((2,), jnp.uint32)
    for name in programs:
        if name == "init":
            reports[name] = _compile(name, fresh_state(config, layout.optimizer, layout.shardings), (key,), slice_of)
        elif name == "train_step":
            batch = batch_shapes(config, layout, trainer.batch_size)
            reports[name] = _compile(name, train_step_of(config, layout), (state, batch), slice_of)
        elif name == "eval_step":
            batch = batch_shapes(config, layout, trainer.eval_batch_size or trainer.batch_size)
            reports[name] = _compile(name, eval_step_of(config, layout), (state.params, batch), slice_of)
        else:
            raise ValueError(f"unknown program {name!r}; programs: {PROGRAMS}")
        logger.info("%s on %s: %s", name, target.name, _describe_program(reports[name], target.chip.hbm_bytes))
    sizes = dict(mesh.shape)
    slices = num_slices(devices)
    tokens = trainer.batch_size * config.model.seq_len
    return RunReport(
        target=target,
        mesh=sizes,
        dcn_axis=dcn_axis(sizes, slices) if slices > 1 else None,
        tokens_per_step=tokens,
        model_flops_per_step=config.model.flops_per_token() * tokens,
        programs=reports,
    )


def _check_mesh(config: RunConfig, target: TpuTarget) -> None:
    """A mesh that cannot cover the slice's chips is refused naming the axes and sizes."""
    mesh, chips = config.trainer.mesh, target.total_chips
    try:
        sizes = mesh.axis_sizes(chips)
    except ValueError as e:
        raise ValueError(f"{target.name} has {chips} chips: {e}") from None
    if math.prod(sizes.values()) != chips:
        described = ", ".join(f"{k}={v}" for k, v in sizes.items())
        raise ValueError(
            f"MeshConfig({described}) covers {math.prod(sizes.values())} devices, but {target.name} has {chips} chips: "
            "give one axis -1 or sizes whose product is the chip count"
        )


@dataclasses.dataclass(frozen=True)
class Verdict:
    """Whether a run's train step fits its slice, and if not, the first change that does (compiled to prove it)."""

    target: TpuTarget
    fits: bool
    report: RunReport | None
    """The train step as configured (None where its state alone exceeds the chips: not compiled)."""
    state_bytes: int
    """Parameters, optimizer state and averages per chip, from their shardings (resident in every program)."""
    lever: str | None = None
    """The change that made it fit on this slice, e.g. "remat='full', num_microbatches=4"."""
    fitting: RunConfig | None = None
    fitting_report: RunReport | None = None
    smallest_slice: TpuTarget | None = None
    """Where no lever fits on ``target``: the smallest slice of its generation where the run fits as configured."""
    tried: tuple[tuple[str, str], ...] = ()
    """(change, outcome) of every configuration compiled or ruled out, in order."""

    def describe(self) -> str:
        capacity = self.target.chip.hbm_bytes
        if self.fits:
            return f"fits {self.target.name}: {self.report.programs['train_step'].hbm_bytes / GIB:.2f} GiB per chip"
        lines = [f"does not fit {self.target.name} ({capacity / GIB:.0f} GiB per chip):"]
        lines += [f"  {change}: {outcome}" for change, outcome in self.tried]
        if self.lever:
            lines.append(f"  fits with {self.lever}")
        elif self.smallest_slice:
            lines.append(
                f"  no lever fits {self.target.name}; the smallest slice that fits: {self.smallest_slice.name}"
            )
        else:
            lines.append("  nothing tried fits: a larger generation or slice is needed")
        return "\n".join(lines)


_REMAT_ORDER = ("none", "minimal", "full")


def lever_configs(config: RunConfig, batch_shards: int) -> list[tuple[str, RunConfig]]:
    """Changes that cut HBM per chip in order of cost, each on top of the one before: stronger remat (recompute),
    more microbatches (smaller matmuls), the whole mesh on fsdp, then tensor parallelism over 2 and 4 chips."""
    model, trainer = config.model, config.trainer
    out: list[tuple[str, RunConfig]] = []
    current = config
    for remat in _REMAT_ORDER[_REMAT_ORDER.index(model.remat) + 1 :]:
        current = dataclasses.replace(current, model=dataclasses.replace(current.model, remat=remat))
        out.append((f"remat={remat!r}", current))
    micro = trainer.num_microbatches
    while trainer.batch_size % (micro * 2) == 0 and (trainer.batch_size // (micro * 2)) % batch_shards == 0:
        micro *= 2
        changed = dataclasses.replace(current.trainer, num_microbatches=micro)
        out.append(
            (f"remat={current.model.remat!r}, num_microbatches={micro}", dataclasses.replace(current, trainer=changed))
        )
    if out:
        current = out[-1][1]
    if current.trainer.mesh.data != 1 or current.trainer.sharding not in ("fsdp", "fsdp_tp"):
        mesh = dataclasses.replace(current.trainer.mesh, data=1, fsdp=-1)
        current = dataclasses.replace(current, trainer=dataclasses.replace(current.trainer, mesh=mesh, sharding="fsdp"))
        out.append(("the whole mesh on fsdp", current))
    for tensor in (2, 4):
        mesh = MeshConfig(
            data=1, fsdp=-1, expert=current.trainer.mesh.expert, context=current.trainer.mesh.context, tensor=tensor
        )
        changed = dataclasses.replace(current.trainer, mesh=mesh, sharding="fsdp_tp")
        out.append((f"tensor={tensor} (fsdp_tp)", dataclasses.replace(current, trainer=changed)))
    return out


def fit_verdict(config: RunConfig, target: str | TpuTarget, *, prove_slice: bool = True) -> Verdict:
    """Does ``config``'s train step fit ``target``? If not, the first lever that fits (``lever_configs``), else
    the smallest slice of the generation that fits (its state per chip first, then, with ``prove_slice``, compiled)."""
    target = parse_target(target) if isinstance(target, str) else target
    capacity = target.chip.hbm_bytes
    devices = topology_devices(target)
    state_bytes = _state_bytes(config, devices)
    tried: list[tuple[str, str]] = []
    report = None
    if state_bytes <= capacity:
        report = compile_run(config, target, ("train_step",), devices=devices)
        if report.fits():
            return Verdict(target, True, report, state_bytes)
        tried.append(("as configured", _outcome(report)))
        layout = run_layout(config, devices, sharded=True)
        for change, candidate in lever_configs(config, batch_shards(layout.context)):
            try:
                if _state_bytes(candidate, devices) > capacity:
                    tried.append((change, "state alone exceeds the chip"))
                    continue
                attempt = compile_run(candidate, target, ("train_step",), devices=devices)
            except ValueError as e:  # a lever the model's shapes cannot take (e.g. heads not divisible by tensor)
                tried.append((change, f"not applicable: {e}"))
                continue
            tried.append((change, _outcome(attempt)))
            if attempt.fits():
                return Verdict(target, False, report, state_bytes, change, candidate, attempt, None, tuple(tried))
    else:
        tried.append(("as configured", f"state alone needs {state_bytes / GIB:.2f} GiB per chip; no lever shrinks it"))
    bigger = _smallest_slice(config, target, prove_slice, tried)
    return Verdict(target, False, report, state_bytes, smallest_slice=bigger, tried=tuple(tried))


def _outcome(report: RunReport) -> str:
    step = report.programs["train_step"]
    if not step.compiled:
        needed = f"needs {step.needed_bytes / GIB:.2f} GiB" if step.needed_bytes else step.error[:120]
        return f"does not compile ({needed})"
    return f"{step.hbm_bytes / GIB:.2f} GiB per chip" + (" fits" if report.fits() else "")


def _state_bytes(config: RunConfig, devices: list) -> int:
    return per_device_bytes(state_shapes(config, run_layout(config, devices, sharded=True)))


def _smallest_slice(config: RunConfig, target: TpuTarget, prove: bool, tried: list) -> TpuTarget | None:
    from marin.trainer.aot.targets import _TOPOLOGIES  # noqa: PLC0415

    for chips in sorted(c for c in _TOPOLOGIES[target.generation] if c > target.chips):
        candidate = TpuTarget(target.generation, chips, target.slices)
        try:
            _check_mesh(config, candidate)
            devices = topology_devices(candidate)
            state = _state_bytes(config, devices)
        except ValueError as e:
            tried.append((candidate.name, f"not applicable: {e}"))
            continue
        if state > target.chip.hbm_bytes:
            tried.append((candidate.name, f"state alone needs {state / GIB:.2f} GiB per chip"))
            continue
        if not prove:
            tried.append((candidate.name, f"state {state / GIB:.2f} GiB per chip (not compiled)"))
            return candidate
        report = compile_run(config, candidate, ("train_step",), devices=devices)
        tried.append((candidate.name, _outcome(report)))
        if report.fits():
            return candidate
    return None
