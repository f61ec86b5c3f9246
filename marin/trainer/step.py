"""The train state and the one jitted step that updates it.

    state = init_state(model_cfg, optimizer, key, ema=False)    # TrainState(step=0, params, opt_state, ...)
    train_step = make_train_step(model_cfg, optimizer, schedule, StepConfig(num_microbatches=4))
    state, metrics = train_step(state, batch)                   # batch leaves [batch, seq]; state donated

``state.step`` counts completed updates: after the call above it is 1, and the batch it consumed was
the loader's ``batch(0)``. The step splits the batch into microbatches, sums loss and gradients over
them with ``lax.scan`` (sums, so 4 x 8 rows give the same update as 1 x 32 up to float rounding), divides
once by the number of target tokens, clips, applies AdamW and returns metrics as device arrays (no host
sync here; the loop fetches them in one place).

Precision: parameters and optimizer moments live in ``param_dtype`` (fp32); the forward and backward
pass run in ``compute_dtype`` (bf16 by default) on a cast copy, and logits, norms and the loss are fp32.
``matmul_dtype="float8"`` runs the blocks' projections in FP8 (``marin/trainer/model/fp8.py``), in the
train and the eval step alike.

Sharding (``mesh.py``): given a ``ShardingContext`` and the state's shardings (``state_shardings``), the
step is jitted with the state pinned to those shardings on the way in *and* out (so the donated input
buffers are reused for the output) and the batch split over its batch axis, and it is traced under
``use_sharding`` so the model's ``constrain`` calls pin activations; gradients are constrained to the
parameters' shardings (under FSDP the gradient all-reduce becomes a reduce-scatter). Without a context
the step is the plain single-device program.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.flatten_util import ravel_pytree

from marin.trainer.axes import BATCH, SEQ, ShardingContext, constrain, use_sharding
from marin.trainer.mesh import optimizer_state_shardings, tree_shardings
from marin.trainer.model import MATMUL_DTYPES, LlamaConfig, init_params, next_token_loss, param_axes, training_loss
from marin.trainer.optim import Schedule, schedule_free_eval_params, update_ema

_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}


@dataclasses.dataclass(frozen=True, kw_only=True)
class PrecisionPolicy:
    param_dtype: str = "float32"
    """Storage of parameters and optimizer state."""
    compute_dtype: str = "bfloat16"
    """Matmuls and activations of the forward and backward pass."""
    matmul_dtype: str = "default"
    """The blocks' projections (q/k/v/o, gate/up/down): "default" multiplies in ``compute_dtype``; "float8"
    quantizes their operands to FP8 with per-tensor scales, accumulates in fp32 and returns
    ``compute_dtype`` (``marin/trainer/model/fp8.py``). Norms, embeddings, attention, the lm_head and the
    loss are unaffected. Faster only on GPUs with FP8 tensor cores (H100/H200); XLA:CPU emulates it."""

    def __post_init__(self):
        for name in ("param_dtype", "compute_dtype"):
            if getattr(self, name) not in _DTYPES:
                raise ValueError(
                    f"PrecisionPolicy.{name} must be one of {sorted(_DTYPES)}, got {getattr(self, name)!r}"
                )
        if self.matmul_dtype not in MATMUL_DTYPES:
            raise ValueError(f"PrecisionPolicy.matmul_dtype must be one of {MATMUL_DTYPES}, got {self.matmul_dtype!r}")

    @property
    def param(self) -> Any:
        return _DTYPES[self.param_dtype]

    @property
    def compute(self) -> Any:
        return _DTYPES[self.compute_dtype]

    def cast_for_compute(self, params: Any) -> Any:
        return jax.tree.map(lambda p: p.astype(self.compute) if jnp.issubdtype(p.dtype, jnp.floating) else p, params)


@dataclasses.dataclass(frozen=True, kw_only=True)
class StepConfig:
    num_microbatches: int = 1
    """Split each batch into this many sequential microbatches (gradient accumulation)."""
    precision: PrecisionPolicy = dataclasses.field(default_factory=PrecisionPolicy)
    z_loss: float = 0.0
    """Weight of the z-loss ``logsumexp(logits)**2`` term (PaLM uses 1e-4)."""
    ema_decay: float | None = None
    schedule_free: bool = False
    """The state's average is schedule-free's ``x`` (read from the optimizer state), not an EMA."""
    loss_block: int | None = None
    """Compute the next-token loss this many positions at a time from the hidden states, with its gradient in
    the same pass (``model/chunked_loss.py``): the same loss to float rounding, never the whole logits.
    None: from the whole logits [batch, seq, vocab]."""

    def __post_init__(self):
        if self.loss_block is not None and self.loss_block < 1:
            raise ValueError(f"StepConfig.loss_block must be >= 1 or None, got {self.loss_block}")
        if self.num_microbatches < 1:
            raise ValueError(f"StepConfig.num_microbatches must be >= 1, got {self.num_microbatches}")
        if self.z_loss < 0:
            raise ValueError(f"StepConfig.z_loss must be >= 0, got {self.z_loss}")


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class TrainState:
    step: jax.Array  # int32 scalar: completed updates
    params: Any
    opt_state: Any
    ema: Any  # None unless averaged parameters are kept: the EMA, or schedule-free's x (schedule_free_eval_params)
    rng: jax.Array  # uint32 [2]: raw PRNG key data, split once per step (for stochastic extensions)


def next_average(step_cfg: StepConfig, previous: Any, params: Any, opt_state: Any) -> Any:
    """The state's averaged parameters after an update (None if the state keeps none): the EMA moved towards
    the new parameters, or schedule-free's ``x`` (``schedule_free_eval_params``, the public way to get it)."""
    if previous is None:
        return None
    if step_cfg.schedule_free:
        return schedule_free_eval_params(opt_state, params)
    return update_ema(previous, params, step_cfg.ema_decay)


