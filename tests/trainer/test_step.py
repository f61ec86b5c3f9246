"""The jitted step: gradient accumulation equals the big batch, precision policy, donation, EMA."""

import dataclasses
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from marin.trainer.data import DataConfig, SyntheticSourceConfig, TrainBatches
from marin.trainer.model import next_token_loss, param_axes
from marin.trainer.optim import OptimizerConfig
from marin.trainer.step import PrecisionPolicy, StepConfig, accumulate_gradients, init_state, make_train_step
from tests.trainer.conftest import updates_of_converted_buffers


def _batch(cfg, batch_size=8, step=0):
    source = SyntheticSourceConfig(vocab_size=cfg.vocab_size, num_tokens=20_000, max_doc_len=40)
    data = DataConfig(train={"s": source})
    return TrainBatches({"s": source.build()}, data, seq_len=cfg.seq_len, batch_size=batch_size).batch(step)


def _state(cfg, policy=PrecisionPolicy(compute_dtype="float32"), ema=False):
    opt = OptimizerConfig(learning_rate=1e-2, schedule="constant", warmup=0, ema_decay=0.5 if ema else None)
    tx = opt.build(100, param_axes(cfg))
    state = jax.jit(lambda k: init_state(cfg, tx, k, ema=ema, policy=policy))(jax.random.PRNGKey(0))
    return opt, tx, state


def test_gradient_accumulation_equals_the_big_batch(tiny):
    """4 microbatches of 2 give the big batch's summed loss and gradients up to fp32 rounding: only the
    order of additions differs, so each gradient leaf agrees to 1e-5 of its largest entry (entries that
    are sums with cancellation carry that absolute error). Packed documents and a masked row make the
    microbatches' token counts unequal."""
    _, _, state = _state(tiny)
    batch = jax.tree.map(jnp.asarray, _batch(tiny))
    batch["loss_mask"] = batch["loss_mask"].at[0, :20].set(0.0)  # unequal weights per microbatch
    grad_fn = jax.value_and_grad(lambda p, b: next_token_loss(tiny, p, b), has_aux=True)
    run = jax.jit(lambda p, b, n: accumulate_gradients(grad_fn, p, b, n), static_argnums=2)
    big, micro = run(state.params, batch, 1), run(state.params, batch, 4)
    np.testing.assert_allclose(big[0], micro[0], rtol=1e-5)
    assert float(big[1]) == float(micro[1]) == float(batch["loss_mask"].sum())
    for a, b in zip(jax.tree.leaves(big[2]), jax.tree.leaves(micro[2])):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5 * float(jnp.max(jnp.abs(a))))


def test_train_step_with_microbatches_matches_metrics_and_params(tiny):
    batch = _batch(tiny)
    results = []
    for n in (1, 4):
        opt, tx, state = _state(tiny)
        step = make_train_step(
            tiny,
            tx,
            opt.lr_schedule(100),
            StepConfig(num_microbatches=n, precision=PrecisionPolicy(compute_dtype="float32")),
        )
        state, metrics = step(state, batch)
        results.append((jax.device_get(metrics), jax.device_get(state.params)))
    (m1, p1), (m4, p4) = results
    for key in ("loss", "grad_norm", "tokens"):
        np.testing.assert_allclose(m1[key], m4[key], rtol=1e-5)
    # After one Adam step the update is ~lr * sign(g); compare with lr-relative tolerance.
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-2 * 1e-2), p1, p4)


