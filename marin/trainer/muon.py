"""Muon's direction: momentum, then Newton–Schulz orthogonalization of each hidden matrix (Jordan et al. 2024).

    dims = jax.tree.map(matrix_dims, param_axes(cfg), is_leaf=is_axes)   # MatrixDims or None per parameter
    tx = scale_by_muon(dims, momentum=0.95, nesterov=True, ns_steps=5, lr_scaling="jordan")

For each parameter whose logical axes make it a hidden matrix (``matrix_dims``: ``embed`` against heads,
head_dim or mlp; never the embedding or the output head, whose ``vocab`` axis marks them, nor a MoE's router,
whose output is its ``experts``), with ``g`` the gradient and ``m`` the momentum (zero at the start), as
``torch.optim.Muon`` and Keller Jordan's reference:

    m <- beta * m + (1 - beta) * g
    u  = (1 - beta) * g + beta * m           (nesterov; else u = m)
    d  = NS5(u) * scale(fan_in, fan_out)

``NS5`` is five quintic Newton–Schulz iterations with coefficients (3.4445, -4.7750, 2.0315) on the matrix
``fan_in × fan_out`` that the parameter's reduction and output axes form (every ``layers`` entry separately),
divided first by its Frobenius norm; its matmuls take fp32 or (``ns_dtype="bfloat16"``, torch's and
Jordan's precision) bf16 operands and accumulate in fp32 (in bf16, ``P X`` is two products, so that the
iterate keeps fp32's precision: ``newton_schulz``). ``scale`` is ``sqrt(max(1, fan_out / fan_in))``
("jordan", torch's "original") or ``0.2 * sqrt(max(fan_in, fan_out))`` ("moonlight", Liu et al. 2025, torch's
"match_rms_adamw": an update of AdamW's RMS, so AdamW's learning rate and weight decay carry over). Parameters
with ``None`` dims pass through unchanged (``OptimizerConfig`` gives them AdamW).

optax 0.2.8 has ``optax.contrib.muon``, but its Nesterov step bias-corrects the momentum and the gradient by
different factors, which is not a scalar rescaling of the above (Newton–Schulz removes scalars only), so it
leaves torch's and Jordan's trajectory from the second step; this module keeps their convention and is tested
against ``torch.optim.Muon`` (tests/trainer/test_optimizer_parity.py).

Under a mesh the orthogonalization is written on the logical (whole) matrix: with FSDP or TP the matmuls
run on the sharded operands and XLA inserts the collectives, so every device computes the gathered matrix's
result, never a per-shard orthogonalization (tests/trainer/test_optimizers.py: 8 host devices equal one).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from marin.trainer.axes import EMBED, EXPERTS, LAYERS, VOCAB

_BATCH_AXES = (LAYERS, EXPERTS)
NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)
LR_SCALINGS = ("jordan", "moonlight")
NS_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


class MatrixDims(NamedTuple):
    """Positions of a parameter's axes: stacked copies (each orthogonalized on its own), inputs, outputs."""

    batch: tuple[int, ...]
    reduction: tuple[int, ...]
    output: tuple[int, ...]


def is_axes(x: Any) -> bool:
    return isinstance(x, tuple) and all(a is None or isinstance(a, str) for a in x)


def matrix_dims(axes: tuple) -> MatrixDims | None:
    """The matrix Muon orthogonalizes for a parameter with logical ``axes``, or None (AdamW's parameters).

    A hidden matrix maps the residual stream (``embed``) to features or back: ``embed`` is its first feature
    axis (an input projection: ``x @ W``) or its last (an output projection). ``layers`` and ``experts`` are
    batch axes: each layer's and each expert's matrix is orthogonalized on its own. A MoE's router
    (``[layers, embed, experts]``) is therefore not one: its experts are its outputs, categorical like the
    head's vocabulary, and it gets AdamW."""
    features = [i for i, a in enumerate(axes) if a not in _BATCH_AXES]
    names = [axes[i] for i in features]
    if len(names) < 2 or EMBED not in names or VOCAB in names:
        return None
    batch = tuple(i for i, a in enumerate(axes) if a in _BATCH_AXES)
    if names[0] == EMBED:
        return MatrixDims(batch, (features[0],), tuple(features[1:]))
    if names[-1] == EMBED:
        return MatrixDims(batch, tuple(features[:-1]), (features[-1],))
    raise ValueError(f"parameter axes {axes}: 'embed' must be the first or last feature axis of a hidden matrix")


