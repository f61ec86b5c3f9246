"""The training loop: load-or-init, then for each step: batch, step, hooks.

    result = train(TrainLmConfig(output_path="/tmp/run", model=model_preset("nano"), data=..., trainer=...))

Resuming is the default path: if ``<output_path>/checkpoints`` holds a checkpoint, training continues
from its step with the very batches it would have seen (batches are a function of the step), so a run
killed anywhere and restarted ends bitwise identical to one never interrupted.

Hooks run after update ``step`` (counting completed updates) when ``step % every == 0`` and after the
last update: ``log_every`` flushes metrics (the one place the host waits for the device), ``eval_every``
evaluates every validation set, and the checkpoint hook saves when a checkpoint is due. A non-finite loss
stops training with ``NonFiniteLoss`` naming the step, before any checkpoint of the bad state is written.

Parallelism is ``TrainerConfig.mesh`` and ``TrainerConfig.sharding`` (``mesh.py``): on a mesh of more than
one device the state is created, restored and kept in its shardings, and each batch is split over the
batch axis as the prefetcher builds it. On one device nothing of that exists and the loop is unchanged.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import logging
import math
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from marin.allocator import keep_large_buffers_mapped
from marin.identity import result_dict, runtime_field
from marin.multihost import coordinates
from marin.storage import join
from marin.trainer import distributed, host_parallel
from marin.trainer.attention.context import check_sequence_split
from marin.trainer.axes import ShardingContext
from marin.trainer.checkpoint import (
    CheckpointConfig,
    Checkpointer,
    NoUsableCheckpoint,
    check_optimizer,
    restore_params,
)
from marin.trainer.data import DataConfig, Prefetcher, TrainBatches, eval_batches
from marin.trainer.mesh import MeshConfig, ShardingSpec, batch_shards, resolve_rules, shard_batch, sharding_context
from marin.trainer.model import LlamaConfig, param_axes
from marin.trainer.model.hf import check_same_model, import_hf, is_hf_directory
from marin.trainer.optim import OptimizerConfig
from marin.trainer.step import (
    LossFn,
    PrecisionPolicy,
    StepConfig,
    TrainState,
    init_state,
    make_eval_step,
    make_train_step,
    state_shardings,
)
from marin.trainer.tracking import Tracker, TrackerConfig, peak_flops_per_device

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainerConfig:
    """What a run computes, then how it runs (``runtime_field``s: never part of a step's identity)."""

    num_train_steps: int
    batch_size: int
    """Sequences per optimizer step (all devices together)."""
    precision: PrecisionPolicy = dataclasses.field(default_factory=PrecisionPolicy)
    z_loss: float = 0.0
    seed: int = 0
    """Seeds parameter init and the state's PRNG (the data has its own seed in DataConfig)."""
    max_eval_sequences: int = 256
    """Sequences evaluated per validation set, from its start."""

    num_microbatches: int = runtime_field(1)
    """Gradient accumulation: the batch runs as this many sequential microbatches (losses and gradients
    are sums, so the update equals one batch's to float rounding)."""
    loss_block: int | None = runtime_field(None)
    """Compute the loss this many positions at a time (``StepConfig.loss_block``): the logits are never whole,
    the result is the same to float rounding. None: from the whole logits."""
    log_every: int = runtime_field(10)
    eval_every: int | None = runtime_field(None)
    """Evaluate the validation sets every this many steps (and after the last); None: only at the end."""
    eval_batch_size: int | None = runtime_field(None)
    """Defaults to batch_size."""
    checkpoint: CheckpointConfig = runtime_field(default_factory=CheckpointConfig)
    tracker: TrackerConfig = runtime_field(default_factory=TrackerConfig)
    mesh: MeshConfig = runtime_field(default_factory=MeshConfig)
    """Device mesh (data, fsdp, tensor sizes); the default puts every device on fsdp."""
    sharding: ShardingSpec = runtime_field("fsdp")
    """Rule table mapping logical axes to mesh axes: a preset ("dp", "fsdp", "tp", "fsdp_tp") or explicit
    pairs such as ``(("batch", ("data", "fsdp")), ("embed", "fsdp"))``. See ``marin/trainer/mesh.py``."""
    host_processes: int = runtime_field(1)
    """CPU only: train as this many processes on this machine, each on its share of the cores and of each
    batch's rows, gradients summed through shared memory (``host_parallel.py``); 1: one process."""

    def __post_init__(self):
        resolve_rules(self.sharding, field="TrainerConfig.sharding")
        hosts = self.host_processes
        if not isinstance(hosts, int) or isinstance(hosts, bool) or not 1 <= hosts <= host_parallel.MAX_PROCESSES:
            raise ValueError(
                f"TrainerConfig.host_processes must be an int in 1..{host_parallel.MAX_PROCESSES}, got {hosts!r}"
            )
        if self.loss_block is not None and self.loss_block < 1:
            raise ValueError(f"TrainerConfig.loss_block must be >= 1 or None, got {self.loss_block}")
        for name in ("num_train_steps", "batch_size", "log_every", "max_eval_sequences"):
            if getattr(self, name) <= 0:
                raise ValueError(f"TrainerConfig.{name} must be > 0, got {getattr(self, name)}")
        if self.batch_size % self.num_microbatches:
            raise ValueError(
                f"TrainerConfig.batch_size ({self.batch_size}) must be a multiple of num_microbatches "
                f"({self.num_microbatches})"
            )
        if self.batch_size % (hosts * self.num_microbatches):
            raise ValueError(
                f"TrainerConfig.batch_size ({self.batch_size}) must split into host_processes ({hosts}) x "
                f"num_microbatches ({self.num_microbatches}) equal parts"
            )
        if self.eval_every is not None and self.eval_every <= 0:
            raise ValueError(f"TrainerConfig.eval_every must be > 0 or None, got {self.eval_every}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunConfig:
    """What every training run has: where it writes, the model, the trainer and the optimizer; what it
    minimizes is ``TrainLmConfig``'s data (next-token loss) or an ``Objective`` (post-training)."""

    output_path: str
    model: LlamaConfig
    trainer: TrainerConfig
    optimizer: OptimizerConfig = dataclasses.field(default_factory=OptimizerConfig)
    initialize_from: str | None = None
    """Another run's output directory: a fresh run starts from its newest parameters (its EMA if it kept
    one) with a new optimizer state and step 0, as Tootsie's phase 2 and cooldown started from the phase
    before. Ignored once this run has checkpoints of its own (resuming takes precedence)."""

    def __post_init__(self):
        if not self.output_path:
            raise ValueError(f"{type(self).__name__}.output_path must be set")


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainLmConfig(RunConfig):
    """Everything one language-model training run needs; ``output_path`` receives checkpoints and logs."""

    data: DataConfig


@dataclasses.dataclass(frozen=True)
class Objective:
    """What the loop minimizes when it is not next-token loss on ``TrainLmConfig.data`` (``marin.posttrain``).

    The loop's contract is unchanged: batches are a function of the step (so resume is bitwise), hooks
    run as for pretraining, checkpoints hold the policy's state only."""

    loss_fn: LossFn | None
    """The loss (``marin.trainer.step.LossFn``); None: next-token loss."""
    make_batch: Callable[[int], dict]
    """Step -> that step's host batch: leaves with a leading dimension each microbatch split divides."""
    tokens_per_step: int
    """Token positions one step processes (for tokens/s and MFU)."""
    evaluate: Callable[[Any, Any], dict[str, float]] | None = None
    """``(params, frozen) -> metrics`` for the eval hook (``eval_every`` and after the last step)."""
    frozen: Any = None
    """Parameters the loss reads and never updates (a frozen reference model): host arrays, placed by the loop."""
    prefetch: int = 2
    """Batches built ahead of the step on a background thread."""


class NonFiniteLoss(FloatingPointError):
    """The training loss became NaN or infinite."""


@dataclasses.dataclass(frozen=True)
class TrainResult:
    step: int
    """Completed updates (== num_train_steps after a full run)."""
    train_loss: float
    eval_metrics: dict[str, float]
    state: TrainState


@dataclasses.dataclass
class Hook:
    every: int | None
    fn: Callable[[int], None]

    def due(self, step: int, last: int) -> bool:
        return step == last or (self.every is not None and step % self.every == 0)


class _MetricsBuffer:
    """Per-step metrics stay on the device until ``flush``: the single host sync of the loop."""

    def __init__(self, tracker: Tracker, tokens_per_step: int, flops_per_token: float, peak: float | None):
        self.tracker, self.tokens_per_step = tracker, tokens_per_step
        self.flops_per_token, self.peak = flops_per_token, peak
        self.pending: list[tuple[int, dict]] = []
        self.last_loss = math.nan
        self._clock = time.perf_counter()

    def add(self, step: int, metrics: dict) -> None:
        self.pending.append((step, metrics))

    def pause(self) -> None:
        """Exclude the time of eval and checkpoint hooks from tokens/s."""
        self._clock = time.perf_counter()

    def flush(self) -> None:
        if not self.pending:
            return
        host = jax.device_get([m for _, m in self.pending])  # waits for the last step: the one sync point
        elapsed = time.perf_counter() - self._clock
        tokens_per_s = len(self.pending) * self.tokens_per_step / elapsed
        for (step, _), values in zip(self.pending, host):
            loss = float(values["loss"])
            if not math.isfinite(loss):
                raise NonFiniteLoss(
                    f"training loss is {loss} at step {step} (the update consuming batch {step}); stopping"
                )
            record = {f"train/{k}": float(v) for k, v in values.items() if k != "tokens"}
            # cumulative, so runs of different batch, length or size compare by tokens and compute
            record["throughput/total_tokens"] = (step + 1) * self.tokens_per_step
            record["throughput/total_flops"] = (step + 1) * self.tokens_per_step * self.flops_per_token
            self.tracker.log(step + 1, record)
            self.last_loss = loss
        throughput = {"throughput/tokens_per_s": tokens_per_s}
        if self.peak:
            throughput["throughput/mfu"] = tokens_per_s * self.flops_per_token / self.peak
        self.tracker.log(self.pending[-1][0] + 1, throughput)
        self.tracker.progress(self.pending[-1][0] + 1, self.last_loss, tokens_per_s)
        self.pending.clear()
        self._clock = time.perf_counter()


def load_or_init(
    config: RunConfig, optimizer, checkpointer: Checkpointer, shardings: TrainState | None = None
) -> TrainState:
    """The newest checkpoint's state, else a fresh one; with ``shardings`` every leaf is placed in them
    (whatever mesh wrote the checkpoint)."""
    trainer = config.trainer
    key = jax.random.PRNGKey(trainer.seed)
    fresh = fresh_state(config, optimizer, shardings)
    template = jax.eval_shape(fresh, key)
    if shardings is not None:
        template = jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), template, shardings)
    check_optimizer(checkpointer.base, config.optimizer.kind)
    try:
        restored = checkpointer.restore_latest(template)
    except NoUsableCheckpoint as e:
        if not trainer.checkpoint.restart_if_unusable:
            raise
        logger.warning("starting over from step 0 (CheckpointConfig.restart_if_unusable): %s", e)
        restored = None
    if restored is None and config.initialize_from:
        state = fresh(key)
        params, step = initial_params(config.initialize_from, config.model, state.params)
        logger.info("initialising parameters from %s (step %s)", config.initialize_from, step)
        params = jax.tree.map(lambda p, like: _as_leaf_like(p, like, shardings is not None), params, state.params)
        ema = jax.tree.map(jnp.copy, params) if state.ema is not None else None
        # a state built from the loaded parameters (schedule-free's z starts at them, not at the seed's)
        init_opt = optimizer.init if shardings is None else jax.jit(optimizer.init, out_shardings=shardings.opt_state)
        return dataclasses.replace(state, params=params, opt_state=init_opt(params), ema=ema)
    if restored is None:
        logger.info("no checkpoint under %s: initialising from seed %d", checkpointer.base, trainer.seed)
        return fresh(key)
    state, step = restored
    logger.info("resuming from step %d", step)
    return state