def test_the_exchanging_step_sums_every_processs_vector_in_rank_order(tiny):
    """``exchange_across_processes`` (host_processes): the step hands the exchange this process's sums and
    gradients as one float32 vector and updates from the rows it returns, added in rank order. Three copies of
    this process's vector are three processes on the same rows: three times the tokens, the same mean loss and
    gradients, so the plain step's update to float rounding; and the exchange gets a fresh vector each step."""
    batch = _batch(tiny)
    seen, announced = [], []

    class ThreeCopies:
        rank, world = 1, 3

        def contributions(self, vector: np.ndarray) -> np.ndarray:
            seen.append(vector.copy())
            return np.stack([vector, vector, vector])

        def announce(self, program: int) -> None:
            announced.append(program)

        def await_announcement(self, program: int, what: str) -> None:
            assert program in announced or what == "the gradient program"  # rank 0's: compiled here instead

    three_copies = ThreeCopies()

    runs = []
    for exchange in (None, three_copies):
        opt, tx, state = _state(tiny)
        cfg = StepConfig(precision=PrecisionPolicy(compute_dtype="float32"))
        step = make_train_step(tiny, tx, opt.lr_schedule(100), cfg, exchange_across_processes=exchange)
        for _ in range(2):
            state, metrics = step(state, batch)
        runs.append((jax.device_get(metrics), jax.device_get(state.params)))
    (plain, plain_params), (summed, summed_params) = runs
    assert summed["tokens"] == 3 * plain["tokens"] == 3 * float(batch["loss_mask"].sum())
    assert summed["loss"] == pytest.approx(plain["loss"], rel=1e-6)
    for a, b in zip(jax.tree.leaves(plain_params), jax.tree.leaves(summed_params), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    first, second = seen
    assert announced == [1]  # as rank 1, it compiled the update program and said so, once
    assert first.dtype == second.dtype == np.float32 and first.shape == second.shape == (tiny.param_count + 2,)
    assert not np.array_equal(first, second)  # a fresh vector each step (+ the loss sum and the token count)


def test_precision_policy_keeps_fp32_params_under_bf16_compute(tiny):
    policy = PrecisionPolicy(compute_dtype="bfloat16")
    opt, tx, state = _state(tiny, policy=policy)
    step = make_train_step(tiny, tx, opt.lr_schedule(100), StepConfig(precision=policy))
    state, metrics = step(state, _batch(tiny))
    assert all(p.dtype == jnp.float32 for p in jax.tree.leaves(state.params))
    assert metrics["loss"].dtype == jnp.float32 and np.isfinite(float(metrics["loss"]))
    with pytest.raises(ValueError, match="compute_dtype must be one of"):
        PrecisionPolicy(compute_dtype="fp8")


def _matmul_operand_types(cfg, compute_dtype):
    """(lhs, rhs) element types of every dot_general in the lowered train step (forward and backward)."""
    policy = PrecisionPolicy(compute_dtype=compute_dtype)
    opt, tx, state = _state(cfg, policy=policy)
    step = make_train_step(cfg, tx, opt.lr_schedule(100), StepConfig(precision=policy))
    text = step.lower(state, _batch(cfg)).as_text()
    dots = [line for line in text.splitlines() if "stablehlo.dot_general" in line]
    return [tuple(re.findall(r"tensor<[^>]*x(\w+)>", line.rsplit(":", 1)[1].split("->")[0])) for line in dots]


@pytest.mark.parametrize("platform", ["cpu", "gpu"])
@pytest.mark.parametrize("backend,fp32_per_layer", [("blockwise", 0), ("xla", 2)])
def test_bf16_policy_runs_the_steps_matmuls_in_bf16(tiny, backend, fp32_per_layer, platform, monkeypatch):
    """Every matmul of the jitted step (projections, MLP, lm_head, attention scores and values, forward
    and backward) takes bf16 operands under the bf16 policy. With the CPU default (``blockwise``, whose
    backward is written by hand) that is all of them; JAX's XLA attention keeps the softmax gradient in
    fp32, so there exactly two per layer (dq and dk) take an fp32 operand. The fp32 policy has no bf16
    matmul, so the test sees the policy. ``gpu``: the step as lowered for a GPU (the platform faked while
    tracing; lowering is platform-independent here), where plain autodiff once ran the lm_head's backward
    in fp32 (seen on an H100, 2026-11-25)."""
    monkeypatch.setattr(jax, "default_backend", lambda: platform)
    # Unrolled, so the lowered text holds every layer's matmuls (a GPU would scan: one body for all).
    cfg = dataclasses.replace(tiny, attention_backend=backend, scan_layers=False)
    bf16, fp32 = _matmul_operand_types(cfg, "bfloat16"), _matmul_operand_types(cfg, "float32")
    assert len(bf16) == len(fp32) > 10 * cfg.num_layers  # the whole step, not a fragment of it
    assert all(types == ("f32", "f32") for types in fp32), set(fp32)
    not_bf16 = [types for types in bf16 if types != ("bf16", "bf16")]
    assert not_bf16 == [("f32", "bf16")] * (fp32_per_layer * cfg.num_layers), not_bf16


def _compiled_dot_operand_types(cfg, compute_dtype):
    """(lhs, rhs) element types of every dot in the step as XLA:CPU compiled it, after its own passes; and the
    jitted step, its state and the compiled program's text."""
    policy = PrecisionPolicy(compute_dtype=compute_dtype)
    opt, tx, state = _state(cfg, policy=policy)
    step = make_train_step(cfg, tx, opt.lr_schedule(100), StepConfig(precision=policy))
    text = step.lower(state, _batch(cfg)).compile().as_text()
    found = []
    for computation in re.split(r"\n(?=\S)", text):
        types = dict(re.findall(r"(%[\w.\-]+) = (\w+)\[", computation))
        for operands in re.findall(r"= \w+\[[\d,]*\]\S* dot\((%[\w.\-]+), (%[\w.\-]+)\)", computation):
            found.append(tuple(types[name] for name in operands))
    return found, step, state, text


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="XLA:CPU's own passes")
@pytest.mark.parametrize(
    "moe",
    [{}, dict(num_experts=4, experts_per_token=2), dict(num_experts=4, experts_per_token=2, capacity_factor=1.25)],
    ids=["dense", "moe_blocked", "moe_capacity"],
)
def test_xla_cpu_keeps_the_bf16_steps_matmuls_in_bf16(tiny, moe):
    """XLA:CPU upcasts a bf16 dot to fp32 (its operand upcaster) when an operand has a transposed layout:
    before ``layouts.row_major`` that was 56 of the tiny step's 57 dots (the weight gradients, the GQA
    attention's products), ~3x slower than the bf16 kernels on an AMX host (docs/trainer.md, "Built (2026-11-30)"). The
    lowered program cannot show it; the compiled one does. The step must also run: a bf16 x bf16 -> fp32
    dot that reaches XLA's generic dot instead of YNNPACK fails at run time ("Unsupported element type for
    DotThunk"), as the attention backward's once did when XLA folded a transpose into it. The MoE variants
    check the experts' products of the blocked and capacity dispatches (``grouped.block_swiglu``): as
    ``einsum(x, w[owner])`` XLA:CPU converted the gathered bf16 weights to fp32 (docs/model_families.md, "Speed").
    No update writes a converted buffer: the experts' loops once wrote each bf16 block into a bf16 result
    that XLA:CPU converted to fp32 and back around every update, a pass over the whole result per block
    (23% of the bf16 MoE step, 2026-12-06); the loops now carry the bits."""
    cfg = dataclasses.replace(tiny, **moe)
    found, step, state, text = _compiled_dot_operand_types(cfg, "bfloat16")
    assert len(found) > 20 * tiny.num_layers  # the whole step
    assert [types for types in found if types != ("bf16", "bf16")] == []
    assert updates_of_converted_buffers(text) == []
    _, metrics = step(state, _batch(cfg))
    assert np.isfinite(float(metrics["loss"]))


