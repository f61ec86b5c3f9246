"""``block_swiglu``: each block of rows through its expert's SwiGLU, the weights read in place; ``gather_rows``.

    y = block_swiglu(blocks, w_gate, w_up, w_down, owner)         # blocks [n, rows, embed] -> [n, rows, embed]
    y = block_swiglu(blocks, w_gate, w_up, w_down, owner, used)   # blocks at and past ``used`` hold no rows

The blocked and capacity dispatches of ``moe.py`` place each expert's rows in blocks of their own; block ``b``
goes through expert ``owner[b]``. Written as ``einsum(x, w[owner])`` each product copies an expert's weights
for every block it owns (72 copies of each [512, 688] matrix at 4,096 tokens, 8 experts, top-2, blocks of
128 rows), and autodiff turns that gather's gradient into a scatter-add over as many copies. That is one
batched GEMM per product, what a GPU wants, and what this module does off the CPU.

On XLA:CPU the copies cost more than the products: the gathered bf16 weights were converted to fp32 and the
batched product ran as an fp32 one (XLA's operand upcaster, ``layouts.py``). There the SwiGLU is a loop over
the experts, each slicing its weights once, around a loop over that expert's blocks (an expert's blocks are
consecutive) taken in runs of up to ``RUN_ROWS`` rows, each run's gate and up products, activation and down
product done in one body while its rows are in cache, every product a 2-D one through ``dense``'s CPU form
(bf16 operands, an fp32 result cast down: YNNPACK's bf16 kernels). The backward loops the same way, each
expert's weight gradients summed over its runs in fp32 carries and written once. 16-bit buffers travel through
the loops as their bits (``layouts.as_bits``), which XLA:CPU slices and updates in place. History, each step
measured on ``benchmarks/moe_bench.py``'s bf16 step (docs/model_families.md, "Speed"): a loop of products per
block (2026-12-01), the bits, the expert loops and blocks of 256 (1.75x, 2026-12-06), then one loop for the
whole SwiGLU, where three loops of products and the activation's passes over every block each sliced, wrote
and converted whole buffers, in runs of 1,024 rows, which multiply faster than 256 (4%, 2026-12-06).

``gather_rows(x, index, inverse)`` moves rows between the token order and the experts' order both ways by
gathers: its gradient is the gather through the inverse map, where autodiff of an indexed read is a scatter-add
(XLA:CPU runs those row by row).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from marin.trainer.axes import target_platform
from marin.trainer.layouts import as_bits, from_bits, row_major
from marin.trainer.model.activations import swiglu_backward, swiglu_forward, swiglu_hidden
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


def _gathered_product(x: jax.Array, w: jax.Array, owner: jax.Array) -> jax.Array:
    return jnp.einsum("nrd,ndm->nrm", x, w[owner].astype(x.dtype))


def _block(a: jax.Array, b) -> jax.Array:
    return jax.lax.dynamic_index_in_dim(a, b, 0, keepdims=False)


def _expert_ranges(owner: jax.Array, used: jax.Array, num_experts: int) -> tuple[jax.Array, jax.Array]:
    """Each expert's blocks [first[e], end[e]) among the ``used`` leading ones (owner nondecreasing)."""
    experts = jnp.arange(num_experts, dtype=owner.dtype)
    first = jnp.searchsorted(owner, experts, side="left").astype(jnp.int32)
    end = jnp.minimum(jnp.searchsorted(owner, experts, side="right").astype(jnp.int32), used)
    return first, end