def fresh_state(config: RunConfig, optimizer, shardings: TrainState | None = None) -> Callable[[jax.Array], TrainState]:
    """``key -> TrainState``: a run's fresh state, created in its shardings when it has them."""

    def init(key):  # eager: per-leaf programs are cached across runs in one process (see init_params)
        policy = config.trainer.precision
        return init_state(config.model, optimizer, key, ema=config.optimizer.keeps_average, policy=policy)

    if shardings is None:
        return init
    # One program that creates each leaf directly in its shards: no device ever holds a whole unsharded leaf
    # (an 8B model's stacked MLP weights alone are 7.5 GB). Threefry draws are partitionable, so the values are
    # those of the single-device init.
    return jax.jit(init, out_shardings=shardings)


@dataclasses.dataclass(frozen=True)
class RunLayout:
    """What a run's programs are built from: its optimizer, step options, mesh and the state's shardings."""

    optimizer: Any
    """The built ``optax.GradientTransformation``."""
    step: StepConfig
    context: ShardingContext | None
    """None on one device: the unsharded program."""
    shardings: TrainState | None


def run_layout(config: RunConfig, devices: Sequence[jax.Device] | None = None, *, sharded: bool = False) -> RunLayout:
    """The optimizer, step options, mesh (over ``devices``, by default ``jax.devices()``) and state shardings of
    ``config``; ``sharded``: a context even on one device (compiling for a one-chip TPU ahead of time)."""
    model, trainer = config.model, config.trainer
    optimizer = config.optimizer.build(trainer.num_train_steps, param_axes(model))
    step_cfg = StepConfig(
        num_microbatches=trainer.num_microbatches,
        precision=trainer.precision,
        z_loss=trainer.z_loss,
        ema_decay=config.optimizer.ema_decay,
        schedule_free=config.optimizer.schedule_free,
        loss_block=trainer.loss_block,
    )
    context = sharding_context(trainer.mesh, trainer.sharding, devices)
    if context is None and sharded:
        context = ShardingContext(trainer.mesh.build(devices), resolve_rules(trainer.sharding))
    check_sequence_split(model.seq_len, context, what="LlamaConfig.seq_len")
    shardings = None
    if context is not None:
        ema = config.optimizer.keeps_average
        shardings = state_shardings(context, model, optimizer, ema=ema, policy=trainer.precision)
    return RunLayout(optimizer, step_cfg, context, shardings)


