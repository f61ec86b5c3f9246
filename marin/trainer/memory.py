"""What a training run holds per device, from its configs alone (no device, no allocation): the dry run's table.

    plan = memory_plan(model, trainer, optimizer, num_devices=1024)
    print(plan.describe())        # the mesh, each parameter's placement, and GiB per device by kind

Exact for what the configs determine: parameters and gradients (``param_dtype``), the optimizer state (its
shapes from ``jax.eval_shape`` of the optimizer's ``init``, each leaf placed as ``optimizer_state_shardings``
places it: a parameter-shaped leaf like its parameter, anything else replicated), the averaged parameters
(EMA or schedule-free's ``x``), each divided by the ways the sharding rules split it on the mesh.

Estimated (the compiled program decides): the activations saved for the backward pass, from Korthikanti et
al. (2022, "Reducing Activation Recomputation in Large Transformer Models", table 2) per layer and microbatch
at 2-byte activations: ``s*b*h*(10 + 24/t)`` without recomputation (attention's ``5*a*s^2*b`` term is gone
with a flash-style kernel, which every backend here is), ``2*s*b*h`` per layer under ``remat="full"`` plus one
layer's working set. Of the 24, the MLP's 16 are GeLU's two ``4h`` tensors; a SwiGLU keeps three of its active
width ``m`` (gate, up, their product: ``6*m`` bytes per token, 16h at Llama's ``m = 8h/3``; a MoE's active width
is ``k`` experts' plus the shared ones'). Plus the fp32 logits and their gradient, ``2 * 4*s*b*V / t``. ``b`` is
the rows one device runs per microbatch, ``t`` the tensor-parallel ways.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import optax

from marin.trainer.axes import BATCH, SEQ, partition_spec
from marin.trainer.model import LlamaConfig, init_params, param_axes
from marin.trainer.muon import is_axes

GIB = 1024**3


@dataclasses.dataclass(frozen=True)
class MemoryPlan:
    mesh: dict[str, int]
    parameters: list[tuple[str, tuple[int, ...], tuple]]
    """(name, shape, placement over the mesh axes) of every parameter leaf."""
    bytes_per_device: dict[str, float]
    """params, grads, optimizer, average, activations (estimated), logits (estimated)."""
    rows_per_device: int
    """Sequences one device runs per microbatch."""

    @property
    def total(self) -> float:
        return sum(self.bytes_per_device.values())

    def describe(self) -> str:
        mesh = " x ".join(f"{k} {v}" for k, v in self.mesh.items() if v > 1) or "one device"
        lines = [f"  mesh: {mesh}; {self.rows_per_device} sequence(s) per device per microbatch"]
        for name, shape, spec in self.parameters:
            lines.append(f"    {name:24s} {str(list(shape)):28s} {spec}")
        parts = ", ".join(f"{k} {v / GIB:.2f}" for k, v in self.bytes_per_device.items())
        lines.append(f"  GiB per device: {parts}; total {self.total / GIB:.2f} (activations and logits estimated)")
        return "\n".join(lines)


def memory_plan(model: LlamaConfig, trainer, optimizer, num_devices: int) -> MemoryPlan:
    """``trainer``: a ``TrainerConfig``; ``optimizer``: an ``OptimizerConfig``."""
    from marin.trainer.mesh import resolve_rules  # noqa: PLC0415 (mesh imports nothing of this module)

    sizes = trainer.mesh.axis_sizes(num_devices)
    rules = resolve_rules(trainer.sharding)
    axes = param_axes(model)
    shapes = jax.eval_shape(lambda: init_params(model, jax.random.PRNGKey(0), dtype=trainer.precision.param))

    def ways(leaf_axes) -> int:
        spec = partition_spec(leaf_axes, rules)
        return math.prod(math.prod(sizes[n] for n in ((t,) if isinstance(t, str) else t)) for t in spec if t)

    ways_tree = jax.tree.map(ways, axes, is_leaf=is_axes)
    per_device = jax.tree.map(lambda s, w: s.size * s.dtype.itemsize / w, shapes, ways_tree)
    param_bytes = sum(jax.tree.leaves(per_device))
    tx = optimizer.build(trainer.num_train_steps, axes)
    state = jax.eval_shape(tx.init, shapes)

    def state_leaf(leaf, param, w):
        if isinstance(leaf, optax.MaskedNode):
            return 0.0
        size = leaf.size * jnp.dtype(leaf.dtype).itemsize
        return size / w if tuple(leaf.shape) == tuple(param.shape) else float(size)

    state_bytes = optax.tree_map_params(
        tx,
        state_leaf,
        state,
        shapes,
        ways_tree,
        transform_non_params=lambda leaf: float(leaf.size * jnp.dtype(leaf.dtype).itemsize),
        is_leaf=lambda x: isinstance(x, optax.MaskedNode),
    )
    batch_spec = partition_spec((BATCH, SEQ), rules)[0]
    batch_ways = math.prod(sizes[n] for n in ((batch_spec,) if isinstance(batch_spec, str) else batch_spec or ()))
    rows = max(1, trainer.batch_size // trainer.num_microbatches // batch_ways)
    tensor = sizes.get("tensor", 1)
    seq_spec = partition_spec((BATCH, SEQ), rules)[1]  # context parallelism: each device holds seq / context
    seq_ways = math.prod(sizes[n] for n in ((seq_spec,) if isinstance(seq_spec, str) else seq_spec or ()))
    named = [
        (jax.tree_util.keystr(path, simple=True, separator="/"), tuple(s.shape), tuple(partition_spec(a, rules)))
        for (path, s), a in zip(
            jax.tree_util.tree_flatten_with_path(shapes)[0], jax.tree.leaves(axes, is_leaf=is_axes), strict=True
        )
    ]
    return MemoryPlan(
        mesh=sizes,
        parameters=named,
        bytes_per_device={
            "params": param_bytes,
            "grads": param_bytes,
            "optimizer": float(sum(jax.tree.leaves(state_bytes))),
            "average": param_bytes if optimizer.keeps_average else 0.0,
            "activations": _activation_bytes(model, rows, tensor) / seq_ways,
            "logits": 2 * 4 * model.seq_len * rows * model.vocab_size / tensor / seq_ways,
        },
        rows_per_device=rows,
    )


def _activation_bytes(model: LlamaConfig, rows: int, tensor: int) -> float:
    s, h = model.seq_len, model.hidden_dim
    if model.is_moe:
        active = (model.experts_per_token + model.shared_experts) * model.resolved_expert_mlp_dim
    else:
        active = model.mlp_dim
    per_layer = s * rows * (h * (10 + 8 / tensor) + 6 * active / tensor)
    if model.remat == "full":
        return model.num_layers * 2 * s * rows * h + per_layer
    return model.num_layers * per_layer
