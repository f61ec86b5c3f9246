"""SOAP's direction: Adam in the eigenbasis of Shampoo's preconditioner (Vyas et al. 2024, arXiv 2409.11321).

For each hidden matrix ``G`` (``fan_in × fan_out`` per layer, the matrix ``marin.trainer.muon.matrix_dims``
picks), as the authors' reference (github.com/nikhilvyas/SOAP, ``soap.py`` at a1e5535):

    L <- sb * L + (1 - sb) * G G^T           R <- sb * R + (1 - sb) * G^T G       (after each update)
    Q_L, Q_R: eigenvectors of L and R (eigh at the first step; then every ``precondition_frequency`` steps
              one power iteration and a QR, the columns first ordered by the estimated eigenvalues)
    G' = Q_L^T G Q_R;  m <- b1 m + (1 - b1) G';  v <- b2 v + (1 - b2) G'^2
    direction = sqrt(1 - b2^t) / (1 - b1^t) * Q_L (m / (sqrt(v) + eps)) Q_R^T

``m`` lives in the eigenbasis and is carried to the new one whenever ``Q`` changes; ``v`` is permuted with
the columns. The first call only builds ``L``, ``R`` and ``Q`` and returns a zero direction (the reference
skips that step, "so that we never use the current gradients in the projection"). Other parameters pass
through: ``OptimizerConfig`` gives them AdamW, as for Muon (the reference's own Adam on 1-D parameters and its
one-sided preconditioning of vocabulary-sized dimensions are left out).

The moments keep their parameter's shape (and sharding); ``L``, ``R`` and the bases are replicated. On
XLA:CPU a multi-device program deadlocks in ``eigh``/``qr`` (8 host devices under FSDP: every thread idle,
with or without the conditional, with the operands replicated first; measured 2026-11-27, jax 0.10.2), so the
trainer refuses SOAP on a CPU mesh of more than one device; on GPU and TPU it has not been run.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from marin.trainer.muon import MatrixDims, _fans, _inverse


class SoapState(NamedTuple):
    count: jax.Array
    """Calls so far (the first only builds the preconditioner)."""
    mu: Any
    """First moment in the eigenbasis, parameter-shaped (empty where the parameter is not a matrix)."""
    nu: Any
    left: Any
    """L (batch, fan_in, fan_in) per matrix."""
    right: Any
    q_left: Any
    q_right: Any


def scale_by_soap(
    dims: Any,
    *,
    b1: float = 0.95,
    b2: float = 0.95,
    shampoo_beta: float | None = None,
    eps: float = 1e-8,
    precondition_frequency: int = 10,
) -> optax.GradientTransformation:
    """SOAP's direction on the leaves whose ``dims`` is a ``MatrixDims``; others pass through unchanged."""
    sb = b2 if shampoo_beta is None else shampoo_beta
    is_dims = lambda d: d is None or isinstance(d, MatrixDims)  # noqa: E731
    flat_dims, treedef = jax.tree.flatten(dims, is_leaf=is_dims)

    def init(params):
        try:
            flat = treedef.flatten_up_to(params)
        except (TypeError, ValueError):  # optax.tree_map_params's placeholder: the state mirrors the parameters
            mirror = jax.tree.map(lambda p: p, params)
            return SoapState(jnp.zeros([], jnp.int32), *([mirror] * 6))

        def per_leaf(make):
            return treedef.unflatten(
                [
                    p if isinstance(p, optax.MaskedNode) else make(d, p) if d else _empty()
                    for d, p in zip(flat_dims, flat)
                ]
            )

        def square(d: MatrixDims, p, side: int):
            batch = math.prod(p.shape[i] for i in d.batch)
            n = _fans(p.shape, d)[side]
            return jnp.zeros((batch, n, n), jnp.float32)

        # a fresh array per field: the train step donates the state, and one buffer may not be donated twice
        moments = [per_leaf(lambda d, p: jnp.zeros(p.shape, jnp.float32)) for _ in range(2)]
        lefts = [per_leaf(lambda d, p: square(d, p, 0)) for _ in range(2)]
        rights = [per_leaf(lambda d, p: square(d, p, 1)) for _ in range(2)]
        return SoapState(jnp.zeros([], jnp.int32), *moments, lefts[0], rights[0], lefts[1], rights[1])

    def update(updates, state, params=None):
        del params
        count = state.count
        flat = [treedef.flatten_up_to(x) for x in (updates, state.mu, state.nu, state.left, state.right)]
        flat += [treedef.flatten_up_to(x) for x in (state.q_left, state.q_right)]
        outs = []
        for d, g, mu, nu, left, right, ql, qr in zip(flat_dims, *flat):
            if d is None:
                outs.append((g, mu, nu, left, right, ql, qr))
                continue
            outs.append(_soap_leaf(d, g, mu, nu, left, right, ql, qr, count, b1, b2, sb, eps, precondition_frequency))
        columns = list(zip(*outs))
        new_state = SoapState(optax.safe_increment(count), *(treedef.unflatten(list(c)) for c in columns[1:]))
        return treedef.unflatten(list(columns[0])), new_state

    return optax.GradientTransformation(init, update)