def train_step_of(
    config: RunConfig, layout: RunLayout, objective: Objective | None = None, exchange: Any = None
) -> Callable[..., tuple[TrainState, dict]]:
    """The run's jitted update (``make_train_step``) for ``objective`` (None: next-token loss)."""
    return make_train_step(
        config.model,
        layout.optimizer,
        config.optimizer.lr_schedule(config.trainer.num_train_steps),
        layout.step,
        context=layout.context,
        shardings=layout.shardings,
        loss_fn=objective.loss_fn if objective is not None else None,
        with_frozen=objective is not None and objective.frozen is not None,
        exchange_across_processes=exchange,
    )


def eval_step_of(config: RunConfig, layout: RunLayout) -> Callable[[Any, dict], tuple[jax.Array, jax.Array]]:
    """The run's jitted held-out loss (``make_eval_step``)."""
    return make_eval_step(
        config.model,
        config.trainer.precision,
        context=layout.context,
        param_shardings=layout.shardings.params if layout.shardings else None,
        loss_block=config.trainer.loss_block,
    )


def initial_params(path: str, model: LlamaConfig, template: Any) -> tuple[Any, int | None]:
    """Host parameters a run starts from (``initialize_from``) and their step: a training run's newest
    checkpoint (its average, if it kept one), or a Hugging Face checkpoint directory's weights (step None),
    whose architecture must be ``model``'s."""
    if is_hf_directory(path):
        found, params = import_hf(path)
        check_same_model(path, found, model)
        return params, None
    return restore_params(join(path, "checkpoints"), template)


