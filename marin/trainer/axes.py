"""Logical axis names: the closed vocabulary every parameter and activation is labelled with.

The model is written for one device. Each parameter declares what its dimensions *mean*::

    wq: [layers, embed, heads, head_dim]     axes ("layers", "embed", "heads", "head_dim")

and a rule table, the only place parallelism is chosen, maps meanings to mesh axes::

    FSDP  = (("embed", "fsdp"), ("batch", ("data", "fsdp")))
    TP    = (("heads", "tensor"), ("kv_heads", "tensor"), ("mlp", "tensor"), ("batch", "data"))

so ``partition_spec(("layers", "embed", "heads", "head_dim"), FSDP) == P(None, "fsdp", None, None)``.
Axes without a rule are replicated. Switching FSDP for tensor parallelism edits the table, not the model
(MaxText's "logical axis rules"; ``mesh.py`` builds the mesh and the presets on top of this module).

Activations are labelled through ``constrain(x, axes)``, a no-op unless a ``ShardingContext`` is active,
so single-device code pays nothing.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import Iterator, Sequence

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

# The closed set. Adding a name here is a design decision: every rule table must consider it.
BATCH = "batch"  # examples in a batch (activations only)
SEQ = "seq"  # positions in a sequence (activations only)
EMBED = "embed"  # the residual stream, hidden_dim
VOCAB = "vocab"  # vocabulary entries, vocab_size
HEADS = "heads"  # query heads, num_heads
KV_HEADS = "kv_heads"  # key/value heads, num_kv_heads
HEAD_DIM = "head_dim"  # features within one head
MLP = "mlp"  # the feed-forward hidden layer, mlp_dim
LAYERS = "layers"  # the stacked-layer axis that jax.lax.scan iterates over
EXPERTS = "experts"  # a mixture-of-experts layer's routed experts, num_experts

LOGICAL_AXES: frozenset[str] = frozenset({BATCH, SEQ, EMBED, VOCAB, HEADS, KV_HEADS, HEAD_DIM, MLP, LAYERS, EXPERTS})

Axes = tuple[str | None, ...]
"""One logical name (or None: never sharded) per dimension of an array."""

MeshAxes = str | tuple[str, ...] | None
ShardingRules = tuple[tuple[str, MeshAxes], ...]
"""(logical axis, mesh axis or axes) pairs; the first rule naming a logical axis wins."""

REPLICATED: ShardingRules = ()


def check_axes(axes: Sequence[str | None], *, what: str = "array") -> None:
    """Raise if ``axes`` uses a name outside the closed set or repeats one."""
    unknown = [a for a in axes if a is not None and a not in LOGICAL_AXES]
    if unknown:
        raise ValueError(f"{what}: unknown logical axes {unknown}; allowed: {sorted(LOGICAL_AXES)}")
    named = [a for a in axes if a is not None]
    if len(named) != len(set(named)):
        raise ValueError(f"{what}: logical axis repeated in {tuple(axes)}")


def partition_spec(axes: Sequence[str | None], rules: ShardingRules) -> PartitionSpec:
    """The mesh placement of an array whose dimensions have the given logical names.

    A mesh axis is used at most once per array: if two logical axes map to the same mesh axis, the
    later dimension stays replicated (e.g. ``embed`` and ``mlp`` both on ``fsdp`` shards only ``embed``
    of ``w_gate``).
    """
    check_axes(axes)
    table = {}
    for logical, mesh_axes in rules:
        if logical not in LOGICAL_AXES:
            raise ValueError(f"sharding rule for unknown logical axis {logical!r}")
        table.setdefault(logical, mesh_axes)
    used: set[str] = set()
    spec: list[MeshAxes] = []
    for logical in axes:
        target = table.get(logical) if logical is not None else None
        names = (target,) if isinstance(target, str) else tuple(target or ())
        if not names or used.intersection(names):
            spec.append(None)
            continue
        used.update(names)
        spec.append(target)
    return PartitionSpec(*spec)


@dataclasses.dataclass(frozen=True)
class ShardingContext:
    """A mesh and the rule table in force (``mesh.sharding_context``; the trainer sets one on multi-device runs)."""

    mesh: Mesh
    rules: ShardingRules

    def sharding(self, axes: Sequence[str | None]) -> NamedSharding:
        return NamedSharding(self.mesh, partition_spec(axes, self.rules))


_ACTIVE: contextvars.ContextVar[ShardingContext | None] = contextvars.ContextVar("sharding", default=None)


@contextlib.contextmanager
def use_sharding(context: ShardingContext | None) -> Iterator[None]:
    """Within this block (while tracing), ``constrain`` pins activations to the context's mesh."""
    token = _ACTIVE.set(context)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def active_sharding() -> ShardingContext | None:
    """The context of the innermost ``use_sharding`` block (None outside one): kernels that must be
    wired through ``shard_map`` (``splash`` attention) read the mesh and rules from here while tracing."""
    return _ACTIVE.get()


def target_platform() -> str:
    """The platform the program being traced is for: that of the active context's mesh devices (a TPU
    topology's when compiling ahead of time on a CPU, ``marin.trainer.aot``), else JAX's default backend.
    Trace-time choices (attention kernel, layer scan, MoE dispatch, CPU-only fusions) ask this, never
    ``jax.default_backend()`` directly."""
    context = _ACTIVE.get()
    platform = jax.default_backend() if context is None else context.mesh.devices.flat[0].platform
    return "gpu" if platform in ("cuda", "rocm") else platform


def constrain(x: jax.Array, axes: Sequence[str | None]) -> jax.Array:
    """Label an activation's dimensions; becomes a sharding constraint only under ``use_sharding``."""
    if x.ndim != len(axes):
        raise ValueError(f"constrain: array of rank {x.ndim} labelled with {len(axes)} axes {tuple(axes)}")
    context = _ACTIVE.get()
    if context is None:
        return x
    return jax.lax.with_sharding_constraint(x, context.sharding(axes))
