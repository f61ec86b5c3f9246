"""The blocked next-token loss (``model/chunked_loss.py``) equals the loss from the whole logits, in value and
gradient, through the train step, and keeps the logits out of the step's memory."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from marin.trainer import TrainerConfig
from marin.trainer.model import param_axes
from marin.trainer.model.chunked_loss import chunked_token_loss
from marin.trainer.optim import OptimizerConfig
from marin.trainer.step import PrecisionPolicy, StepConfig, init_state, make_train_step
from tests.trainer.conftest import tiny_model, updates_of_converted_buffers

FP32 = PrecisionPolicy(compute_dtype="float32")


def _whole_logits_loss(x, w, targets, mask, z_loss):
    logits = jnp.einsum("bsE,EV->bsV", x, w)
    log_z = jax.nn.logsumexp(logits, axis=-1)
    per_token = log_z - jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    per_token = per_token + z_loss * jnp.square(log_z)
    return jnp.sum(per_token * mask)


@pytest.mark.parametrize("z_loss", [0.0, 1e-2])
@pytest.mark.parametrize("block", [1, 20, 10_000])  # one position per row, 8 (24 % 10), past the whole batch
def test_blocked_loss_and_its_gradients_equal_the_whole_logits(z_loss, block):
    rng = np.random.default_rng(0)
    batch, seq, embed, vocab = 2, 24, 8, 50
    x = jnp.asarray(rng.normal(size=(batch, seq, embed)), jnp.float32)
    w = jnp.asarray(rng.normal(size=(embed, vocab)), jnp.float32)
    targets = jnp.asarray(rng.integers(0, vocab, (batch, seq)), jnp.int32)
    mask = jnp.asarray(rng.random((batch, seq)) > 0.3, jnp.float32)

    def blocked(x, w):
        return chunked_token_loss(x, w, targets, mask, z_loss=z_loss, block=block)[0]

    loss, (dx, dw) = jax.value_and_grad(blocked, argnums=(0, 1))(x, w)
    want, (want_dx, want_dw) = jax.value_and_grad(_whole_logits_loss, argnums=(0, 1))(x, w, targets, mask, z_loss)
    np.testing.assert_allclose(loss, want, rtol=1e-6)
    np.testing.assert_allclose(dx, want_dx, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dw, want_dw, rtol=1e-5, atol=1e-6)
    assert np.all(np.asarray(dx)[np.asarray(mask) == 0] == 0)  # a masked position gets no gradient
    value, weight = chunked_token_loss(x, w, targets, mask, z_loss=z_loss, block=block)  # undifferentiated (eval)
    np.testing.assert_allclose(value, want, rtol=1e-6)
    assert float(weight) == float(mask.sum())


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="XLA:CPU's own passes")
def test_bf16_blocks_stack_their_input_gradient_in_place_on_cpu():
    """In bf16 the scan stacks each block's dx into one buffer; XLA:CPU normalized that bf16 update to fp32,
    converting the whole stack to fp32 and back for every block. The stack now carries the bits
    (``layouts.as_bits``): no update of a converted buffer, and the same gradient as the whole logits' to bf16
    rounding."""
    rng = np.random.default_rng(0)
    batch, seq, embed, vocab = 2, 24, 8, 50
    x = jnp.asarray(rng.normal(size=(batch, seq, embed)), jnp.bfloat16)
    w = jnp.asarray(rng.normal(size=(embed, vocab)), jnp.bfloat16)
    targets = jnp.asarray(rng.integers(0, vocab, (batch, seq)), jnp.int32)
    mask = jnp.ones((batch, seq), jnp.float32)

    def blocked(x, w):
        return chunked_token_loss(x, w, targets, mask, block=8)[0]

    grad = jax.jit(jax.grad(blocked, argnums=(0, 1)))
    assert updates_of_converted_buffers(grad.lower(x, w).compile().as_text()) == []
    dx, dw = grad(x, w)
    want_dx, want_dw = jax.grad(_whole_logits_loss, argnums=(0, 1))(
        x.astype(jnp.float32), w.astype(jnp.float32), targets, mask, 0.0
    )
    assert dx.dtype == jnp.bfloat16
    for got, want in ((dx, want_dx), (dw, want_dw)):
        np.testing.assert_allclose(np.asarray(got, np.float32), want, atol=2e-2 * float(jnp.max(jnp.abs(want))))


def test_blocked_loss_refuses_shapes_that_disagree_and_a_block_below_one():
    x, w = jnp.zeros((2, 8, 4)), jnp.zeros((4, 10))
    t, m = jnp.zeros((2, 8), jnp.int32), jnp.ones((2, 8))
    with pytest.raises(ValueError, match=r"w \(5, 10\)"):
        chunked_token_loss(x, jnp.zeros((5, 10)), t, m)
    with pytest.raises(ValueError, match="block must be >= 1"):
        chunked_token_loss(x, w, t, m, block=0)
    with pytest.raises(ValueError, match="StepConfig.loss_block"):
        StepConfig(loss_block=0)
    with pytest.raises(ValueError, match="TrainerConfig.loss_block"):
        TrainerConfig(num_train_steps=1, batch_size=1, loss_block=-4)


def _train(model, loss_block, z_loss, steps=2):
    optimizer_cfg = OptimizerConfig(learning_rate=1e-2)
    optimizer = optimizer_cfg.build(steps, param_axes(model))
    step = make_train_step(
        model,
        optimizer,
        optimizer_cfg.lr_schedule(steps),
        StepConfig(precision=FP32, z_loss=z_loss, loss_block=loss_block),
    )
    state = init_state(model, optimizer, jax.random.PRNGKey(0), ema=False, policy=FP32)
    rng = np.random.default_rng(1)
    losses = []
    for _ in range(steps):
        ids = rng.integers(0, model.vocab_size, (4, model.seq_len + 1)).astype(np.int32)
        batch = {
            "input_ids": ids[:, :-1],
            "targets": ids[:, 1:],
            "segment_ids": np.zeros((4, model.seq_len), np.int32),
            "loss_mask": (rng.random((4, model.seq_len)) > 0.1).astype(np.float32),
        }
        state, metrics = step(state, batch)
        losses.append((float(metrics["loss"]), float(metrics["grad_norm"])))
    return losses, state.params


def test_train_steps_with_a_loss_block_equal_the_whole_logits_steps():
    model = tiny_model(tie_embeddings=True)  # the head's gradient reaches the embedding through its transpose
    whole_losses, whole = _train(model, None, z_loss=1e-4)
    blocked_losses, blocked = _train(model, 32, z_loss=1e-4)  # 4 rows x 8 positions per block
    np.testing.assert_allclose(blocked_losses, whole_losses, rtol=1e-5)  # loss and gradient norm of every step
    # Adam's update is ~lr * sign(g), so rounding in a near-zero gradient moves a parameter by a fraction of lr:
    # compared as test_step compares microbatches, to 1% of the learning rate
    for a, b in zip(jax.tree.leaves(blocked), jax.tree.leaves(whole)):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-2 * 1e-2)


def test_a_loss_block_keeps_the_logits_out_of_the_steps_memory():
    """XLA's own accounting of the compiled step's temporaries: at a 32k vocabulary the whole logits
    (4 x 256 positions x 32,768 x 4 bytes = 128 MiB, several copies) dominate; blocks of 128 positions cut them."""
    model = dataclasses.replace(tiny_model(), vocab_size=32_768, seq_len=256)
    optimizer_cfg = OptimizerConfig(learning_rate=1e-3)
    optimizer = optimizer_cfg.build(10, param_axes(model))
    state = jax.eval_shape(lambda key: init_state(model, optimizer, key, ema=False, policy=FP32), jax.random.PRNGKey(0))
    batch = {k: jax.ShapeDtypeStruct((4, 256), jnp.int32) for k in ("input_ids", "targets", "segment_ids")}
    batch["loss_mask"] = jax.ShapeDtypeStruct((4, 256), jnp.float32)

    def temporaries(loss_block):
        config = StepConfig(precision=FP32, loss_block=loss_block)
        step = make_train_step(model, optimizer, optimizer_cfg.lr_schedule(10), config)
        return step.lower(state, batch).compile().memory_analysis().temp_size_in_bytes

    whole, blocked = temporaries(None), temporaries(128)
    logits = 4 * 256 * 32_768 * 4
    assert whole > 2 * logits, whole
    assert blocked < logits, (blocked, whole)  # not even one copy (measured: 70 MiB against 286 MiB)