def _as_leaf_like(host: np.ndarray, like: jax.Array, sharded: bool) -> jax.Array:
    if not sharded:
        return jnp.asarray(host, like.dtype)
    host = np.asarray(host, like.dtype)
    return jax.make_array_from_callback(host.shape, like.sharding, lambda index: host[index])


def _check_batches_fit(trainer: TrainerConfig, shards: int, evaluates: bool) -> None:
    """Every microbatch (and eval batch) must split evenly over the mesh's batch shards."""
    rows = trainer.batch_size // trainer.num_microbatches
    if rows % shards:
        raise ValueError(
            f"TrainerConfig.batch_size / num_microbatches = {trainer.batch_size} / {trainer.num_microbatches} = {rows} "
            f"rows per microbatch do not split over the {shards} batch shards of mesh {trainer.mesh}"
        )
    eval_rows = trainer.eval_batch_size or trainer.batch_size
    if evaluates and eval_rows % shards:
        raise ValueError(
            f"TrainerConfig.eval_batch_size ({eval_rows}) does not split over the {shards} batch shards of mesh "
            f"{trainer.mesh}"
        )


def evaluate(
    config: TrainLmConfig, eval_step, params, validation: dict, place: Callable[[dict], Any] = lambda b: b
) -> dict[str, float]:
    """Loss, perplexity and bits-per-byte (if the source knows its bytes) of every validation set; ``place``
    puts a host batch where ``eval_step`` expects it (on the mesh, when there is one)."""
    trainer, out = config.trainer, {}
    for name, source in validation.items():
        loss_sum = weight = 0.0
        for batch in eval_batches(
            source,
            seq_len=config.model.seq_len,
            batch_size=trainer.eval_batch_size or trainer.batch_size,
            max_sequences=trainer.max_eval_sequences,
        ):
            s, w = jax.device_get(eval_step(params, place(batch)))
            loss_sum, weight = loss_sum + float(s), weight + float(w)
        loss = loss_sum / max(weight, 1.0)
        out[f"eval/{name}/loss"] = loss
        out[f"eval/{name}/ppl"] = math.exp(min(loss, 700.0))
        if source.num_bytes:
            # nats/token -> bits/byte, using the source's average tokens per byte.
            out[f"eval/{name}/bpb"] = loss / math.log(2) * source.num_tokens / source.num_bytes
    return out


