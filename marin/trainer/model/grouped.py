"""``block_matmul(x, w, owner)``: each block of rows times its expert's weights, the weights read in place.

    y = block_matmul(blocks, w_gate, owner)         # blocks [n, rows, in], w_gate [experts, in, out] -> [n, rows, out]
    y = block_matmul(blocks, w_gate, owner, used)   # blocks at and past ``used`` hold no rows: left zero

The blocked and capacity dispatches of ``moe.py`` place each expert's rows in blocks of their own; block ``b``
is multiplied by ``w[owner[b]]``. Written as ``einsum(x, w[owner])`` the product copies an expert's weights
for every block it owns (72 copies of each [512, 688] matrix at 4,096 tokens, 8 experts, top-2, blocks of
128 rows), and autodiff turns that gather's gradient into a scatter-add over as many copies. That is one
batched GEMM, what a GPU wants, and what this module does off the CPU.

On XLA:CPU the copies cost more than the products: the gathered bf16 weights were converted to fp32 and the
batched product ran as an fp32 one (XLA's operand upcaster, ``layouts.py``). There the product is a loop over
the blocks that hold rows, each block a 2-D product through ``dense``'s CPU form (bf16 operands, an fp32
result cast down: YNNPACK's bf16 kernels) with its expert's weights sliced in place. The backward is a loop
too: each block's input gradient, and its expert's weight gradient accumulated in place in fp32
(``benchmarks/moe_bench.py``; docs/model_families.md, "Speed").

``gather_rows(x, index, inverse)`` moves rows between the token order and the experts' order both ways by
gathers: its gradient is the gather through the inverse map, where autodiff of an indexed read is a scatter-add
(XLA:CPU runs those row by row).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from marin.trainer.layouts import row_major
from marin.trainer.model.dense import NN, NT, dot_for_backend


def gather_rows(x: jax.Array, index: jax.Array, inverse: jax.Array) -> jax.Array:
    """``y[p] = x[index[p]]`` for x [rows, ...] (zero where ``index[p]`` is out of range), differentiated by a
    gather: ``dx[r] = sum_m dy[inverse[r, m]]`` (out-of-range entries add nothing).

    ``inverse`` [rows, m] must list, for each row r of x, every position p with ``index[p] == r`` exactly once
    (and nothing else in range): the map's transpose, which the caller has for free when it built ``index`` from
    a permutation. A row read k times (a token sent to its k experts) has m = k."""
    if inverse.ndim != 2 or inverse.shape[0] != x.shape[0] or index.ndim != 1:
        raise ValueError(f"gather_rows: x {x.shape}, index {index.shape} and inverse {inverse.shape} do not agree")
    return _gather_rows(x, index.astype(jnp.int32), inverse.astype(jnp.int32))


@jax.custom_vjp
def _gather_rows(x, index, inverse):
    return x.at[index].get(mode="fill", fill_value=0)


def _gather_rows_forward(x, index, inverse):
    return _gather_rows(x, index, inverse), (index, inverse)


def _gather_rows_backward(residuals, g):
    index, inverse = residuals
    parts = g.at[inverse].get(mode="fill", fill_value=0)  # [rows, m, ...]
    dx = parts[:, 0] if inverse.shape[1] == 1 else jnp.sum(parts.astype(jnp.float32), axis=1).astype(g.dtype)
    return dx, None, None


_gather_rows.defvjp(_gather_rows_forward, _gather_rows_backward)


def block_matmul(x: jax.Array, w: jax.Array, owner: jax.Array, used: jax.Array | int | None = None) -> jax.Array:
    """``y[b] = x[b] @ w[owner[b]]`` for x [blocks, rows, in], w [experts, in, out], owner [blocks] (int).

    ``used``: how many leading blocks hold rows (default all); the rest come out zero, as their zero rows
    would. The result has x's dtype."""
    if x.ndim != 3 or w.ndim != 3 or owner.shape != x.shape[:1] or x.shape[-1] != w.shape[1]:
        raise ValueError(f"block_matmul: x {x.shape}, w {w.shape} and owner {owner.shape} do not agree")
    if jax.default_backend() != "cpu":
        return jnp.einsum("nrd,ndm->nrm", x, w[owner].astype(x.dtype))
    used = jnp.asarray(x.shape[0] if used is None else used, jnp.int32)
    return _looped(x, w.astype(x.dtype), owner.astype(jnp.int32), used)


def _block(a: jax.Array, b) -> jax.Array:
    return jax.lax.dynamic_index_in_dim(a, b, 0, keepdims=False)


def _products(x, w, owner, used):
    """The forward loop: block b's product written into its place of a zero result."""
    y = jnp.zeros((*x.shape[:2], w.shape[-1]), x.dtype)

    def body(b, y):
        product = dot_for_backend(_block(x, b), _block(w, owner[b]), NN, x.dtype, on_cpu=True)
        return jax.lax.dynamic_update_index_in_dim(y, product, b, 0)

    return jax.lax.fori_loop(0, used, body, y)


@jax.custom_vjp
def _looped(x, w, owner, used):
    return _products(x, w, owner, used)


def _forward(x, w, owner, used):
    return _products(x, w, owner, used), (x, w, owner, used)


def _backward(residuals, g):
    x, w, owner, used = residuals
    g = g.astype(x.dtype)  # gradients flow in the compute dtype, as dense's do

    def body(b, carry):
        dx, dw = carry
        xb, gb, expert = _block(x, b), _block(g, b), owner[b]
        dx = jax.lax.dynamic_update_index_in_dim(dx, dot_for_backend(gb, _block(w, expert), NT, x.dtype, True), b, 0)
        # [in, rows] materialised row-major, so the product stays on XLA:CPU's fast (not left-transposed) path
        step = dot_for_backend(row_major(xb.T), gb, NN, jnp.float32, True)
        dw = jax.lax.dynamic_update_index_in_dim(dw, _block(dw, expert) + step, expert, 0)
        return dx, dw

    zeros = (jnp.zeros_like(x), jnp.zeros(w.shape, jnp.float32))
    dx, dw = jax.lax.fori_loop(0, used, body, zeros)
    return dx, dw.astype(w.dtype), None, None


_looped.defvjp(_forward, _backward)
