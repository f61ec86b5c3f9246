"""XLA:CPU workarounds on the way data is laid out: ``row_major(a)`` and ``as_bits(a)``.

``row_major(a)``: materialise an array (a transpose, above all) in row-major order for XLA:CPU's fast dots.

XLA:CPU runs a dot through its fast YNNPACK kernels only when both operands are row-major and the left one
contracts its last dim. A transpose in JAX is a relabelled layout until layout assignment decides otherwise,
and before that XLA's operand upcaster turns a bf16 dot whose operand has a transposed layout into an fp32
one (convert, then the fp32 kernel): ~3x slower than the bf16 kernel at the baby Shakespeare model's shapes
(docs/trainer.md, "Built (2026-11-30)"). An ``optimization_barrier`` keeps the transpose from being folded
into the dot but not its layout; a layout constraint fixes the copy's layout before those passes run, for
every dtype.

``as_bits(a)`` / ``from_bits(a, dtype)``: a 16-bit float array as its bit pattern (uint16) and back, for buffers
that a loop slices or updates in place. XLA:CPU has no bf16 arithmetic and normalizes every bf16 instruction
to fp32, slices and in-place updates included: a bf16 result written a block at a time in a loop became
convert-to-fp32, update, convert back, a pass over the whole result per block (23% of the bf16 MoE step,
2026-12-06; docs/model_families.md, "Speed"). Integers are left alone.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental.custom_partitioning import custom_partitioning
from jax.experimental.layout import Layout, with_layout_constraint

from marin.trainer.axes import active_sharding


def row_major(a: jax.Array) -> jax.Array:
    """``a`` with a row-major layout (a real copy when ``a`` is a transpose); the same values.

    Traced under a multi-device ``ShardingContext`` the constraint is applied per shard: XLA's partitioner
    knows nothing of the ``LayoutConstraint`` custom call and would replicate its operand, all-gathering
    the activations of every dense backward (69 all-gathers in the baby model's data-parallel step)."""
    if active_sharding() is None:
        return _row_major(a)
    return _per_shard_row_major(a.ndim)(a)


def _row_major(a: jax.Array) -> jax.Array:
    return with_layout_constraint(a, Layout(major_to_minor=tuple(range(a.ndim))))


@functools.cache
def _per_shard_row_major(ndim: int):
    """``_row_major`` as an elementwise op for the partitioner: the result is sharded as the operand is.
    Its gradient is the cotangent itself (the same values; a layout is no part of them)."""
    op = custom_partitioning(_row_major)

    def partition(mesh, arg_shapes, result_shape):
        sharding = arg_shapes[0].sharding
        return mesh, _row_major, sharding, (sharding,)

    dims = " ".join(f"d{i}" for i in range(ndim))
    op.def_partition(
        partition=partition,
        infer_sharding_from_operands=lambda mesh, arg_shapes, result_shape: arg_shapes[0].sharding,
        propagate_user_sharding=lambda mesh, arg_shapes, result_shape: result_shape.sharding,
        sharding_rule=f"{dims} -> {dims}",
    )
    differentiable = jax.custom_vjp(op)
    differentiable.defvjp(lambda a: (op(a), None), lambda _, cotangent: (cotangent,))
    return differentiable


def as_bits(a: jax.Array) -> jax.Array:
    """A 16-bit float array as its bit pattern (uint16); wider dtypes as they are."""
    return jax.lax.bitcast_convert_type(a, jnp.uint16) if jnp.dtype(a.dtype).itemsize == 2 else a


def from_bits(a: jax.Array, dtype) -> jax.Array:
    """``as_bits``'s inverse: a uint16 array read as ``dtype``; other arrays as they are."""
    return jax.lax.bitcast_convert_type(a, dtype) if a.dtype == jnp.uint16 else a