def tune_host_allocator(*, early_only: bool = False) -> None:
    """The trainer's malloc policy on CPU (``marin.allocator``), applied before this process starts JAX's
    runtime when it can tell the platform without starting it: applied after, it only partly holds (and
    warns). ``early_only``: do nothing once the runtime has started (the import of ``marin.trainer``)."""
    if _runtime_started():
        if not early_only and jax.default_backend() == "cpu":
            keep_large_buffers_mapped(late=True)
    elif _will_run_on_cpu():
        keep_large_buffers_mapped()


def _runtime_started() -> bool:
    """Whether this process has started JAX's runtime (its devices, its CPU thread pool) already."""
    try:
        from jax._src.xla_bridge import backends_are_initialized
    except ImportError:  # a JAX without it: assume nothing ran yet
        return False
    return backends_are_initialized()


def _will_run_on_cpu() -> bool:
    """Whether JAX's runtime will be the CPU, decided without starting it: ``jax_platforms`` if set, else
    whether no accelerator plugin (CUDA, ROCm, TPU) is installed."""
    platforms = jax.config.jax_platforms
    if platforms:
        return platforms.split(",")[0].strip() == "cpu"
    names = {(dist.metadata["Name"] or "").lower() for dist in importlib.metadata.distributions()}
    return not any(name.startswith(("jax-cuda", "jax-rocm", "jax_cuda", "libtpu")) for name in names)


def lm_objective(
    config: TrainLmConfig, layout: RunLayout, rows: slice | None = None, evaluates: bool = True
) -> Objective:
    """Next-token loss on ``config.data``'s mixture, evaluated on its validation sets (pretraining and SFT).

    ``rows``: this process's rows of every batch (``TrainerConfig.host_processes``); ``evaluates``: whether this
    process runs the evaluations."""
    model, trainer, context = config.model, config.trainer, layout.context
    sources = {name: src.build() for name, src in config.data.train.items()}
    validation = {name: src.build() for name, src in config.data.validation.items()} if evaluates else {}
    batches = TrainBatches(sources, config.data, seq_len=model.seq_len, batch_size=trainer.batch_size)
    make_batch, place = batches.batch, lambda batch: batch
    if rows is not None:
        make_batch = functools.partial(batches.batch, rows=rows)
    if context is not None:
        _check_batches_fit(trainer, batch_shards(context), evaluates=bool(validation))

        def make_batch(step: int) -> dict:  # runs on the prefetch thread: the transfer overlaps the step
            return shard_batch(context, lambda rows: batches.batch(step, rows), trainer.batch_size)

        def place(batch: dict) -> dict:
            return shard_batch(context, lambda rows: {k: v[rows] for k, v in batch.items()}, len(batch["input_ids"]))

    eval_step = eval_step_of(config, layout)
    run_eval = (lambda params, _: evaluate(config, eval_step, params, validation, place)) if validation else None
    return Objective(
        loss_fn=None,
        make_batch=make_batch,
        tokens_per_step=trainer.batch_size * model.seq_len,
        evaluate=run_eval,
        prefetch=config.data.prefetch,
    )


