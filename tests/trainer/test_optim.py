"""Schedules against their formulas at chosen steps; the weight-decay mask; clipping; EMA."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from marin.trainer.model import param_axes
from marin.trainer.optim import OptimizerConfig, update_ema

P, T = 1e-3, 1000  # peak lr, total steps


def lr(config: OptimizerConfig, step: int, total: int = T) -> float:
    return float(config.lr_schedule(total)(step))


def approx(x):
    return pytest.approx(x, rel=1e-5, abs=1e-10)  # schedules compute in float32


@pytest.mark.parametrize("step", [0, 9, 49, 99])
def test_warmup_is_linear_from_the_first_update(step):
    config = OptimizerConfig(learning_rate=P, schedule="constant", warmup=100)
    assert lr(config, step) == approx(P * (step + 1) / 100)
    assert lr(config, 100) == approx(P) and lr(config, 999) == approx(P)


@pytest.mark.parametrize("step", [100, 300, 550, 999])
def test_cosine(step):
    config = OptimizerConfig(learning_rate=P, schedule="cosine", warmup=0.1, min_lr_ratio=0.1)
    f = 0.1 * P
    assert lr(config, step) == approx(f + (P - f) * 0.5 * (1 + math.cos(math.pi * (step - 100) / 900)))


@pytest.mark.parametrize("step", [100, 400, 999])
def test_linear(step):
    config = OptimizerConfig(learning_rate=P, schedule="linear", warmup=100, min_lr_ratio=0.0)
    assert lr(config, step) == approx(P - P * (step - 100) / 900)


def test_wsd_is_flat_then_decays_linearly_over_the_last_fraction():
    config = OptimizerConfig(learning_rate=P, schedule="wsd", warmup=50, decay=0.2, min_lr_ratio=0.1)
    f = 0.1 * P
    assert lr(config, 49) == approx(P)
    assert lr(config, 500) == approx(P) and lr(config, 799) == approx(P)
    for step in (800, 900, 999):
        assert lr(config, step) == approx(P - (P - f) * (step - 800) / 200)


def test_wsd_s_cycles_rewarm_and_decay_at_each_cycle_end():
    config = OptimizerConfig(
        learning_rate=P, schedule="wsd_s", warmup=10, decay=0.1, min_lr_ratio=0.0, cycles=(400, 700), rewarmup=20
    )
    # Cycle 1 [0, 400): warmup 10, decay over the last 40 steps.
    assert lr(config, 0) == approx(P / 10)
    assert lr(config, 359) == approx(P)
    assert lr(config, 380) == approx(P - P * 20 / 40)
    # Cycle 2 [400, 700): re-warmup over 20 steps from the floor (0), decay over the last 30.
    assert lr(config, 400) == approx(P / 20)
    assert lr(config, 419) == approx(P)
    assert lr(config, 685) == approx(P - P * 15 / 30)
    # Cycle 3 [700, 1000).
    assert lr(config, 709) == approx(P * 10 / 20)
    assert lr(config, 999) == approx(P - P * 29 / 30)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(schedule="exp"), "schedule must be one of"),
        (dict(min_lr_ratio=1.5), "min_lr_ratio must be in"),
        (dict(cycles=(10,)), "only used by schedule='wsd_s'"),
        (dict(schedule="wsd_s", cycles=(30, 20)), "increasing"),
        (dict(ema_decay=1.0), "ema_decay"),
        (dict(kind="schedule_free_adamw", ema_decay=0.99), "ema_decay must be None with kind='schedule_free_adamw'"),
        (dict(kind="schedule_free_adamw", beta1=0.0), r"beta1 \(schedule-free's interpolation\) must be in \(0, 1\)"),
        (dict(kind="sgd"), "kind must be one of"),
        (dict(learning_rate=0.0), "learning_rate must be > 0"),
    ],
)
def test_config_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        OptimizerConfig(**kwargs)


def test_schedule_that_does_not_fit_is_an_error():
    with pytest.raises(ValueError, match="do not fit"):
        OptimizerConfig(schedule="wsd", warmup=80, decay=30).lr_schedule(100)


def test_weight_decay_mask_skips_norms_and_embeddings(tiny):
    mask = OptimizerConfig().decay_mask(param_axes(tiny))
    assert mask["embed"] is False and mask["lm_head"] is False and mask["final_norm"] is False
    assert mask["layers"]["attn_norm"] is False and mask["layers"]["mlp_norm"] is False
    assert all(mask["layers"][k] for k in ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down"))
    assert OptimizerConfig(decay_embeddings=True).decay_mask(param_axes(tiny))["embed"] is True


AXES = {"w": ("embed", "mlp"), "norm": ("embed",)}


def test_weight_decay_applies_only_to_masked_params():
    params = {"w": jnp.ones((2, 3)), "norm": jnp.ones((2,))}
    config = OptimizerConfig(learning_rate=0.1, weight_decay=0.5, schedule="constant", warmup=0)
    tx = config.build(10, AXES)
    updates, _ = tx.update(jax.tree.map(jnp.zeros_like, params), tx.init(params), params)
    np.testing.assert_allclose(updates["w"], -0.1 * 0.5 * np.ones((2, 3)), rtol=1e-6)  # lr * wd * param
    np.testing.assert_allclose(updates["norm"], 0.0)


@pytest.mark.parametrize("clip", [None, 1.0])
def test_two_adam_steps_with_global_norm_clipping_match_the_formula(clip):
    b1, b2, eps, lr_ = 0.9, 0.95, 1e-8, 0.1
    params = {"w": jnp.zeros((2, 3)), "norm": jnp.zeros((2,))}
    tx = OptimizerConfig(
        learning_rate=lr_,
        weight_decay=0.0,
        schedule="constant",
        warmup=0,
        max_grad_norm=clip,
        beta1=b1,
        beta2=b2,
        epsilon=eps,
    ).build(10, AXES)
    rng = np.random.default_rng(0)
    grads = [
        {"w": rng.normal(size=(2, 3)) * 100, "norm": rng.normal(size=2) * 100},  # norm ~200: clipped
        {"w": rng.normal(size=(2, 3)) * 0.1, "norm": rng.normal(size=2) * 0.1},
    ]
    state = tx.init(params)
    m = {k: 0.0 for k in params}
    v = {k: 0.0 for k in params}
    for t, g in enumerate(grads, start=1):
        updates, state = tx.update(jax.tree.map(jnp.asarray, g), state, params)
        norm = math.sqrt(sum(float(np.sum(x**2)) for x in g.values()))
        scale = min(1.0, clip / norm) if clip else 1.0
        for k in params:
            m[k] = b1 * m[k] + (1 - b1) * g[k] * scale
            v[k] = b2 * v[k] + (1 - b2) * (g[k] * scale) ** 2
            expected = -lr_ * (m[k] / (1 - b1**t)) / (np.sqrt(v[k] / (1 - b2**t)) + eps)
            np.testing.assert_allclose(updates[k], expected, rtol=2e-5)


def test_ema_update():
    ema = update_ema({"a": jnp.zeros(3)}, {"a": jnp.ones(3)}, decay=0.9)
    np.testing.assert_allclose(ema["a"], 0.1)
