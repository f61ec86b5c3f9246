"""``swiglu_hidden``: SwiGLU's ``silu(gate) * up`` with its own backward, computed in fp32 and rounded where
torch rounds."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from marin.trainer.model.activations import swiglu_hidden
from tests.requirements import require_module


def _inputs(dtype, shape=(64, 96)):
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    gate, up, dh = (3 * jax.random.normal(k, shape) for k in keys)  # wide enough to reach silu's flat tail
    return gate.astype(dtype), up.astype(dtype), dh.astype(dtype)


def test_fp32_is_autodiffs_silu_times_up():
    gate, up, dh = _inputs(jnp.float32)
    out, pullback = jax.vjp(swiglu_hidden, gate, up)
    want, want_pullback = jax.vjp(lambda g, u: jax.nn.silu(g) * u, gate, up)
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)
    for got, expected in zip(pullback(dh), want_pullback(dh)):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_bf16_rounds_as_torchs_silu_times_up_forward_and_backward():
    """torch computes a bf16 ``F.silu`` and its backward in fp32 inside and rounds once, then multiplies in bf16:
    the lab's result is torch's bit for bit (measured: all of them, where plain bf16 autodiff matches 44-65%),
    allowing one bf16 rounding step where the exp implementations' last fp32 bit differs."""
    torch = require_module("torch", "CPU torch (the export-test extra)")
    gate, up, dh = _inputs(jnp.bfloat16)
    out, pullback = jax.vjp(swiglu_hidden, gate, up)
    dgate, dup = pullback(dh)
    tg, tu = (torch.tensor(np.asarray(a, np.float32)).bfloat16().requires_grad_() for a in (gate, up))
    t_out = torch.nn.functional.silu(tg) * tu
    t_out.backward(torch.tensor(np.asarray(dh, np.float32)).bfloat16())
    for got, want in ((out, t_out), (dgate, tg.grad), (dup, tu.grad)):
        got, want = np.asarray(got, np.float32), want.detach().float().numpy()
        ulp = np.abs(want) * 2.0**-7  # one bf16 rounding step at each value
        assert np.all(np.abs(got - want) <= ulp + 1e-30)
        assert np.mean(got == want) > 0.99


def test_bf16_is_closer_to_the_exact_value_than_plain_bf16_autodiff():
    gate, up, dh = _inputs(jnp.bfloat16)
    g64, u64 = (np.asarray(a, np.float64) for a in (gate, up))
    exact = g64 / (1 + np.exp(-g64)) * u64
    ours = np.asarray(swiglu_hidden(gate, up), np.float64)
    plain = np.asarray(jax.nn.silu(gate) * up, np.float64)
    assert np.mean(np.abs(ours - exact)) < 0.8 * np.mean(np.abs(plain - exact))


def test_mismatched_inputs_are_refused():
    gate, up, _ = _inputs(jnp.float32)
    with pytest.raises(ValueError, match="gate .* and up .* differ"):
        swiglu_hidden(gate, up[:, :10])
    with pytest.raises(ValueError, match="differ"):
        swiglu_hidden(gate, up.astype(jnp.bfloat16))