def train(config: RunConfig, objective: Objective | None = None) -> TrainResult:
    """Train ``config.model``: on ``TrainLmConfig.data`` by default, or on ``objective`` (post-training)."""
    hosts = config.trainer.host_processes
    if hosts > 1 and host_parallel.host_rank() == 0:
        _check_host_processes(config, objective)
        allowed = sorted(os.sched_getaffinity(0))
        cores = [host_parallel.cores_for(r, hosts, allowed) for r in range(hosts)]
        # Before JAX's runtime starts, so that its thread pool is sized for these cores; afterwards the caller
        # gets its cores back (a runtime started in here keeps its smaller pool).
        if _runtime_started():
            logger.warning(
                "TrainerConfig.host_processes=%d: JAX's runtime started before train(), its CPU thread pool sized "
                "for %d cores; rank 0 now runs it on %s (slower than a runtime started after pinning)",
                hosts,
                len(allowed),
                cores[0],
            )
        host_parallel.pin_to_cores(cores[0])
        try:
            with host_parallel.HostGroup(config, hosts, cores) as group:  # the helpers start now
                return _train(config, objective, group)
        finally:
            host_parallel.pin_to_cores(allowed)
    return _train(config, objective, None)


def run_host_helper(path: str) -> None:
    """A ``host_processes`` helper (started by ``host_parallel.HostGroup``, already pinned): train the config
    rank 0 pickled at ``path``, as the rank its environment names."""
    from marin.logs import configure_logging

    configure_logging()
    train(host_parallel.load_config(path))


def _train(config: RunConfig, objective: Objective | None, group: host_parallel.HostGroup | None) -> TrainResult:
    model, trainer, total = config.model, config.trainer, config.trainer.num_train_steps
    hosts, rank = trainer.host_processes, host_parallel.host_rank()
    tune_host_allocator()  # before anything below starts JAX's runtime
    distributed.initialize()  # a no-op unless the executor started this step on several hosts
    if rank == 0:  # the first use of the runtime: after rank 0 pinned itself (train())
        devices = jax.devices()
        logger.info(
            "training %s (%.1fM params) on %d x %s (%d processes%s) for %d steps into %s",
            type(model).__name__,
            model.param_count / 1e6,
            len(devices),
            devices[0].device_kind,
            jax.process_count(),
            f", {hosts} on this machine" if hosts > 1 else "",
            total,
            config.output_path,
        )
    if jax.default_backend() == "cpu":
        keep_large_buffers_mapped(late=True)  # a no-op if applied above; warns if only now
    layout = run_layout(config)  # context None on one device: the unsharded program
    context, shardings = layout.context, layout.shardings
    if context is not None and config.optimizer.kind == "soap" and jax.default_backend() == "cpu":
        raise ValueError(
            f"OptimizerConfig.kind='soap' on a CPU mesh of {context.mesh.size} devices: XLA:CPU deadlocks in "
            "SOAP's eigh/qr in a multi-device program (marin/trainer/soap.py); use a one-device mesh on a CPU"
        )
    summed = None
    if hosts > 1:
        if context is not None:
            raise ValueError(
                f"TrainerConfig.host_processes={hosts} runs one device per process; the mesh "
                f"{dict(context.mesh.shape)} has several: use one or the other"
            )
        # room for the gradients and a few loss sums (make_train_step's exchange)
        summed = group.open(model.param_count + 1024) if group is not None else host_parallel.helper_sum()
    if objective is None:
        part = trainer.batch_size // hosts
        rows = slice(rank * part, (rank + 1) * part) if hosts > 1 else None
        objective = lm_objective(config, layout, rows=rows, evaluates=rank == 0)
    elif context is not None and jax.process_count() > 1:
        raise ValueError("a custom training objective runs on one host for now (its batches are built whole)")
    train_step = train_step_of(config, layout, objective, exchange=summed)
    checkpointer = Checkpointer(
        join(config.output_path, "checkpoints"),
        trainer.checkpoint,
        metadata={"model": result_dict(model), "optimizer": config.optimizer.kind},
    )
    state = load_or_init(config, layout.optimizer, checkpointer, shardings)
    frozen = _place_frozen(objective.frozen, state.params) if objective.frozen is not None else None
    devices = hosts if hosts > 1 else context.mesh.size if context else 1
    try:
        return _run(config, objective, train_step, checkpointer, state, frozen, num_devices=devices)
    finally:
        if summed is not None and group is None:  # a helper's side; rank 0's closes with its group
            summed.close()