def _soap_leaf(d, g, mu, nu, left, right, ql, qr, count, b1, b2, sb, eps, frequency):
    """One matrix parameter's direction and new state (all batch entries at once)."""
    order = d.batch + d.reduction + d.output
    fan_in, fan_out = _fans(g.shape, d)
    moved_shape = tuple(g.shape[i] for i in order)

    def to_matrices(x):
        return jnp.transpose(x, order).reshape(-1, fan_in, fan_out)

    def from_matrices(x):
        return jnp.transpose(x.reshape(moved_shape), _inverse(order))

    G = to_matrices(g.astype(jnp.float32))
    M, V = to_matrices(mu), to_matrices(nu)

    t = count.astype(jnp.float32)  # updates applied so far, this one included (the reference's "step")
    starting = count == 0  # the first call only builds the preconditioner: no direction, no moments
    Gp = _project(G, ql, qr)
    M1 = jnp.where(starting, M, b1 * M + (1 - b1) * Gp)
    V1 = jnp.where(starting, V, b2 * V + (1 - b2) * Gp * Gp)
    step = jnp.where(starting, 0.0, jnp.sqrt(1 - b2**t) / jnp.where(starting, 1.0, 1 - b1**t))
    direction = step * _project_back(M1 / (jnp.sqrt(V1) + eps), ql, qr)
    # the preconditioner after the update: the moment goes back to the parameter's basis, L and R take this
    # gradient, and the bases are made (eigh) at the first call and refreshed every ``frequency`` updates, the
    # moment then re-projected. One conditional, not two nested: XLA:CPU hung (all threads idle) on a
    # conditional inside a conditional that held these LAPACK calls.
    M_orig = _project_back(M1, ql, qr)
    L, R = _accumulate(left, right, G, sb)
    QL, QR, V2 = jax.lax.cond(
        starting | (count % frequency == 0), lambda: _new_bases(L, R, ql, qr, V1, starting), lambda: (ql, qr, V1)
    )
    M2 = _project(M_orig, QL, QR)
    return (from_matrices(direction).astype(g.dtype), from_matrices(M2), from_matrices(V2), L, R, QL, QR)


def _new_bases(L, R, ql, qr, V, starting):
    """The first call's eigenvectors, or a refresh by power iteration (the reference's two paths)."""
    fresh_l, fresh_r = _eigenvectors(L), _eigenvectors(R)
    refreshed_l, refreshed_r, refreshed_v = _refresh(L, R, ql, qr, V)
    return (
        jnp.where(starting, fresh_l, refreshed_l),
        jnp.where(starting, fresh_r, refreshed_r),
        jnp.where(starting, V, refreshed_v),
    )


def _accumulate(left, right, G, sb):
    gl = jnp.einsum("bij,bkj->bik", G, G)
    gr = jnp.einsum("bji,bjk->bik", G, G)
    return left + (1 - sb) * (gl - left), right + (1 - sb) * (gr - right)  # torch's lerp_


def _eigenvectors(m):
    """Eigenvectors by descending eigenvalue (the reference flips eigh's ascending order)."""
    _, q = jnp.linalg.eigh(m)
    return jnp.flip(q, axis=-1)


def _refresh(L, R, ql, qr, V):
    """One power iteration and a QR per side; ``V``'s rows (left) and columns (right) follow the columns'
    new order, by the estimated eigenvalues ``diag(Q^T P Q)``, largest first."""

    def side(P, Q, V, axis):
        estimated = jnp.einsum("bji,bjk,bki->bi", Q, P, Q)
        order = jnp.argsort(-estimated, axis=-1, stable=True)
        Q = jnp.take_along_axis(Q, order[:, None, :], axis=2)
        V = jnp.take_along_axis(V, order[:, :, None] if axis == 1 else order[:, None, :], axis=axis)
        q, _ = jnp.linalg.qr(P @ Q)
        return q, V

    ql, V = side(L, ql, V, 1)
    qr, V = side(R, qr, V, 2)
    return ql, qr, V


def _project(G, ql, qr):
    return jnp.einsum("bji,bjk,bkl->bil", ql, G, qr)


def _project_back(G, ql, qr):
    return jnp.einsum("bij,bjk,blk->bil", ql, G, qr)


def _empty():
    return jnp.zeros((0,), jnp.float32)
