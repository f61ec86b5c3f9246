"""The device mesh and the sharding presets: parallelism is two config fields, never model code.

A mesh arranges the devices on five named axes (data, fsdp, expert, context, tensor), and a rule table (``axes.py``)
maps the logical axes that parameters and activations carry onto them::

    TrainerConfig(..., mesh=MeshConfig(data=1, fsdp=-1, tensor=1), sharding="fsdp")     # ZeRO-3
    TrainerConfig(..., mesh=MeshConfig(data=2, fsdp=2, tensor=2), sharding="fsdp_tp")   # 3-D

Worked example: 8 devices, ``MeshConfig(data=2, fsdp=2, tensor=2)`` and ``"fsdp_tp"`` (tiny model:
hidden 64, 4 query heads of 16, batch 16)::

    wq         [layers, embed, heads, head_dim] (2, 64, 4, 16) -> P(None, "fsdp", "tensor", None)
               each device holds (2, 32, 2, 16); the 2 data replicas hold the same quarter
    Adam mu/nu of wq: the same placement as wq;  Adam's step count (a scalar): replicated
    input_ids  [batch, seq] (16, 32) -> P(("data", "fsdp", "expert"), None): 4 rows per device, tensor
               pairs share rows

The presets (``SHARDING_PRESETS``) differ only in which rules they contain:

    ========  ================================================  =========================
    preset    parameters and optimizer state                    batch
    ========  ================================================  =========================
    dp        replicated                                        over data x fsdp x expert
    fsdp      ``embed`` dimension over fsdp (ZeRO-3: params,    over data x fsdp x expert
              grads and Adam moments sharded, gathered per use)
    tp        heads, kv_heads, mlp, vocab over tensor           over data x fsdp x expert
              (Megatron: column/row-parallel projections)
    fsdp_tp   both of the above                                 over data x fsdp x expert
    ========  ================================================  =========================

Every preset puts the batch over ``data``, ``fsdp`` *and* ``expert``, so an axis a preset leaves idle for
parameters still does data parallelism (``dp`` on an fsdp-sized mesh is plain DP, not wasted devices), and
every preset puts a mixture-of-experts' ``experts`` axis on ``expert`` (expert parallelism, ``MeshConfig.expert``;
``model/moe.py`` exchanges the tokens all-to-all over it), and every preset puts each sequence's positions (``seq``)
on ``context`` (context parallelism, ``MeshConfig.context``; ``attention/context.py`` attends across the split). At
their default size 1 the expert and context axes change nothing.

A mesh of one device gives no ``ShardingContext`` at all (``sharding_context`` returns None): the
trainer then runs exactly the single-device program it always ran.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import jax
import numpy as np
import optax
from jax.sharding import AxisType, Mesh, NamedSharding

from marin.trainer.axes import (
    BATCH,
    EMBED,
    EXPERTS,
    HEADS,
    KV_HEADS,
    LOGICAL_AXES,
    MLP,
    SEQ,
    VOCAB,
    ShardingContext,
    ShardingRules,
    partition_spec,
)

logger = logging.getLogger(__name__)

DATA, FSDP, EXPERT, CONTEXT, TENSOR = "data", "fsdp", "expert", "context", "tensor"
MESH_AXES: tuple[str, ...] = (DATA, FSDP, EXPERT, CONTEXT, TENSOR)

# The expert axis splits a MoE's experts (``moe.py`` exchanges tokens all-to-all over it) and, like fsdp,
# the batch everywhere else; at its default size 1 it changes no placement.
_BATCH_RULE = (BATCH, (DATA, FSDP, EXPERT))
_EXPERT_RULE = (EXPERTS, EXPERT)
# Context parallelism: every sequence's positions split over the context axis (``attention/context.py`` attends
# across the split); at its default size 1 it changes no placement either.
_CONTEXT_RULE = (SEQ, CONTEXT)
_TP_RULES = ((HEADS, TENSOR), (KV_HEADS, TENSOR), (MLP, TENSOR), (VOCAB, TENSOR))
SHARDING_PRESETS: dict[str, ShardingRules] = {
    "dp": (_BATCH_RULE, _EXPERT_RULE, _CONTEXT_RULE),
    "fsdp": (_BATCH_RULE, _EXPERT_RULE, _CONTEXT_RULE, (EMBED, FSDP)),
    "tp": (_BATCH_RULE, _EXPERT_RULE, _CONTEXT_RULE, *_TP_RULES),
    "fsdp_tp": (_BATCH_RULE, _EXPERT_RULE, _CONTEXT_RULE, (EMBED, FSDP), *_TP_RULES),
}

# Literals, not ``str``: draccus decodes a union by trying its members in order, and ``str`` accepts a
# YAML list (as its repr) just as ``tuple[str, ...]`` accepts a string (as its characters).
_PresetName = Literal[tuple(SHARDING_PRESETS)]
_MeshAxisName = Literal[MESH_AXES]
ShardingSpec = _PresetName | tuple[tuple[str, _MeshAxisName | tuple[_MeshAxisName, ...] | None], ...]
"""A preset name or explicit (logical axis, mesh axis or axes) rules, as ``TrainerConfig.sharding`` holds."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class MeshConfig:
    """Sizes of the mesh axes; their product is the number of devices used."""

    data: int = 1
    """Replicas that each hold the whole (non-fsdp-sharded) state and see different rows of the batch."""
    fsdp: int = -1
    """Devices that split the parameters and optimizer state (under the fsdp rules) and the batch."""
    expert: int = 1
    """Devices that split a mixture-of-experts' experts (expert parallelism) and the batch elsewhere."""
    context: int = 1
    """Devices that split every sequence (context parallelism): each holds ``seq_len / context`` positions of
    every row, attention exchanges keys and values over the axis (``attention/context.py``)."""
    tensor: int = 1
    """Devices that split heads and the MLP (under the tp rules); keep it within a fast interconnect."""

    def __post_init__(self):
        for name in MESH_AXES:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or (value < 1 and value != -1):
                raise ValueError(
                    f"MeshConfig.{name} must be a positive int or -1 (the remaining devices), got {value!r}"
                )
        if sum(getattr(self, name) == -1 for name in MESH_AXES) > 1:
            raise ValueError(
                f"MeshConfig: at most one axis may be -1, got {self._describe()} (fsdp defaults to -1: give it a size)"
            )

    def _describe(self) -> str:
        return ", ".join(f"{name}={getattr(self, name)}" for name in MESH_AXES)

    def axis_sizes(self, num_devices: int) -> dict[str, int]:
        """Concrete sizes for ``num_devices`` devices: ``-1`` takes what the other axes leave.

        Without a ``-1`` the product may be smaller than ``num_devices`` (the first devices are used, e.g.
        ``data=1, fsdp=1, tensor=1`` runs on one device of many), never larger."""
        sizes = {name: getattr(self, name) for name in MESH_AXES}
        fixed = math.prod(s for s in sizes.values() if s != -1)
        for name, size in sizes.items():
            if size != -1:
                continue
            if num_devices % fixed:
                raise ValueError(f"MeshConfig({self._describe()}): {num_devices} devices are not a multiple of {fixed}")
            sizes[name] = num_devices // fixed
        if math.prod(sizes.values()) > num_devices:
            needed = math.prod(sizes.values())
            raise ValueError(f"MeshConfig({self._describe()}) needs {needed} devices, only {num_devices} available")
        return sizes

    def build(self, devices: Sequence[jax.Device] | None = None) -> Mesh:
        devices = list(jax.devices() if devices is None else devices)
        sizes = self.axis_sizes(len(devices))
        shape, used = tuple(sizes.values()), math.prod(sizes.values())
        # Auto axes: GSPMD propagates shardings from the pinned inputs, outputs and ``constrain`` calls
        # (jax.make_mesh defaults to Explicit axes, which would make every op's sharding part of its type).
        axis_types = (AxisType.Auto,) * len(MESH_AXES)
        slices = num_slices(devices)
        if slices > 1:
            if used != len(devices):
                raise ValueError(
                    f"MeshConfig({self._describe()}) uses {used} of {len(devices)} devices of {slices} slices"
                )
            return Mesh(_multislice_devices(sizes, devices, slices), MESH_AXES, axis_types=axis_types)
        if used == len(devices):  # all devices: let JAX order them for the physical topology
            return jax.make_mesh(shape, MESH_AXES, axis_types, devices=devices)
        logger.warning("mesh %s uses %d of %d devices", sizes, used, len(devices))
        return Mesh(np.asarray(devices[:used]).reshape(shape), MESH_AXES, axis_types=axis_types)