def _check_host_processes(config: RunConfig, objective: Objective | None) -> None:
    hosts = config.trainer.host_processes
    if objective is not None:
        raise ValueError(
            f"TrainerConfig.host_processes={hosts}: only pretraining's next-token objective splits over processes"
        )
    if not _will_run_on_cpu():
        raise ValueError(f"TrainerConfig.host_processes={hosts} is for CPUs; an accelerator uses its devices (mesh)")
    if coordinates(os.environ) is not None:
        raise ValueError(f"TrainerConfig.host_processes={hosts} cannot be combined with a multi-host job")


def _place_frozen(frozen: Any, like: Any) -> Any:
    """Frozen parameters on the devices, with the live parameters' dtypes and shardings."""
    sharded = not isinstance(jax.tree.leaves(like)[0].sharding, jax.sharding.SingleDeviceSharding)
    return jax.tree.map(lambda p, leaf: _as_leaf_like(np.asarray(p), leaf, sharded), frozen, like)


def _run(config: RunConfig, objective: Objective, train_step, checkpointer, state, frozen, num_devices: int):
    """The loop itself: for each step, batch, step, hooks."""
    model, trainer, total = config.model, config.trainer, config.trainer.num_train_steps
    start = int(state.step)
    tracker = Tracker(
        trainer.tracker,
        config.output_path,
        _as_dict(config),
        resume_step=start,
        total_steps=total,
        enabled=distributed.is_primary(),
    )
    peak = trainer.tracker.peak_flops_per_device or peak_flops_per_device()
    buffer = _MetricsBuffer(
        tracker, objective.tokens_per_step, model.flops_per_token(), peak * num_devices if peak else None
    )
    eval_metrics: dict[str, float] = {}
    step_args = (frozen,) if frozen is not None else ()

    def run_eval(step: int) -> None:
        buffer.flush()
        evaluated = state.params if state.ema is None else state.ema  # the averaged parameters, when kept
        eval_metrics.update(objective.evaluate(evaluated, frozen))
        tracker.log(step, eval_metrics)
        logger.info("step %d: %s", step, {k: round(v, 4) for k, v in eval_metrics.items()})
        buffer.pause()

    def save_checkpoint(step: int) -> None:
        kind = "permanent" if step == total else checkpointer.due(step)  # the same on every process
        if kind:
            buffer.flush()  # raises on a non-finite loss before the bad state is saved
            checkpointer.save(state, step, kind)
            buffer.pause()

    hooks = [Hook(trainer.log_every, lambda step: buffer.flush()), Hook(1, save_checkpoint)]
    if objective.evaluate is not None:
        hooks.append(Hook(trainer.eval_every, run_eval))
    prefetch = Prefetcher(objective.make_batch, start, total, objective.prefetch)
    try:
        for step in range(start, total):
            state, metrics = train_step(state, prefetch.get(step), *step_args)
            buffer.add(step, metrics)
            for hook in hooks:
                if hook.due(step + 1, total):
                    hook.fn(step + 1)
        buffer.flush()
        checkpointer.wait()
    finally:
        prefetch.close()
        checkpointer.close()
        tracker.finish()
    return TrainResult(step=int(state.step), train_loss=buffer.last_loss, eval_metrics=eval_metrics, state=state)


def _as_dict(config: Any) -> dict:
    try:
        import draccus

        return draccus.encode(config)
    except Exception:  # the tracker's copy of the config is informational only
        return dataclasses.asdict(config)