def block_swiglu(
    x: jax.Array, w_gate: jax.Array, w_up: jax.Array, w_down: jax.Array, owner: jax.Array, used=None
) -> jax.Array:
    """``y[b] = swiglu(x[b] @ w_gate[e], x[b] @ w_up[e]) @ w_down[e]`` with ``e = owner[b]``, for x [blocks,
    rows, embed], w_gate / w_up [experts, embed, mlp], w_down [experts, mlp, embed]; ``owner`` [blocks] (int,
    nondecreasing: each expert's blocks consecutive, as the blocked and capacity dispatches lay them out) the
    expert of each block; ``used``: how many leading blocks hold rows (default all), the rest come out zero, as
    their zero rows would. The result has x's dtype.

    Off the CPU: three batched products with the gathered weights and ``swiglu_hidden``. On XLA:CPU, one loop
    does a run of blocks' whole SwiGLU while its rows are in cache, one loop its backward (the module's note);
    the arithmetic is ``swiglu_hidden``'s, rounded at the same points, except that the input gradient sums
    the gate's and the up's parts in fp32 before rounding once."""
    if w_gate.shape != w_up.shape or w_down.shape != (w_gate.shape[0], w_gate.shape[2], w_gate.shape[1]):
        raise ValueError(f"block_swiglu: w_gate {w_gate.shape}, w_up {w_up.shape}, w_down {w_down.shape} disagree")
    if x.ndim != 3 or owner.shape != x.shape[:1] or x.shape[-1] != w_gate.shape[1]:
        raise ValueError(f"block_swiglu: x {x.shape}, w_gate {w_gate.shape} and owner {owner.shape} do not agree")
    if target_platform() != "cpu":
        hidden = swiglu_hidden(_gathered_product(x, w_gate, owner), _gathered_product(x, w_up, owner))
        return _gathered_product(hidden, w_down, owner)
    used = jnp.asarray(x.shape[0] if used is None else used, jnp.int32)
    w = tuple(a.astype(x.dtype) for a in (w_gate, w_up, w_down))
    return _fused_swiglu(x, *w, owner.astype(jnp.int32), used)


RUN_ROWS = 1024
"""Rows one product of ``block_swiglu``'s CPU loops covers where an expert has that many consecutive blocks.
The forward and backward of ``moe_bench.py``'s [40, 256, 512] blocks took 99.8 ms with runs of 1,024 rows,
104.2 with 512, 110.6 with 2,048 and 116.8 a block at a time (one process, 2026-12-06)."""