def test_step_donates_state_counts_steps_and_updates_ema(tiny):
    opt, tx, state = _state(tiny, ema=True)
    step = make_train_step(tiny, tx, opt.lr_schedule(100), StepConfig(ema_decay=0.5))
    old_params = state.params
    new, metrics = step(state, _batch(tiny))
    assert int(new.step) == 1 and float(metrics["learning_rate"]) == pytest.approx(1e-2)
    assert old_params["embed"].is_deleted()  # donated: the old buffers were reused
    # ema = 0.5 * init + 0.5 * new params; init was donated, so check the relation via a second step.
    ema1, rng1 = jax.device_get(new.ema), jax.device_get(new.rng)
    newer, _ = step(new, _batch(tiny, step=1))
    expected = jax.tree.map(lambda e, p: 0.5 * e + 0.5 * p, ema1, jax.device_get(newer.params))
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6), jax.device_get(newer.ema), expected)
    assert not np.array_equal(jax.device_get(newer.rng), rng1)  # the state's PRNG advances every step


def test_config_validation():
    with pytest.raises(ValueError, match="num_microbatches must be >= 1, got 0"):
        StepConfig(num_microbatches=0)


def _five_steps(cfg, compute_dtype):
    """Losses and parameters after five steps of the tiny model (the compile-flags check below)."""
    policy = PrecisionPolicy(compute_dtype=compute_dtype)
    opt, tx, state = _state(cfg, policy=policy)
    step = make_train_step(cfg, tx, opt.lr_schedule(100), StepConfig(precision=policy))
    losses = []
    for i in range(5):
        state, metrics = step(state, _batch(cfg, step=i))
        losses.append(float(metrics["loss"]))
    return losses, [np.asarray(leaf, np.float32).tolist() for leaf in jax.tree.leaves(jax.device_get(state.params))]


