"""The mixture-of-experts feed-forward layer: a router, top-k experts per token, and three ways to compute them.

    y, stats = moe_block(cfg, layer, x)        # x [batch, seq, embed]; layer["router"] [embed, experts], ...
    losses = router_losses(cfg, total)         # from the stats summed over layers (and microbatches)

Each token's router logits pick ``experts_per_token`` experts (``route``); the layer's output is the weighted
sum of those experts' SwiGLU outputs, plus the shared experts' (``shared_experts``, unweighted). How the
routed experts are computed is a dispatch, chosen by config:

* ``ragged`` (dropless): the token/expert assignments are sorted by expert and each expert multiplies its
  contiguous rows: grouped matmuls, ``jax.lax.ragged_dot``. On GPU and TPU that is a grouped GEMM doing
  exactly the active FLOPs; XLA:CPU lowers it to a masked dense product over every expert.
* ``blocked`` (dropless): the sorted assignments padded per expert to a multiple of a block of rows, and every
  block through its expert's SwiGLU (``grouped.block_swiglu``: MegaBlocks' block-sparse layout without its
  kernel): the active FLOPs plus at most one block of padding per expert, on any backend.

The sorted and capacity dispatches move token rows into the experts' order and back with ``grouped.gather_rows``,
whose gradient is a gather through the inverse map (autodiff of an indexed read is a scatter-add).
* ``dense`` (dropless): every expert runs on every token and a one-hot combine matrix zeroes the unchosen
  ones (GShard's einsum without capacity): ``experts / k`` times the active FLOPs, no gather or sort.
* capacity (``capacity_factor``): each expert takes at most ``C = ceil(factor * tokens * k / experts)``
  assignments, first choices before second (GShard/Switch priority); the overflow is dropped, i.e. the
  token keeps only its residual for that expert, and counted (``dropped``).

**FP8** (``matmul_dtype="float8"``, ``PrecisionPolicy``): the blocked and capacity dispatches multiply their
blocks in FP8 (``fp8.fp8_batched_matmul``: one scale for all blocks' rows, one for the gathered weights), and the
ragged dispatch its groups (``fp8.fp8_ragged_dot``: one scale for all rows, one for every expert's weights), as
the shared experts and every projection do. The default dispatch under FP8 is ``blocked`` on every platform
(an FP8 ``ragged_dot`` has run on XLA:CPU's emulation only); ``ragged`` is there by choice, and ``dense``
with FP8 is refused (the one-hot einsum has no FP8 form here).

**Expert parallelism.** On a mesh the layer runs per device under ``shard_map``: each device routes its own
tokens (no sort or capacity spans devices). When the mesh has an ``expert`` axis of size > 1
(``MeshConfig.expert``) each device then sends every assignment to the device that holds its expert
(``all_to_all`` over the ``expert`` axis), multiplies what it received with its ``experts / ep`` local experts
(grouped: ragged or blocked), and sends the results back the same way. The send buffers
are sized for the worst case (all of a device's assignments to one peer), so nothing is dropped; memory is
``ep`` times the assignments' activations. With a capacity, the exchange is GShard's: each device's
``[experts, capacity, embed]`` buffer is split by the experts' devices, so every (device, expert) pair
exchanges exactly ``capacity`` rows, and drops are those of the same capacity without expert parallelism.
The router statistics are summed over the batch axes, so the losses equal the one-device ones.

**Losses** (``router_losses``). The load-balancing loss is the Switch Transformer's as transformers'
``load_balancing_loss_func`` computes it for Mixtral, Qwen3-MoE and OLMoE: ``E * sum_e f_e * P_e``, with ``f_e``
the fraction of tokens routed to expert ``e`` (summed over the k choices; 1 per token in all) and ``P_e`` the
mean router probability of ``e``, both over every token of every layer (not a mean of per-layer losses). The
z-loss is ST-MoE's ``mean(logsumexp(router_logits) ** 2)``. Every token counts, padding included, as in
transformers without an attention mask.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec

from marin.trainer.axes import BATCH, EMBED, EXPERTS, SEQ, active_sharding, partition_spec, target_platform
from marin.trainer.model.activations import swiglu_hidden
from marin.trainer.model.config import LlamaConfig
from marin.trainer.model.dense import dense
from marin.trainer.model.fp8 import fp8_batched_matmul, fp8_ragged_dot
from marin.trainer.model.grouped import block_swiglu, gather_rows

EXPERT_AXIS = "expert"
"""The mesh axis expert parallelism exchanges tokens over (``marin.trainer.mesh.EXPERT``)."""


class RouterStats(NamedTuple):
    """Sums over a layer's tokens (and then over layers, microbatches and devices: all fields add up)."""

    tokens: jax.Array
    """Tokens routed (a scalar)."""
    expert_counts: jax.Array
    """[experts] assignments each expert was given by the router (before any capacity drop)."""
    prob_sums: jax.Array
    """[experts] each expert's router probability summed over tokens."""
    z_sums: jax.Array
    """Squared logsumexp of the router logits, summed over tokens."""
    dropped: jax.Array
    """Assignments over capacity, not computed."""