def init_state(
    cfg: LlamaConfig, optimizer: optax.GradientTransformation, key: jax.Array, *, ema: bool, policy: PrecisionPolicy
) -> TrainState:
    """A fresh state; ``key`` seeds the parameters and the state's own PRNG stream."""
    param_key, state_key = jax.random.split(key)
    params = init_params(cfg, param_key, dtype=policy.param)
    return TrainState(
        step=jnp.zeros((), jnp.int32),
        params=params,
        opt_state=optimizer.init(params),
        ema=jax.tree.map(jnp.copy, params) if ema else None,
        rng=jax.random.key_data(state_key),
    )


def state_shardings(
    context: ShardingContext,
    cfg: LlamaConfig,
    optimizer: optax.GradientTransformation,
    *,
    ema: bool,
    policy: PrecisionPolicy,
) -> TrainState:
    """A ``TrainState`` whose leaves are the ``NamedSharding`` of each state leaf under ``context``:
    parameters (and the EMA) by their logical axes and the rules, optimizer moments like their
    parameters, and the step, PRNG key and optimizer counters replicated."""
    shapes = jax.eval_shape(lambda key: init_state(cfg, optimizer, key, ema=ema, policy=policy), jax.random.PRNGKey(0))
    params = tree_shardings(context, param_axes(cfg), shapes.params)
    replicated = context.sharding(())
    opt_state = optimizer_state_shardings(context, optimizer, shapes.opt_state, shapes.params, params)
    return TrainState(step=replicated, params=params, opt_state=opt_state, ema=params if ema else None, rng=replicated)


