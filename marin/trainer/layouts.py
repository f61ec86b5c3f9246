"""``row_major(a)``: materialise an array (a transpose, above all) in row-major order for XLA:CPU's fast dots.

XLA:CPU runs a dot through its fast YNNPACK kernels only when both operands are row-major and the left one
contracts its last dim. A transpose in JAX is a relabelled layout until layout assignment decides otherwise,
and before that XLA's operand upcaster turns a bf16 dot whose operand has a transposed layout into an fp32
one (convert, then the fp32 kernel): ~3x slower than the bf16 kernel at the baby Shakespeare model's shapes
(docs/trainer.md, "Built (2026-11-30)"). An ``optimization_barrier`` keeps the transpose from being folded
into the dot but not its layout; a layout constraint fixes the copy's layout before those passes run, for
every dtype.
"""

from __future__ import annotations

import jax
from jax.experimental.layout import Layout, with_layout_constraint


def row_major(a: jax.Array) -> jax.Array:
    """``a`` with a row-major layout (a real copy when ``a`` is a transpose); the same values."""
    return with_layout_constraint(a, Layout(major_to_minor=tuple(range(a.ndim))))