def num_slices(devices: Sequence[jax.Device]) -> int:
    """How many TPU slices the devices span (multislice: slices joined by the data-centre network); 1 elsewhere."""
    return len({getattr(d, "slice_index", 0) for d in devices})


def dcn_axis(sizes: Mapping[str, int], slices: int) -> str:
    """The mesh axis that spans the slices: the first of ``MESH_AXES`` (data, fsdp, expert, tensor) whose size
    the number of slices divides, so that ``data`` crosses the slow network when it can (one gradient
    all-reduce per step) and ``fsdp`` otherwise (parameter gathers over DCN: slower)."""
    for name in MESH_AXES:
        if sizes[name] % slices == 0:
            return name
    described = ", ".join(f"{name}={size}" for name, size in sizes.items())
    raise ValueError(
        f"a mesh over {slices} slices needs an axis whose size is a multiple of {slices} to span them, "
        f"got {described}; e.g. MeshConfig(data={slices}, fsdp=-1)"
    )


def _multislice_devices(sizes: Mapping[str, int], devices: Sequence[jax.Device], slices: int) -> np.ndarray:
    """Devices arranged for a mesh of ``sizes`` over several slices: ``dcn_axis`` is split into slices x
    (its size / slices), each slice's devices ordered for its own torus (``create_hybrid_device_mesh``)."""
    from jax.experimental import mesh_utils  # noqa: PLC0415 (only multislice runs need it)

    across = dcn_axis(sizes, slices)
    dcn = [slices if name == across else 1 for name in MESH_AXES]
    ici = [sizes[name] // d for name, d in zip(MESH_AXES, dcn)]
    split = devices[0].device_kind in ("TPU v5 lite", "TPU v5e")  # as jax.make_mesh does
    return mesh_utils.create_hybrid_device_mesh(ici, dcn, devices, allow_split_physical_axes=split)


def resolve_rules(sharding: ShardingSpec | Sequence, *, field: str = "sharding") -> ShardingRules:
    """The rule table for a preset name or explicit rules (lists, as parsed from YAML, are accepted)."""
    if isinstance(sharding, str):
        if sharding not in SHARDING_PRESETS:
            raise ValueError(f"{field} must be one of {sorted(SHARDING_PRESETS)} or explicit rules, got {sharding!r}")
        return SHARDING_PRESETS[sharding]
    rules = []
    for rule in sharding:
        if len(rule) != 2:
            raise ValueError(f"{field}: a rule is a (logical axis, mesh axes) pair, got {rule!r}")
        logical, target = rule
        if logical not in LOGICAL_AXES:
            raise ValueError(f"{field}: unknown logical axis {logical!r}; allowed: {sorted(LOGICAL_AXES)}")
        names = (target,) if isinstance(target, str) else tuple(target or ())
        unknown = [n for n in names if n not in MESH_AXES]
        if unknown:
            raise ValueError(f"{field}: rule for {logical!r} names mesh axes {unknown}; the mesh has {MESH_AXES}")
        rules.append((logical, names[0] if isinstance(target, str) else (names or None)))
    return tuple(rules)


def sharding_context(
    mesh: MeshConfig, sharding: ShardingSpec, devices: Sequence[jax.Device] | None = None
) -> ShardingContext | None:
    """The mesh and rules to run under, or None when the mesh is one device (the unsharded program)."""
    rules = resolve_rules(sharding)
    built = mesh.build(devices)
    if built.size == 1:
        return None
    logger.info("mesh %s, sharding rules %s", dict(built.shape), rules)
    return ShardingContext(built, rules)


def batch_shards(context: ShardingContext | None) -> int:
    """Into how many pieces the batch dimension is split (1 without a context)."""
    if context is None:
        return 1
    spec = partition_spec((BATCH, SEQ), context.rules)
    return _ways(context.mesh.shape, spec[0])


def _ways(mesh_shape: Mapping[str, int], target: Any) -> int:
    names = (target,) if isinstance(target, str) else tuple(target or ())
    return math.prod(mesh_shape[n] for n in names)


def _is_axes(x: Any) -> bool:
    return isinstance(x, tuple) and all(a is None or isinstance(a, str) for a in x)


def tree_shardings(context: ShardingContext, axes: Any, shapes: Any) -> Any:
    """NamedShardings for a tree of arrays (``shapes``: arrays or ShapeDtypeStructs) whose logical axes
    are ``axes`` (a tree of tuples shaped like it, e.g. ``param_axes(cfg)``).

    Raises if a sharded dimension does not divide by its mesh axes, naming the leaf: JAX would pad
    uneven shards silently, and the fix (another mesh or rule) is the user's to choose."""
    flat_axes, treedef = jax.tree.flatten(axes, is_leaf=_is_axes)
    flat_shapes = treedef.flatten_up_to(shapes)
    names = [jax.tree_util.keystr(path) for path, _ in jax.tree_util.tree_flatten_with_path(axes, is_leaf=_is_axes)[0]]
    out = []
    for name, leaf_axes, leaf in zip(names, flat_axes, flat_shapes):
        spec = partition_spec(leaf_axes, context.rules)
        for dim, logical, target in zip(leaf.shape, leaf_axes, spec):
            ways = _ways(context.mesh.shape, target)
            if dim % ways:
                raise ValueError(
                    f"{name}: dimension {logical!r} of size {dim} does not divide into {ways} shards over mesh "
                    f"axes {target} (mesh {dict(context.mesh.shape)}); change the mesh or the sharding rule"
                )
        out.append(NamedSharding(context.mesh, spec))
    return treedef.unflatten(out)


def optimizer_state_shardings(
    context: ShardingContext,
    optimizer: optax.GradientTransformation,
    state_shapes: Any,
    params_shapes: Any,
    param_shardings: Any,
) -> Any:
    """Shardings for an optax state: every sub-tree the optimizer built from the parameters (Adam's
    ``mu`` and ``nu``, ...) mirrors the parameters' shardings leaf by leaf; everything else (step
    counts, a leaf whose shape differs from its parameter's, as in factored moments) is replicated.

    ``optax.tree_map_params`` finds the parameter-shaped sub-trees by running ``optimizer.init`` on a
    placeholder, so it follows any chain, mask or wrapper without knowing its state classes."""
    replicated = NamedSharding(context.mesh, jax.sharding.PartitionSpec())

    def mirror(leaf, param, sharding):
        if isinstance(leaf, optax.MaskedNode):  # a partition's (muon's) state leaves out the other part's parameters
            return leaf
        return sharding if tuple(leaf.shape) == tuple(param.shape) else replicated

    return optax.tree_map_params(
        optimizer,
        mirror,
        state_shapes,
        params_shapes,
        param_shardings,
        transform_non_params=lambda _: replicated,
        is_leaf=lambda x: isinstance(x, optax.MaskedNode),
    )


def shard_batch(
    context: ShardingContext, rows: Callable[[slice], Mapping[str, np.ndarray]], num_rows: int
) -> dict[str, jax.Array]:
    """A global batch (leaves [num_rows, seq]) on the mesh, split over its batch axis, built from
    ``rows(slice)``, which returns those rows of the batch as host arrays.

    Only the row ranges held by this process's devices are built: on one host that is the whole batch,
    on N hosts each reads 1/N of it (replicas of a range, e.g. across the tensor axis, share one read)."""
    sharding = context.sharding((BATCH, SEQ))
    built: dict[tuple[int, int], Mapping[str, np.ndarray]] = {}

    def part(index: tuple[slice, ...]) -> Mapping[str, np.ndarray]:
        start, stop, _ = index[0].indices(num_rows)
        if (start, stop) not in built:
            built[(start, stop)] = rows(slice(start, stop))
        return built[(start, stop)]

    # Any part tells the leaves' names and sequence lengths (the sequence dimension is never padded); asked of the
    # rows alone, as the sequence may be split too (the context axis)
    rows_only = context.sharding((BATCH,)).addressable_devices_indices_map((num_rows,))
    sample = part(next(iter(rows_only.values())))
    return {
        key: jax.make_array_from_callback((num_rows, leaf.shape[1]), sharding, lambda i, k=key: part(i)[k][:, i[1]])
        for key, leaf in sample.items()
    }