def accumulate_gradients(grad_fn, params, batch: dict, num_microbatches: int):
    """Summed values and summed gradients over sequential microbatches.

    ``grad_fn(params, microbatch) -> (sums, grads)``, ``sums`` a tuple such as ``(loss_sum, weight)`` (any
    pytrees of arrays); returns ``(*sums, grads)``. Summing (rather than averaging per microbatch) makes the
    result independent of the split, up to float addition order.
    """
    n = num_microbatches
    # [batch, seq] -> [microbatches, batch / microbatches, seq]; on a mesh each microbatch is split over the
    # batch shards (rows of the sharded batch move once per step, so every device works on every microbatch)
    micro = jax.tree.map(lambda x: constrain(x.reshape(n, x.shape[0] // n, *x.shape[1:]), (None, BATCH, SEQ)), batch)
    first = jax.tree.map(lambda x: x[0], micro)
    if n == 1:
        sums, grads = grad_fn(params, first)
        return (*sums, grads)

    def add_microbatch(carry, mb):
        return jax.tree.map(jnp.add, carry, grad_fn(params, mb)), None

    zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), jax.eval_shape(grad_fn, params, first))
    sums, grads = jax.lax.scan(add_microbatch, zeros, micro)[0]
    return (*sums, grads)


LossFn = Callable[[Any, dict, Any], tuple[jax.Array, jax.Array, dict[str, jax.Array]]]
"""A training objective other than next-token loss: ``(params in compute dtype, microbatch, frozen) ->
(summed loss, summed weight, {metric: summed value})``. The step divides the loss, the gradients and every
metric by the summed weight (targets for a language model, pairs for DPO), so microbatches add up exactly;
``frozen`` is the step's third argument (a frozen reference model's parameters), never differentiated."""


def make_train_step(
    cfg: LlamaConfig,
    optimizer: optax.GradientTransformation,
    schedule: Schedule,
    step_cfg: StepConfig,
    *,
    context: ShardingContext | None = None,
    shardings: TrainState | None = None,
    loss_fn: LossFn | None = None,
    with_frozen: bool = False,
    exchange_across_processes: Exchange | None = None,
) -> Callable[..., tuple[TrainState, dict]]:
    """The jitted update ``(state, batch) -> (state, metrics)``; the input state's buffers are donated.

    ``exchange_across_processes`` (``TrainerConfig.host_processes``): the batch is this process's rows. The
    step becomes two programs: the first returns this process's loss sums, token count, metrics and
    gradients as one float32 vector; the exchange returns every process's vector as a ``[processes, n]``
    array in rank order (``host_parallel.SharedMemorySum``); the second sums those rows in rank order and
    updates (the same bits on every process). No host callback sits inside a program: XLA:CPU's callbacks
    copied the vector in and out (~3 ms of an 18 ms step), and a program holding one is never written to
    the persistent compilation cache.

    With ``context`` (and the ``shardings`` of ``state_shardings``) the step runs SPMD on its mesh; the
    state must already be placed with ``shardings`` and the batch may be host arrays or placed ones.
    ``loss_fn`` replaces the next-token loss (``LossFn``); ``with_frozen`` makes the step
    ``(state, batch, frozen) -> (state, metrics)``, ``frozen`` parameter-shaped and placed like the parameters."""
    if (context is None) != (shardings is None):
        raise ValueError("make_train_step: pass both context and shardings, or neither")
    policy = step_cfg.precision
    axes = param_axes(cfg)

    def compute_loss(params, micro, frozen):
        params = policy.cast_for_compute(params)
        if loss_fn is not None:
            loss_sum, weight, sums = loss_fn(params, micro, frozen)
            return loss_sum, (weight, sums)
        loss_sum, weight, sums = training_loss(
            cfg, params, micro, z_loss=step_cfg.z_loss, matmul_dtype=policy.matmul_dtype, loss_block=step_cfg.loss_block
        )
        return loss_sum, (weight, sums)

    def gradients(state: TrainState, batch: dict, frozen: Any = None) -> tuple:
        """``(loss_sum, weight, sums, grads)`` of ``batch``: sums over its tokens, not yet divided."""

        def grad_fn(params, micro):
            (loss_sum, (weight, sums)), grads = jax.value_and_grad(compute_loss, has_aux=True)(params, micro, frozen)
            return (loss_sum, weight, sums), _constrain_like_params(grads, axes)

        return accumulate_gradients(grad_fn, state.params, batch, step_cfg.num_microbatches)

    def update(state: TrainState, loss_sum, weight, sums, grads) -> tuple[TrainState, dict]:
        denom = jnp.maximum(weight, 1.0)  # a fully masked batch gives zero gradients, not NaN
        grads = jax.tree.map(lambda g: (g / denom).astype(g.dtype), grads)
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        ema = next_average(step_cfg, state.ema, params, opt_state)
        rng, _ = jax.random.split(jax.random.wrap_key_data(state.rng))
        new_state = TrainState(state.step + 1, params, opt_state, ema, jax.random.key_data(rng))
        metrics = {
            "loss": loss_sum / denom,
            "grad_norm": optax.global_norm(grads),
            "learning_rate": schedule(state.step),
            "tokens": weight,
            **{name: value / denom for name, value in sums.items()},
        }
        return new_state, metrics

    def train_step(state: TrainState, batch: dict, frozen: Any = None) -> tuple[TrainState, dict]:
        return update(state, *gradients(state, batch, frozen))

    if exchange_across_processes is not None:
        if context is not None or with_frozen:
            raise ValueError("make_train_step: exchange_across_processes runs one device per process, no frozen tree")
        return _exchanging_step(gradients, update, exchange_across_processes)
    step = train_step if with_frozen else lambda state, batch: train_step(state, batch)
    if context is None:
        return jax.jit(step, donate_argnums=0)
    # Out shardings equal in shardings: XLA can only reuse a donated buffer for an output of the same
    # sharding. Metrics are scalars, replicated.
    frozen = (shardings.params,) if with_frozen else ()
    return _jit_sharded(
        step,
        context,
        in_shardings=(shardings, context.sharding((BATCH, SEQ)), *frozen),
        out_shardings=(shardings, context.sharding(())),
        donate_argnums=0,
    )


class Exchange(Protocol):
    """Every process's float32 vector, in rank order (``host_parallel.SharedMemorySum``), and word between the
    processes that a program is compiled (into the group's compilation cache)."""

    rank: int
    world: int

    def contributions(self, vector: np.ndarray) -> np.ndarray:
        """``[world, len(vector)]``: this process's ``vector`` is row ``rank``."""
        ...

    def announce(self, program: int) -> None:
        """Tell the others that ``program`` is compiled."""
        ...

    def await_announcement(self, program: int, what: str) -> None:
        """Wait until some process announced ``program`` (``what`` names it in a timeout's error)."""
        ...


_GRADIENTS, _UPDATE = 0, 1  # the exchanging step's programs, as announced between processes


def _exchanging_step(gradients: Callable, update: Callable, exchange: Exchange) -> Callable:
    """``(state, batch) -> (state, metrics)`` as two programs with ``exchange`` between them (make_train_step).

    Each program is compiled once per group: on the first step rank 0 compiles the gradient program while
    rank 1 (which starts ~3 s later, a fresh interpreter) compiles the update program; each then loads the
    other's from the group's compilation cache (``host_parallel``), and further ranks load both. On the
    baby Shakespeare model that is ~2.7 s + ~1 s of compile done side by side instead of one after the other
    on the latest rank. Without a shared cache a waiting rank compiles the program itself (only slower)."""
    layout: dict[str, Any] = {}  # how the vector unravels: set when ``contribution`` is traced
    compiled: list = []  # ``apply``, compiled for this run's state and block

    @jax.jit
    def contribution(state: TrainState, batch: dict) -> jax.Array:
        tree = gradients(state, batch)
        flat, layout["unravel"] = ravel_pytree(jax.tree.map(lambda leaf: leaf.astype(jnp.float32), tree))
        layout["dtypes"] = jax.tree.map(lambda leaf: leaf.dtype, tree)
        return flat

    @functools.partial(jax.jit, donate_argnums=0)
    def apply(state: TrainState, everyone: jax.Array) -> tuple[TrainState, dict]:
        total = everyone[0]
        for rank in range(1, everyone.shape[0]):  # rank order: every process adds the same way
            total = total + everyone[rank]
        tree = jax.tree.map(lambda leaf, dtype: leaf.astype(dtype), layout["unravel"](total), layout["dtypes"])
        return update(state, *tree)

    def compile_update(state: TrainState, batch: dict) -> None:
        size = jax.eval_shape(contribution, state, batch).shape[0]  # traces it: the layout
        block = jax.ShapeDtypeStruct((exchange.world, size), jnp.float32)
        compiled.append(apply.lower(state, block).compile())

    def first_programs(state: TrainState, batch: dict) -> None:
        if exchange.rank == 0:
            jax.block_until_ready(contribution(state, batch))  # compiles it; the vector is recomputed below
            exchange.announce(_GRADIENTS)
        elif exchange.rank == 1:
            compile_update(state, batch)
            exchange.announce(_UPDATE)
        if exchange.rank != 0:
            exchange.await_announcement(_GRADIENTS, "the gradient program")
        if exchange.rank != 1:
            exchange.await_announcement(_UPDATE, "the update program")
        if not compiled:
            compile_update(state, batch)

    def step(state: TrainState, batch: dict) -> tuple[TrainState, dict]:
        if not compiled:
            first_programs(state, batch)
        mine = np.asarray(contribution(state, batch))  # waits for the program; a view of its output
        # The block is a 64-byte-aligned host array: the program reads it in place (no copy; 25 us a call,
        # against 115 through jax.device_put(..., may_alias=True)).
        return compiled[0](state, exchange.contributions(mine))

    return step


def make_eval_step(
    cfg: LlamaConfig,
    policy: PrecisionPolicy,
    *,
    context: ShardingContext | None = None,
    param_shardings: Any = None,
    loss_block: int | None = None,
) -> Callable[[Any, dict], tuple[jax.Array, jax.Array]]:
    """Jitted ``(params, batch) -> (summed loss, number of targets)`` for held-out data."""

    def eval_step(params, batch):
        params = policy.cast_for_compute(params)
        return next_token_loss(cfg, params, batch, matmul_dtype=policy.matmul_dtype, loss_block=loss_block)

    if context is None:
        return jax.jit(eval_step)
    return _jit_sharded(
        eval_step,
        context,
        in_shardings=(param_shardings, context.sharding((BATCH, SEQ))),
        out_shardings=context.sharding(()),
    )


def _jit_sharded(fn: Callable, context: ShardingContext, **jit_kwargs) -> Callable:
    def traced(*args):
        with use_sharding(context):  # entered while jit traces ``fn``: ``constrain`` becomes a sharding constraint
            return fn(*args)

    return jax.jit(traced, **jit_kwargs)


def _constrain_like_params(tree: Any, axes: Any) -> Any:
    """Pin a parameter-shaped tree (gradients) to the parameters' shardings; a no-op off the mesh."""
    return jax.tree.map(lambda a, x: constrain(x, a), axes, tree, is_leaf=lambda a: isinstance(a, tuple))