def newton_schulz(
    x: jax.Array,
    steps: int,
    coefficients: tuple[float, float, float],
    eps: float,
    dtype: jnp.dtype = jnp.float32,
) -> jax.Array:
    """``steps`` quintic Newton–Schulz iterations on each matrix of ``x`` (``[..., rows, cols]``): approximately
    ``U V^T`` of its SVD.

    Every matmul's operands are cast to ``dtype`` (fp32, or bf16 as torch's and Jordan's Muon run it) and
    accumulate in fp32; the iterate is carried in fp32. In bf16, ``X`` and ``G`` are rounded once and each
    rounding serves every term it enters (an fp32 ``b G`` beside a bf16 ``G²`` lets the rounding error past
    the polynomial's cancellation), and ``P X`` is ``P X_lo + P (X - X_lo)``, one product more: rounding the
    iterate itself, as torch does, loses the directions below bf16's resolution, which the iteration is there
    to lift (docs/optimizers.md, Precision). A tall matrix is transposed to a wide one first, as torch and
    Jordan do, so that the Gram matrix ``X Xᵀ`` is the smaller one. The iterations run in a
    ``fori_loop`` because its carry makes that transpose physical: unrolled, XLA:CPU assigns the transposed
    iterate a column-major layout and every matmul then contracts its left operand's first axis, a form
    whose bf16 kernel YNNPACK lacks (measured on ``medium``'s ``w_down``, 8 x 2048 x 768, bf16: 1.10 s
    unrolled in ``Xᵀ X`` form, 2.07 s unrolled transposed, 0.49 s in the loop, as fast as the wide ``w_gate``).
    """
    a, b, c = coefficients
    rounds = jnp.dtype(dtype) != jnp.float32

    def mm(spec: str, p: jax.Array, q: jax.Array) -> jax.Array:
        return jnp.einsum(spec, p.astype(dtype), q.astype(dtype), preferred_element_type=jnp.float32)

    def iteration(_: int, x: jax.Array) -> jax.Array:  # X <- a X + P X, P = b G + c G², G = X Xᵀ
        low = x.astype(dtype)
        gram = mm("...ij,...kj->...ik", low, low).astype(dtype)  # one rounding of G, in both of P's terms
        poly = (b * gram.astype(jnp.float32) + c * mm("...ij,...jk->...ik", gram, gram)).astype(dtype)
        product = mm("...ij,...jk->...ik", poly, low)
        if rounds:  # P X to the fp32 iterate's precision: the residual X - X_lo rounds to ~2^-18 of X in bf16
            product = product + mm("...ij,...jk->...ik", poly, x - low.astype(jnp.float32))
        return a * x + product

    tall = x.shape[-2] > x.shape[-1]
    if tall:
        x = jnp.swapaxes(x, -1, -2)
    x = x.astype(jnp.float32)
    x = x / jnp.maximum(jnp.linalg.norm(x, axis=(-2, -1), keepdims=True), eps)
    x = jax.lax.fori_loop(0, steps, iteration, x)
    return jnp.swapaxes(x, -1, -2) if tall else x


def orthogonalize(
    update: jax.Array,
    dims: MatrixDims,
    steps: int,
    coefficients: tuple[float, float, float],
    eps: float,
    dtype: jnp.dtype = jnp.float32,
) -> jax.Array:
    """Newton–Schulz on the ``fan_in × fan_out`` matrix of each batch entry of ``update``."""
    order = dims.batch + dims.reduction + dims.output
    moved = jnp.transpose(update, order)
    fan_in, fan_out = _fans(update.shape, dims)
    flat = moved.reshape(-1, fan_in, fan_out)
    done = newton_schulz(flat, steps, coefficients, eps, dtype).reshape(moved.shape)
    return jnp.transpose(done, _inverse(order)).astype(update.dtype)


def shape_scale(shape: tuple[int, ...], dims: MatrixDims, lr_scaling: str) -> float:
    fan_in, fan_out = _fans(shape, dims)
    if lr_scaling == "jordan":
        return math.sqrt(max(1.0, fan_out / fan_in))
    if lr_scaling == "moonlight":
        return 0.2 * math.sqrt(max(fan_in, fan_out))
    raise ValueError(f"muon lr_scaling must be one of {LR_SCALINGS}, got {lr_scaling!r}")


class MuonState(NamedTuple):
    momentum: Any


def scale_by_muon(
    dims: Any,
    *,
    momentum: float = 0.95,
    nesterov: bool = True,
    ns_steps: int = 5,
    coefficients: tuple[float, float, float] = NS_COEFFICIENTS,
    eps: float = 1e-7,
    lr_scaling: str = "jordan",
    ns_dtype: str = "float32",
) -> optax.GradientTransformation:
    """Muon's direction on the leaves whose ``dims`` is a ``MatrixDims``; other leaves pass through (and keep
    an unused momentum unless, as in ``OptimizerConfig``, a partition hands them to another optimizer)."""
    if lr_scaling not in LR_SCALINGS:
        raise ValueError(f"muon lr_scaling must be one of {LR_SCALINGS}, got {lr_scaling!r}")
    if ns_dtype not in NS_DTYPES:
        raise ValueError(f"muon ns_dtype must be one of {tuple(NS_DTYPES)}, got {ns_dtype!r}")
    flat_dims, treedef = jax.tree.flatten(dims, is_leaf=lambda d: d is None or isinstance(d, MatrixDims))

    def init(params):
        # a plain map over the parameters (not over ``dims``): OptimizerConfig runs this under a partition,
        # where AdamW's parameters arrive as empty MaskedNodes, and optax.tree_map_params runs it on a
        # placeholder to find which state mirrors the parameters (their shardings, marin.trainer.mesh)
        return MuonState(jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), params))

    def one(d: MatrixDims | None, g: jax.Array, m: jax.Array) -> tuple[jax.Array, jax.Array]:
        if d is None:
            return g, m
        g32 = g.astype(jnp.float32)
        m = momentum * m + (1.0 - momentum) * g32
        u = (1.0 - momentum) * g32 + momentum * m if nesterov else m
        direction = orthogonalize(u, d, ns_steps, coefficients, eps, NS_DTYPES[ns_dtype]) * shape_scale(
            g.shape, d, lr_scaling
        )
        return direction.astype(g.dtype), m

    def update(updates, state, params=None):
        del params
        done = [
            one(d, g, m)
            for d, g, m in zip(flat_dims, treedef.flatten_up_to(updates), treedef.flatten_up_to(state.momentum))
        ]
        return treedef.unflatten([u for u, _ in done]), MuonState(treedef.unflatten([m for _, m in done]))

    return optax.GradientTransformation(init, update)


def _fans(shape: tuple[int, ...], dims: MatrixDims) -> tuple[int, int]:
    return math.prod(shape[i] for i in dims.reduction), math.prod(shape[i] for i in dims.output)


def _inverse(order: tuple[int, ...]) -> tuple[int, ...]:
    inverse = [0] * len(order)
    for position, axis in enumerate(order):
        inverse[axis] = position
    return tuple(inverse)
