"""Next-token cross-entropy from the last hidden states, a block of positions at a time.

    loss_sum, weight = chunked_token_loss(x, w, targets, mask, z_loss=0.0, block=4096)

``x`` [batch, seq, embed] are the final (normed) hidden states and ``w`` [embed, vocab] the output projection;
the result equals ``next_token_loss``'s from the full logits ``x @ w`` (to float rounding): the sum over unmasked
targets of ``logsumexp(logits) - logits[target]`` (+ ``z_loss * logsumexp(logits)**2``) and the mask's sum.

Why: the logits [batch, seq, vocab] in fp32 are the largest activation of a language model (Llama 3's 128k
vocabulary: 16 GB for 32k positions) and, on a CPU, the slowest part of a small model's step: they are written,
read back for the softmax and again for its gradient, far from the caches. Here they exist one block of
``batch x (block / batch)`` positions at a time (the batch axis is kept whole, so a batch sharded over devices
stays so), and the gradient is computed in the same pass as the loss (Liger Kernel's fused linear
cross-entropy): the loss is a sum, so its gradient with respect to ``x`` and ``w`` is known in the forward
pass up to the incoming scalar, and the backward only scales it. Nothing is recomputed; the residuals are
``dx`` (the size of ``x``) and ``dw`` (the size of ``w``), never the logits.

It is memory, not speed: on a 2-core CPU (``benchmarks/chunked_loss_bench.py``, docs/trainer.md) a step with a
131,072-token vocabulary needs 4.5 GB of temporaries with the whole logits and 0.8 GB in blocks of 256 positions,
at 0.95x the speed; at the optimizer study's vocabulary of 2,048 the step's time is unchanged.

On a mesh the batch rows stay where they are (the blocks split the sequence), and the head's gradient is kept
per shard of the rows inside the loop and summed once after it: summed inside, the partitioner all-reduces the
whole ``[embed, vocab]`` gradient over the batch's devices in every block. What remains in the loop is what a
vocabulary-parallel softmax needs anyway: per-position reductions over the tensor axis (tested on 8 host
devices against the one-device run, and on the compiled program's collectives: tests/trainer/test_sharding.py).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from marin.trainer.axes import BATCH, EMBED, VOCAB, active_sharding, constrain, target_platform
from marin.trainer.layouts import as_bits, from_bits
from marin.trainer.mesh import batch_shards


def _block_rows(batch: int, seq: int, block: int) -> int:
    """Positions per row in one block: about ``block / batch``, a divisor of ``seq``."""
    if block < 1:
        raise ValueError(f"chunked_token_loss: block must be >= 1 position, got {block}")
    rows = max(1, min(seq, block // max(batch, 1)))
    while seq % rows:
        rows -= 1
    return rows


def _blocks(x, targets, mask, rows):
    """[batch, seq, ...] -> [seq / rows, batch, rows, ...]: the scan runs over the leading axis."""
    batch, seq = targets.shape

    def split(a):
        return jnp.moveaxis(a.reshape(batch, seq // rows, rows, *a.shape[2:]), 1, 0)

    return split(x), split(targets), split(mask.astype(jnp.float32))


def _by_shard(a, shards, last):
    """[batch, rows, last] -> [shards, batch / shards, rows, last], the shards placed as the batch is."""
    return constrain(a.reshape(shards, a.shape[0] // shards, *a.shape[1:]), (BATCH, None, None, last))


def _block_loss(x, w, targets, mask, z_loss):
    """One block's logits, ``log Z`` and summed loss."""
    logits = jnp.einsum("brE,EV->brV", x, w, preferred_element_type=jnp.float32)
    log_z = jax.nn.logsumexp(logits, axis=-1)
    target_logit = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    per_token = log_z - target_logit
    if z_loss:
        per_token = per_token + z_loss * jnp.square(log_z)
    return logits, log_z, jnp.sum(per_token * mask)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5))
def _chunked(x, w, targets, mask, z_loss: float, rows: int):
    def body(total, xs):
        xb, tb, mb = xs
        return total + _block_loss(xb, w, tb, mb, z_loss)[2], None

    total, _ = jax.lax.scan(body, jnp.zeros((), jnp.float32), _blocks(x, targets, mask, rows))
    return total


def _chunked_fwd(x, w, targets, mask, z_loss: float, rows: int):
    shards = batch_shards(active_sharding())  # 1 off a mesh
    shards = shards if targets.shape[0] % shards == 0 else 1
    on_cpu = target_platform() == "cpu"

    def body(carry, xs):
        total, dw = carry
        xb, tb, mb = xs
        logits, log_z, loss = _block_loss(xb, w, tb, mb, z_loss)
        # d loss / d logits: softmax * (1 + 2 z log Z) - onehot(target), on unmasked positions
        scale = mb * (1.0 + 2.0 * z_loss * log_z) if z_loss else mb
        g = jnp.exp(logits - log_z[..., None]) * scale[..., None]
        g = g - jax.nn.one_hot(tb, logits.shape[-1], dtype=g.dtype) * mb[..., None]
        g = g.astype(x.dtype)
        dx = jnp.einsum("brV,EV->brE", g, w, preferred_element_type=jnp.float32).astype(x.dtype)
        # The head's gradient per shard of the batch rows (each device's rows add to its own slice): summing
        # over the rows here would make the partitioner all-reduce the whole [embed, vocab] gradient in every
        # block; kept apart, the shards are summed once, after the loop.
        per_shard = jnp.einsum(
            "dbrE,dbrV->dEV",
            _by_shard(xb, shards, EMBED),
            _by_shard(g, shards, VOCAB),
            preferred_element_type=jnp.float32,
        )
        # the blocks' dx stacked by the scan as bits on CPU: a bf16 stack is converted whole per block there
        return (total + loss, dw + constrain(per_shard, (BATCH, EMBED, VOCAB))), as_bits(dx) if on_cpu else dx

    dw0 = constrain(jnp.zeros((shards, *w.shape), jnp.float32), (BATCH, EMBED, VOCAB))
    (total, dw), dx = jax.lax.scan(body, (jnp.zeros((), jnp.float32), dw0), _blocks(x, targets, mask, rows))
    # [blocks, batch, rows, embed] -> [batch, seq, embed]
    dx = jnp.moveaxis(from_bits(dx, x.dtype), 0, 1).reshape(x.shape)
    return total, (dx, jnp.sum(dw, axis=0).astype(w.dtype))


def _chunked_bwd(z_loss, rows, residuals, g):
    dx, dw = residuals
    return (g * dx).astype(dx.dtype), (g * dw).astype(dw.dtype), None, None


_chunked.defvjp(_chunked_fwd, _chunked_bwd)


def chunked_token_loss(
    x: jax.Array, w: jax.Array, targets: jax.Array, mask: jax.Array, *, z_loss: float = 0.0, block: int = 4096
) -> tuple[jax.Array, jax.Array]:
    """Summed next-token loss (+ z-loss) over unmasked targets and the number of those targets, from hidden
    states ``x`` [batch, seq, embed] and the output projection ``w`` [embed, vocab], ``block`` positions
    (about: whole rows of the batch times a divisor of seq) at a time."""
    if x.ndim != 3 or targets.shape != x.shape[:2] or mask.shape != targets.shape or w.shape[0] != x.shape[-1]:
        raise ValueError(
            f"chunked_token_loss: x {x.shape}, w {w.shape}, targets {targets.shape} and mask {mask.shape} disagree"
        )
    rows = _block_rows(*targets.shape, block)
    mask = mask.astype(jnp.float32)
    return _chunked(x, w, targets, mask, float(z_loss), rows), jnp.sum(mask)