def empty_stats(num_experts: int) -> RouterStats:
    zero = jnp.zeros((), jnp.float32)
    return RouterStats(zero, jnp.zeros((num_experts,), jnp.float32), jnp.zeros((num_experts,), jnp.float32), zero, zero)


def route(cfg: LlamaConfig, x: jax.Array, router: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Router logits [tokens, experts] (fp32), the chosen experts [tokens, k] and their weights [tokens, k]."""
    logits = dense(x, router, out_dtype=jnp.float32)
    k = cfg.experts_per_token
    if cfg.router_order == "topk_softmax":
        top, experts = jax.lax.top_k(logits, k)
        return logits, experts, jax.nn.softmax(top, axis=-1)
    weights, experts = jax.lax.top_k(jax.nn.softmax(logits, axis=-1), k)
    if cfg.normalize_topk:
        weights = weights / jnp.sum(weights, axis=-1, keepdims=True)
    return logits, experts, weights


def router_stats(logits: jax.Array, experts: jax.Array, dropped: jax.Array) -> RouterStats:
    num_experts = logits.shape[-1]
    counts = jnp.sum(jax.nn.one_hot(experts, num_experts, dtype=jnp.float32), axis=(0, 1))
    probs = jax.nn.softmax(logits, axis=-1)
    z = jax.nn.logsumexp(logits, axis=-1)
    return RouterStats(
        jnp.asarray(logits.shape[0], jnp.float32),
        counts,
        jnp.sum(probs, axis=0),
        jnp.sum(z * z),
        jnp.asarray(dropped, jnp.float32),
    )


def router_losses(cfg: LlamaConfig, total: RouterStats) -> dict[str, jax.Array]:
    """The load-balancing loss, the z-loss and the metrics of stats summed over layers; their weighted sum
    (``router_loss``) is what training adds to the mean token loss."""
    tokens = jnp.maximum(total.tokens, 1.0)
    fraction = total.expert_counts / tokens  # sums to k
    balance = cfg.num_experts * jnp.sum(fraction * (total.prob_sums / tokens))
    z_loss = total.z_sums / tokens
    uniform = cfg.experts_per_token / cfg.num_experts
    return {
        "router_loss": cfg.router_aux_loss_coef * balance + cfg.router_z_loss_coef * z_loss,
        "router_aux_loss": balance,
        "router_z_loss": z_loss,
        "moe_dropped_fraction": total.dropped / (tokens * cfg.experts_per_token),
        "expert_load_max": jnp.max(fraction) / uniform,
        "expert_load_min": jnp.min(fraction) / uniform,
        **{f"expert_load/{e:03d}": fraction[e] / uniform for e in range(cfg.num_experts)},
    }


def swiglu(x: jax.Array, w_gate: jax.Array, w_up: jax.Array, w_down: jax.Array, matmul_dtype: str = "default"):
    """down(silu(gate(x)) * up(x)) (Shazeer 2020) for x [..., embed]."""
    hidden = swiglu_hidden(dense(x, w_gate, matmul_dtype=matmul_dtype), dense(x, w_up, matmul_dtype=matmul_dtype))
    return dense(hidden, w_down, matmul_dtype=matmul_dtype)


def moe_block(cfg: LlamaConfig, layer: dict[str, Any], x: jax.Array, matmul_dtype: str = "default"):
    """The MoE feed-forward of one layer: output [batch, seq, embed] and its ``RouterStats``."""
    context = active_sharding()
    if context is not None:
        y, stats = _sharded_block(cfg, layer, x, context, matmul_dtype)
    else:
        batch, seq, d = x.shape
        y2, stats = _routed_experts(cfg, layer, x.reshape(batch * seq, d), matmul_dtype)
        y = y2.reshape(batch, seq, d)
    if cfg.shared_experts:
        y = y + swiglu(x, layer["shared_gate"], layer["shared_up"], layer["shared_down"], matmul_dtype)
    return y, stats


def dispatch_name(cfg: LlamaConfig, matmul_dtype: str = "default") -> str:
    """The dispatch a layer of ``cfg`` uses on this platform ("ragged", "blocked", "dense" or "capacity").

    By default "blocked", the fastest dropless one measured on CPU (benchmarks/moe_bench.py: 2.7x "dense", 3.5x
    "ragged", which XLA:CPU lowers to a masked dense product); "ragged" on TPU, where XLA lowers
    ``ragged_dot`` to its grouped matmul (not measured here), except in FP8: an FP8 ``ragged_dot`` is checked
    only on XLA:CPU's emulation, so FP8 keeps the "blocked" products XLA compiles everywhere unless "ragged" is
    asked for. GPUs were not measured: XLA:GPU may lower ``ragged_dot`` densely as XLA:CPU does, so they keep
    "blocked"."""
    if cfg.capacity_factor is not None:
        return "capacity"
    if cfg.moe_dispatch != "default":
        if matmul_dtype == "float8" and cfg.moe_dispatch == "dense":
            raise ValueError(
                "LlamaConfig.moe_dispatch 'dense' has no FP8 form (matmul_dtype 'float8'); "
                "use 'blocked', 'ragged' or 'default'"
            )
        return cfg.moe_dispatch
    return "ragged" if target_platform() == "tpu" and matmul_dtype != "float8" else "blocked"


def _routed_experts(
    cfg: LlamaConfig, layer: dict[str, Any], x: jax.Array, matmul_dtype: str = "default"
) -> tuple[jax.Array, RouterStats]:
    """x [tokens, embed] through the router and its experts on one device."""
    logits, experts, weights = route(cfg, x, layer["router"])
    weights = weights.astype(x.dtype)
    w = (layer["w_gate"], layer["w_up"], layer["w_down"])
    name = dispatch_name(cfg, matmul_dtype)
    dropped = jnp.zeros((), jnp.int32)
    if name in ("ragged", "blocked"):
        y = _sorted_dispatch(x, experts, weights, *w, method=name, matmul_dtype=matmul_dtype)
    elif name == "dense":
        y = _dense_dispatch(x, experts, weights, *w)
    else:
        y, dropped = _capacity_dispatch(
            x, experts, weights, *w, capacity_factor=cfg.capacity_factor, matmul_dtype=matmul_dtype
        )
    return y, router_stats(logits, experts, dropped)


def _ragged_matmul(x: jax.Array, w: jax.Array, sizes: jax.Array, matmul_dtype: str) -> jax.Array:
    """Consecutive groups of ``sizes[g]`` rows of x [rows, in] each times w[g] [in, out], in FP8 when asked."""
    if matmul_dtype == "float8":
        return fp8_ragged_dot(x, w, sizes)
    return jax.lax.ragged_dot(x, w, sizes)


def _grouped_swiglu(
    x: jax.Array, groups: jax.Array, w_gate, w_up, w_down, method: str, matmul_dtype: str = "default", fan: int = 1
) -> jax.Array:
    """Each row a of ``x[a // fan]`` (a < len(groups): a token read once per expert it chose) through the SwiGLU
    of its expert ``groups[a]`` (an id of ``len(w_gate)`` or more is padding and comes out zero); the outputs
    [len(groups), embed] in the rows' order. ``method``: "ragged" sorts the rows by expert and runs
    ``jax.lax.ragged_dot`` over the groups; "blocked" places each expert's rows in blocks of its own and
    multiplies every block by its expert's weights. Rows move into and out of the experts' order by
    ``gather_rows``, whose gradients are gathers too."""
    num_experts = w_gate.shape[0]
    slot_of_row, row_of_slot, sizes = _expert_layout(groups, num_experts, method)
    inputs = gather_rows(x, row_of_slot // fan, slot_of_row.reshape(-1, fan))  # empty slots: zero
    if method == "ragged":
        gate = _ragged_matmul(inputs, w_gate, sizes, matmul_dtype)
        hidden = swiglu_hidden(gate, _ragged_matmul(inputs, w_up, sizes, matmul_dtype))
        out = _ragged_matmul(hidden, w_down, sizes, matmul_dtype)  # past the groups: zero
    else:
        size = block_rows(groups.shape[0], num_experts)
        buffer = inputs.reshape(-1, size, x.shape[-1])
        padded_end = jnp.cumsum((sizes + size - 1) // size * size)
        # the expert owning each block; blocks past the last group hold zero rows (their output is zero)
        owner = jnp.searchsorted(padded_end, jnp.arange(buffer.shape[0]) * size, side="right")
        owner = jnp.minimum(owner, num_experts - 1)
        used = padded_end[-1] // size  # the blocks that hold rows
        out = _block_swiglu(buffer, w_gate, w_up, w_down, owner, matmul_dtype, used).reshape(-1, x.shape[-1])
    return gather_rows(out, slot_of_row, row_of_slot[:, None])


def _expert_layout(groups: jax.Array, num_experts: int, method: str) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Where each of n rows goes in the experts' order: (slot_of_row [n], row_of_slot [slots], sizes [experts]).

    "ragged": slots are the rows sorted by expert (a permutation; padding ids sort last). "blocked": each
    expert's rows start a block of ``block_rows`` of their own, so slots = (n // size + experts) blocks, a
    static bound; a slot no row fills holds ``n`` and a padding row's slot is out of range. Only integer
    vectors move here: the rows themselves move by one gather each way."""
    n = groups.shape[0]
    order = jnp.argsort(groups, stable=True)
    sizes = jnp.bincount(groups, length=num_experts).astype(jnp.int32)  # padding ids are not counted
    if method == "ragged":
        return jnp.zeros(n, jnp.int32).at[order].set(jnp.arange(n, dtype=jnp.int32)), order.astype(jnp.int32), sizes
    size = block_rows(n, num_experts)
    slots = (-(-n // size) + num_experts) * size  # every group padded by less than a block
    padded = (sizes + size - 1) // size * size
    sorted_groups = groups[order]
    expert = jnp.minimum(sorted_groups, num_experts - 1)
    sorted_slot = (jnp.cumsum(padded) - padded)[expert] + jnp.arange(n) - (jnp.cumsum(sizes) - sizes)[expert]
    sorted_slot = jnp.where(sorted_groups < num_experts, sorted_slot, slots).astype(jnp.int32)
    slot_of_row = jnp.zeros(n, jnp.int32).at[order].set(sorted_slot)
    row_of_slot = jnp.full(slots, n, jnp.int32).at[sorted_slot].set(order.astype(jnp.int32), mode="drop")
    return slot_of_row, row_of_slot, sizes


def _combine(out: jax.Array, weights: jax.Array) -> jax.Array:
    """Each token's k expert outputs [tokens, k, embed] weighted by [tokens, k] and summed, in fp32: elementwise
    work XLA fuses (as an einsum it is a batch of [k] x [k, embed] dots, which XLA:CPU runs in fp32 after
    converting both operands)."""
    summed = jnp.sum(out.astype(jnp.float32) * weights.astype(jnp.float32)[:, :, None], axis=1)
    return summed.astype(out.dtype)


def block_rows(assignments: int, num_experts: int) -> int:
    """Rows per block of the blocked dispatch: the power of two at or above the mean group size, within
    [8, 256] (small for decoding's few tokens, GEMM-sized for training's many). 256 against 128 and 512 in the
    bf16 MoE step of ``benchmarks/moe_bench.py`` (1,024 rows per expert on average; one process, alternating,
    2026-12-06): 1.53-1.58 s against 1.70 and 1.65 s; larger blocks pad more."""
    mean = max(1, -(-assignments // num_experts))
    return min(256, max(8, 1 << (mean - 1).bit_length()))


def _sorted_dispatch(x, experts, weights, w_gate, w_up, w_down, method: str, matmul_dtype: str = "default"):
    tokens, k = experts.shape  # assignment a = token * k + choice
    out = _grouped_swiglu(x, experts.reshape(-1), w_gate, w_up, w_down, method, matmul_dtype, fan=k)
    return _combine(out.reshape(tokens, k, -1), weights)


def _dense_dispatch(x, experts, weights, w_gate, w_up, w_down) -> jax.Array:
    tokens = x.shape[0]
    combine = jnp.zeros((tokens, w_gate.shape[0]), x.dtype).at[jnp.arange(tokens)[:, None], experts].add(weights)
    hidden = swiglu_hidden(jnp.einsum("td,edm->tem", x, w_gate), jnp.einsum("td,edm->tem", x, w_up))
    return jnp.einsum("tem,emd->td", hidden * combine[:, :, None], w_down)  # the down projection is linear


def expert_capacity(tokens: int, k: int, num_experts: int, capacity_factor: float) -> int:
    return max(1, math.ceil(capacity_factor * tokens * k / num_experts))


def _capacity_dispatch(
    x, experts, weights, w_gate, w_up, w_down, *, capacity_factor: float, matmul_dtype="default", ep: int = 1
):
    """GShard's capacity dispatch of one device's tokens x [tokens, embed]: each of the ``experts`` (all of
    them, ``ep`` times the local ``w_*``'s) takes at most ``capacity`` assignments in a buffer [experts,
    capacity, embed]. With ``ep > 1`` the buffer's rows for the experts of each ``expert``-axis device go there
    (``all_to_all``), are multiplied by that device's local experts, and come back: GShard's own exchange,
    ``capacity`` rows per (device, expert) pair whatever the routing. Returns (y, dropped assignments)."""
    tokens, k = experts.shape
    num_experts, d = w_gate.shape[0] * ep, x.shape[-1]
    capacity = expert_capacity(tokens, k, num_experts, capacity_factor)
    # Choice-major order: every token's first choice is placed before any second choice (GShard priority).
    flat = experts.T.reshape(-1)  # [k * tokens]
    one_hot = jax.nn.one_hot(flat, num_experts, dtype=jnp.int32)
    position = jnp.sum((jnp.cumsum(one_hot, axis=0) - 1) * one_hot, axis=1)  # place in its expert's queue
    keep = position < capacity
    # Each assignment's row of the buffer [experts * capacity] (out of range: dropped), token-major (t * k + j),
    # and the assignment in each row (k * tokens: none).
    slot = jnp.where(keep, flat * capacity + position, num_experts * capacity).reshape(k, tokens).T.reshape(-1)
    slot = slot.astype(jnp.int32)
    filled_by = (
        jnp.full(num_experts * capacity, k * tokens, jnp.int32).at[slot].set(jnp.arange(k * tokens), mode="drop")
    )
    buffer = gather_rows(x, filled_by // k, slot.reshape(tokens, k)).reshape(num_experts, capacity, d)
    if ep > 1:  # [ep, local, capacity, embed]: block i goes to device i, which returns what it got from each
        local = num_experts // ep
        received = jax.lax.all_to_all(buffer.reshape(ep, local, capacity, d), EXPERT_AXIS, 0, 0, tiled=True)
        rows = received.transpose(1, 0, 2, 3).reshape(local, ep * capacity, d)  # each local expert's rows
        out = _capacity_swiglu(rows, w_gate, w_up, w_down, matmul_dtype)
        out = out.reshape(local, ep, capacity, d).transpose(1, 0, 2, 3)
        out = jax.lax.all_to_all(out, EXPERT_AXIS, 0, 0, tiled=True).reshape(num_experts, capacity, d)
    else:
        out = _capacity_swiglu(buffer, w_gate, w_up, w_down, matmul_dtype)  # [experts, capacity, embed]
    gathered = gather_rows(out.reshape(num_experts * capacity, d), slot, filled_by[:, None])  # dropped: zero
    y = _combine(gathered.reshape(tokens, k, d), weights)
    return y, jnp.sum(~keep)


def _capacity_swiglu(buffer, w_gate, w_up, w_down, matmul_dtype):
    """Each expert's rows [experts, rows, embed] through its SwiGLU (zero rows stay zero)."""
    return _block_swiglu(buffer, w_gate, w_up, w_down, jnp.arange(buffer.shape[0]), matmul_dtype)


def _block_swiglu(blocks, w_gate, w_up, w_down, owner, matmul_dtype: str, used=None) -> jax.Array:
    """Each block of rows [blocks, rows, embed] through the SwiGLU of its expert ``owner[b]``. (The gate and up
    products as one with their matrices side by side measured no faster in the bf16 step on XLA:CPU, 0.953x
    against 0.965x of the step before ``gather_rows`` in one process, 2026-12-01: the concatenation and split
    cost what the wider GEMM saves.)"""
    if matmul_dtype != "float8":
        return block_swiglu(blocks, w_gate, w_up, w_down, owner, used)
    hidden = swiglu_hidden(fp8_batched_matmul(blocks, w_gate[owner]), fp8_batched_matmul(blocks, w_up[owner]))
    return fp8_batched_matmul(hidden, w_down[owner])  # blocks past ``used`` hold zero rows: their output is zero


# ----------------------------------------------------------------------------------------------------------
# Expert parallelism


def _sharded_block(
    cfg: LlamaConfig, layer: dict[str, Any], x: jax.Array, context, matmul_dtype: str = "default"
) -> tuple[Any, RouterStats]:
    """The layer per device under ``shard_map``: each device routes its own tokens (tokens are independent, so
    no sort or capacity spans devices) and, with an expert axis of size > 1, exchanges them with the devices
    holding their experts. The router statistics are summed over the batch's mesh axes."""
    ep = context.mesh.shape.get(EXPERT_AXIS, 1)
    if cfg.num_experts % ep:
        raise ValueError(
            f"LlamaConfig.num_experts ({cfg.num_experts}) does not divide over the mesh's expert axis ({ep} devices)"
        )
    if ep > 1 and partition_spec((EXPERTS,), context.rules)[0] != EXPERT_AXIS:
        raise ValueError(
            f"the mesh has an expert axis of {ep} devices but the sharding rules do not put 'experts' on it "
            f"(rules {context.rules}); add ('experts', 'expert')"
        )
    batch_axes, seq_axes, _ = partition_spec((BATCH, SEQ, EMBED), context.rules)
    names = lambda axes: (axes,) if isinstance(axes, str) else tuple(axes or ())  # noqa: E731
    reduce_axes = names(batch_axes) + names(seq_axes)  # router statistics sum over every token's device
    x_spec = PartitionSpec(batch_axes, seq_axes, None)  # a sequence split over the context axis stays split
    expert_spec = PartitionSpec(EXPERT_AXIS if ep > 1 else None, None, None)
    method = "ragged" if dispatch_name(cfg, matmul_dtype) == "ragged" else "blocked"

    def per_device(x, router, w_gate, w_up, w_down):
        batch, seq, d = x.shape
        x2 = x.reshape(batch * seq, d)
        if ep == 1:
            local = {"router": router, "w_gate": w_gate, "w_up": w_up, "w_down": w_down}
            y, stats = _routed_experts(cfg, local, x2, matmul_dtype)
        else:
            logits, experts, weights = route(cfg, x2, router)
            w, weights, dropped = (w_gate, w_up, w_down), weights.astype(x.dtype), jnp.zeros((), jnp.int32)
            if cfg.capacity_factor is None:
                y = _exchange_and_compute(x2, experts, weights, w, ep, method, matmul_dtype)
            else:
                y, dropped = _capacity_dispatch(
                    x2, experts, weights, *w, capacity_factor=cfg.capacity_factor, matmul_dtype=matmul_dtype, ep=ep
                )
            stats = router_stats(logits, experts, dropped)
        if reduce_axes:
            stats = jax.tree.map(lambda s: jax.lax.psum(s, reduce_axes), stats)
        return y.reshape(batch, seq, d), stats

    stats_spec = RouterStats(*(PartitionSpec(),) * len(RouterStats._fields))
    fn = jax.shard_map(
        per_device,
        mesh=context.mesh,
        in_specs=(x_spec, PartitionSpec(), expert_spec, expert_spec, expert_spec),
        out_specs=(x_spec, stats_spec),
        check_vma=False,
    )
    return fn(x, layer["router"], layer["w_gate"], layer["w_up"], layer["w_down"])


def _exchange_and_compute(x, experts, weights, w, ep: int, method: str, matmul_dtype: str = "default") -> jax.Array:
    """One device's tokens x [tokens, embed] with their global expert choices, through experts that live
    ``experts / ep`` per device on the ``expert`` axis (this device holds ``w``'s local experts)."""
    tokens, k = experts.shape
    n, local, d = tokens * k, w[0].shape[0], x.shape[-1]
    flat = experts.reshape(-1)
    order = jnp.argsort(flat, stable=True)
    sorted_experts = flat[order]
    dest = sorted_experts // local  # the device holding each (sorted) assignment's expert, non-decreasing
    counts = jnp.bincount(dest, length=ep)
    position = jnp.arange(n) - (jnp.cumsum(counts) - counts)[dest]
    # Worst-case buffers: any one peer may receive all n assignments. Unused rows carry expert id ``local``.
    send_slot = (dest * n + position).astype(jnp.int32)  # each sorted assignment's row of the [ep * n] buffer
    slot = jnp.zeros(n, jnp.int32).at[order].set(send_slot)  # each assignment's row
    filled_by = jnp.full(ep * n, n, jnp.int32).at[send_slot].set(order.astype(jnp.int32))  # n: empty
    send_x = gather_rows(x, filled_by // k, slot.reshape(tokens, k)).reshape(ep, n, d)
    send_e = jnp.full((ep, n), local, jnp.int32).at[dest, position].set(sorted_experts % local)
    recv_x = jax.lax.all_to_all(send_x, EXPERT_AXIS, 0, 0, tiled=True).reshape(ep * n, d)
    recv_e = jax.lax.all_to_all(send_e, EXPERT_AXIS, 0, 0, tiled=True).reshape(ep * n)
    out = _grouped_swiglu(recv_x, recv_e, *w, method, matmul_dtype).reshape(ep, n, d)  # padding rows: zero
    back = jax.lax.all_to_all(out, EXPERT_AXIS, 0, 0, tiled=True)  # [ep, n, embed]: results of what we sent
    results = gather_rows(back.reshape(ep * n, d), slot, filled_by[:, None]).reshape(tokens, k, d)
    return _combine(results, weights)