_FIVE_STEPS_ON_XLAS_DEFAULTS = """
import json, sys
from tests.trainer.conftest import tiny_model
from tests.trainer.test_step import _five_steps
print(json.dumps(_five_steps(tiny_model(), sys.argv[1])))
"""


@pytest.mark.parametrize("compute_dtype", ["float32", "bfloat16"])
def test_the_suites_xla_flags_train_like_xlas_defaults(tiny, compute_dtype):
    """The suite compiles with ``tests/compile_cache.py``'s ``TEST_XLA_FLAGS`` (the older fusion emitters, LLVM's
    optimizations off: a tenth of the compile time). Five steps of the tiny model under them give XLA's defaults' losses
    and parameters to rounding: the flags change how fused elementwise code is generated, not what the step
    computes, so what the suite asserts holds for what users run."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from tests.compile_cache import TEST_XLA_FLAGS

    if os.environ.get("MARIN_TEST_XLA_DEFAULTS") != "1":
        assert TEST_XLA_FLAGS in os.environ["XLA_FLAGS"]
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root), "XLA_FLAGS": ""}
    env.pop("JAX_COMPILATION_CACHE_DIR")  # a cache of its own: the key does not cover every flag
    proc = subprocess.run(
        [sys.executable, "-c", _FIVE_STEPS_ON_XLAS_DEFAULTS, compute_dtype], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    default_losses, default_params = json.loads(proc.stdout.strip().splitlines()[-1])
    losses, params = _five_steps(tiny, compute_dtype)
    tolerance = 1e-5 if compute_dtype == "float32" else 2e-2
    np.testing.assert_allclose(losses, default_losses, rtol=tolerance)
    assert losses[-1] < losses[0] - 0.1  # it trains
    assert len(params) == len(default_params) > 10
    for value, default in zip(params, default_params):
        value, default = np.asarray(value), np.asarray(default)
        # Adam scales each element's step by its own gradient's size, so an element whose gradient is about zero
        # can step the other way under other rounding (one of 16,384 did by 0.004 without LLVM's optimizations):
        # a few elements may differ by more than rounding, the tensor may not.
        off = np.abs(value - default) > tolerance * 10
        assert off.mean() <= 1e-3, (int(off.sum()), off.size)
