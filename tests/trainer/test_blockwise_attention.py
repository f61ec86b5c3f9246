"""The ``blockwise`` backend (``marin/trainer/attention/blockwise.py``): values and gradients against the
reference at issue 7's fp32 bar, over several blocks (the last one short), GQA groups and packed documents;
bf16 within bf16 rounding; and the property its speed rests on: every matmul of its forward and backward
contracts the left operand's last dim (XLA:CPU's fast path)."""

import jax
import jax.extend
import jax.numpy as jnp
import pytest

from marin.trainer.attention import blockwise_attention, reference_attention
from tests.trainer.attention_cases import FWD_ATOL, GRAD_ATOL, inputs, max_errors, out_and_grads


@pytest.mark.parametrize(
    "seq,heads,kv_heads,packed",
    [
        (200, 4, 4, True),  # blocks of 64: 64, 64, 64, 8; no GQA
        (300, 8, 2, True),  # blocks of 128: 128, 128, 44; GQA 4
        (260, 6, 1, False),  # GQA 6 (multi-query), no packing
    ],
)
def test_matches_reference_values_and_gradients_fp32(seq, heads, kv_heads, packed):
    q, k, v, segments, ct = inputs(seq, heads, kv_heads, packed=packed)
    ours = out_and_grads(blockwise_attention, q, k, v, segments, ct)
    assert ours[0].shape == q.shape and ours[0].dtype == jnp.float32
    fwd, grads = max_errors(ours, out_and_grads(reference_attention, q, k, v, segments, ct))
    assert fwd <= FWD_ATOL and max(grads) <= GRAD_ATOL, (fwd, grads)


def test_bf16_inputs_stay_bf16_and_close_to_fp32_reference():
    q, k, v, segments, ct = inputs(300, 8, 2, packed=True)
    as16 = [x.astype(jnp.bfloat16) for x in (q, k, v)]
    ours = out_and_grads(blockwise_attention, *as16, segments, ct)
    assert ours[0].dtype == jnp.bfloat16 and all(g.dtype == jnp.bfloat16 for g in ours[1])
    fwd, grads = max_errors(ours, out_and_grads(reference_attention, q, k, v, segments, ct))
    assert fwd <= 0.05 and max(grads) <= 0.25, (fwd, grads)  # bf16 keeps 8 mantissa bits


def test_every_matmul_contracts_the_left_operands_last_dim():
    q, k, v, segments, ct = inputs(300, 8, 2, packed=True)
    jaxpr = jax.make_jaxpr(lambda *a: out_and_grads.__wrapped__(blockwise_attention, *a))(q, k, v, segments, ct)
    dots = []

    def visit(jaxpr):
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "dot_general":
                (lhs_contract, _), _ = eqn.params["dimension_numbers"]
                dots.append((tuple(lhs_contract), eqn.invars[0].aval.ndim))
            for param in eqn.params.values():  # pjit / custom_vjp bodies
                for sub in param if isinstance(param, (tuple, list)) else [param]:
                    if isinstance(sub, jax.extend.core.ClosedJaxpr):
                        visit(sub.jaxpr)
                    elif isinstance(sub, jax.extend.core.Jaxpr):
                        visit(sub)

    visit(jaxpr.jaxpr)
    assert len(dots) == 3 * 6  # 3 blocks x (QK^T, PV forward; dP, dQ, dK^T, dV^T backward)
    assert all(contract == (ndim - 1,) for contract, ndim in dots), dots