def _run_span(x: jax.Array) -> int:
    """Blocks per run for x [blocks, rows, embed]: ``RUN_ROWS`` rows' worth, at least one, at most all."""
    return max(1, min(x.shape[0], RUN_ROWS // x.shape[1]))


def _runs(first, end, span: int, body, carry):
    """``body(start, count, carry)`` over the blocks [first, end): runs of ``span`` consecutive blocks as one
    product each, then the rest a block at a time (``count`` is static: two loops)."""
    whole = (end - first) // span
    carry = jax.lax.fori_loop(0, whole, lambda i, c: body(first + i * span, span, c), carry)
    return jax.lax.fori_loop(first + whole * span, end, lambda b, c: body(b, 1, c), carry)


def _rows(bits: jax.Array, start, count: int, dtype) -> jax.Array:
    """Blocks [start, start + count) of a [blocks, rows, d] buffer (as bits) as one [count * rows, d] matrix."""
    return from_bits(jax.lax.dynamic_slice_in_dim(bits, start, count, 0), dtype).reshape(-1, bits.shape[-1])


def _put(bits: jax.Array, start, value: jax.Array) -> jax.Array:
    """``_rows``'s inverse: a [count * rows, d] matrix written over blocks [start, start + count)."""
    return jax.lax.dynamic_update_slice_in_dim(bits, as_bits(value).reshape(-1, *bits.shape[1:]), start, 0)


def _swiglu_loop(x, w_gate, w_up, w_down, owner, used):
    """The forward loop: each run of blocks' gate and up products, activation and down product; returns the
    output and, for the backward, the gate and up products."""
    dtype = x.dtype
    x_bits, wg_bits, wu_bits, wd_bits = (as_bits(a) for a in (x, w_gate, w_up, w_down))
    first, end = _expert_ranges(owner, used, w_gate.shape[0])
    span = _run_span(x)

    def expert_body(e, carry):
        wg, wu, wd = (from_bits(_block(a, e), dtype) for a in (wg_bits, wu_bits, wd_bits))

        def body(start, count, carry):
            xb = _rows(x_bits, start, count, dtype)
            gate = dot_for_backend(xb, wg, NN, dtype, True)
            up = dot_for_backend(xb, wu, NN, dtype, True)
            y = dot_for_backend(swiglu_forward(gate, up), wd, NN, dtype, True)
            return tuple(_put(a, start, v) for a, v in zip(carry, (y, gate, up)))

        return _runs(first[e], end[e], span, body, carry)

    hidden = as_bits(jnp.zeros((*x.shape[:2], w_gate.shape[-1]), dtype))
    y, gate, up = jax.lax.fori_loop(0, w_gate.shape[0], expert_body, (as_bits(jnp.zeros_like(x)), hidden, hidden))
    return from_bits(y, dtype), gate, up


@jax.custom_vjp
def _fused_swiglu(x, w_gate, w_up, w_down, owner, used):
    return _swiglu_loop(x, w_gate, w_up, w_down, owner, used)[0]


def _fused_forward(x, w_gate, w_up, w_down, owner, used):
    y, gate, up = _swiglu_loop(x, w_gate, w_up, w_down, owner, used)
    return y, (x, w_gate, w_up, w_down, owner, used, gate, up)


def _fused_backward(residuals, g):
    """Each run of blocks' backward in one loop body: the down product's input and weight gradients, the
    activation's, then the gate and up products' (the input gradient summed over both); the weight gradients
    summed over an expert's blocks in fp32 carries, written once per expert. The weight gradients' left
    operands (the inputs and the activation, transposed) are laid out row-major in the body, where they are in
    cache."""
    x, w_gate, w_up, w_down, owner, used, gate_bits, up_bits = residuals
    dtype = x.dtype
    x_bits, g_bits = as_bits(x), as_bits(g.astype(dtype))
    wg_bits, wu_bits, wd_bits = (as_bits(a) for a in (w_gate, w_up, w_down))
    first, end = _expert_ranges(owner, used, w_gate.shape[0])
    span = _run_span(x)

    def expert_body(e, carry):
        dx, dwg, dwu, dwd = carry
        wg, wu, wd = (from_bits(_block(a, e), dtype) for a in (wg_bits, wu_bits, wd_bits))

        def body(start, count, carry):
            dx, acc_g, acc_u, acc_d = carry
            gb = _rows(g_bits, start, count, dtype)
            gate, up = _rows(gate_bits, start, count, dtype), _rows(up_bits, start, count, dtype)
            acc_d = acc_d + dot_for_backend(row_major(swiglu_forward(gate, up).T), gb, NN, jnp.float32, True)
            dgate, dup = swiglu_backward(gate, up, dot_for_backend(gb, wd, NT, dtype, True))
            dxb = dot_for_backend(dgate, wg, NT, jnp.float32, True) + dot_for_backend(dup, wu, NT, jnp.float32, True)
            xt = row_major(_rows(x_bits, start, count, dtype).T)
            acc_g = acc_g + dot_for_backend(xt, dgate, NN, jnp.float32, True)
            acc_u = acc_u + dot_for_backend(xt, dup, NN, jnp.float32, True)
            return _put(dx, start, dxb.astype(dtype)), acc_g, acc_u, acc_d

        zero_in, zero_out = jnp.zeros(w_gate.shape[1:], jnp.float32), jnp.zeros(w_down.shape[1:], jnp.float32)
        dx, acc_g, acc_u, acc_d = _runs(first[e], end[e], span, body, (dx, zero_in, zero_in, zero_out))
        sums = ((dwg, acc_g), (dwu, acc_u), (dwd, acc_d))
        return dx, *(jax.lax.dynamic_update_index_in_dim(d, a, e, 0) for d, a in sums)

    zeros = (as_bits(jnp.zeros_like(x)), *(jnp.zeros(a.shape, jnp.float32) for a in (w_gate, w_up, w_down)))
    dx, dwg, dwu, dwd = jax.lax.fori_loop(0, w_gate.shape[0], expert_body, zeros)
    dw = (d.astype(w.dtype) for d, w in ((dwg, w_gate), (dwu, w_up), (dwd, w_down)))
    return from_bits(dx, dtype), *dw, None, None


_fused_swiglu.defvjp(_fused_forward, _fused_backward)
