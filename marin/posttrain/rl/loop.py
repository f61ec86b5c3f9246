"""The RL loop: for each iteration, sample rollouts, score them, update the policy, hooks.

    result = train_rl(TrainRlConfig(output_path=..., initialize_from=<SFT run>, tokenizer=..., environments=...,
                                    grpo=GrpoConfig(num_iterations=30)))

Iteration k: the policy's weights go to the engine (in place; to rollout workers through Ray's object
store), the engine samples G completions of each of the iteration's prompts with seeds that are a
function of (run seed, k, prompt, sample), the environments score them, group-normalized advantages
are set, and ``ppo_epochs * num_minibatches`` optimizer steps train on them against the engine's own
log-probabilities. Then metrics (``metrics.jsonl`` and W&B, as training logs them), sample rollouts for
the data browser (``rollouts/iteration-<k>.jsonl``) and, when due, a checkpoint of the trainer's
``TrainState`` labelled with the number of completed iterations.

Resuming is the default path: a run restarts from its newest checkpoint at the iteration after it, and
with ``off_policy_lag=0`` every later rollout, reward and update is the one the uninterrupted run made, so
it ends with the same parameters byte for byte. With a lag L > 0, rollouts of iteration k come from the
policy of iteration k - L and may be sampled by workers while the trainer updates; a resumed run samples
its first L iterations with the restored policy (the older ones are not kept), so it is not bitwise.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from marin.chat import ChatTokenizer
from marin.environments import Environment
from marin.identity import result_dict
from marin.posttrain.rl.batch import make_batch, score_groups
from marin.posttrain.rl.config import TrainRlConfig
from marin.posttrain.rl.metrics import IterationMetrics, write_samples
from marin.posttrain.rl.rollout import Prompt, plan_iteration
from marin.posttrain.rl.sources import LocalRollouts, RolloutSource, WorkerRollouts
from marin.posttrain.rl.update import make_logprob_fn, make_update_step
from marin.storage import join
from marin.trainer.checkpoint import Checkpointer, check_optimizer
from marin.trainer.loop import tune_host_allocator
from marin.trainer.model import param_axes
from marin.trainer.step import StepConfig, TrainState
from marin.trainer.tracking import Tracker

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class RlResult:
    iterations: int
    """Completed iterations (== grpo.num_iterations after a full run)."""
    state: TrainState
    last_metrics: dict[str, float]


def load_prompts(
    envs: dict[str, Environment], chat: ChatTokenizer, seq_len: int, max_completion_tokens: int
) -> tuple[dict[str, list[Prompt]], dict[str, int]]:
    """Every environment's records rendered as a user turn (after its system prompt) and tokenized; a prompt
    with no room for a full completion is an error naming it, or (``on_long_prompt="skip"``) left out and
    counted."""
    prompts, skipped = {}, {}
    for name, env in envs.items():
        prompts[name], skipped[name] = [], 0
        system = [{"role": "system", "content": env.config.system_prompt}] if env.config.system_prompt else []
        for record in env.records:
            tokens = chat.encode_prompt([*system, {"role": "user", "content": record["prompt"]}])
            if len(tokens) + max_completion_tokens > seq_len:
                if env.config.on_long_prompt == "raise":
                    raise ValueError(
                        f"environment {name!r}, record {record['id']!r}: field 'prompt' is {len(tokens)} tokens; with "
                        f"max_completion_tokens={max_completion_tokens} it exceeds the model's context of {seq_len}"
                    )
                skipped[name] += 1
                continue
            prompts[name].append(Prompt(name, record, tuple(int(t) for t in tokens), record["prompt"]))
        if not prompts[name]:
            raise ValueError(f"environment {name!r}: every prompt is too long for the model's context of {seq_len}")
    return prompts, skipped


def initial_state(config: TrainRlConfig, optimizer, checkpointer: Checkpointer, start_params: Any):
    """(state, completed iterations): the newest checkpoint of this run, else ``start_params`` with a fresh
    optimizer state."""

    def fresh(params):
        key = jax.random.PRNGKey(config.grpo.seed)
        average = jax.tree.map(jnp.copy, params) if config.optimizer.keeps_average else None
        return TrainState(jnp.zeros((), jnp.int32), params, optimizer.init(params), average, jax.random.key_data(key))

    check_optimizer(checkpointer.base, config.optimizer.kind)
    restored = checkpointer.restore_latest(jax.eval_shape(fresh, start_params))
    if restored is None:
        logger.info("starting RL from %s", config.initialize_from)
        return fresh(jax.tree.map(jnp.copy, start_params)), 0
    state, iteration = restored
    logger.info("resuming RL from iteration %d", iteration)
    return state, iteration


@dataclasses.dataclass
class RlRun:
    """The parts of a run, built once by ``setup``."""

    config: TrainRlConfig
    cfg: Any
    chat: ChatTokenizer
    envs: dict[str, Environment]
    records: dict[tuple[str, str], dict]
    prompts: dict[str, list[Prompt]]
    long_prompts: dict[str, int]
    update: Any
    ref_logprobs: Any
    reference: Any
    checkpointer: Checkpointer
    state: TrainState
    start: int


def setup(config: TrainRlConfig) -> RlRun:
    from marin.inference import load_model

    grpo = config.grpo
    chat = ChatTokenizer.load(config.tokenizer)
    envs = {name: env.build(name) for name, env in config.environments.items()}
    cfg, host_params, _ = load_model(config.initialize_from, config.model)
    reference = jax.tree.map(lambda p: jnp.asarray(p, config.precision.param), host_params)  # the start policy
    optimizer = config.optimizer.build(grpo.num_updates, param_axes(cfg))
    checkpointer = Checkpointer(
        join(config.output_path, "checkpoints"),
        config.checkpoint,
        metadata={"model": result_dict(cfg), "optimizer": config.optimizer.kind},
    )  # a checkpoint that describes itself: evaluation, export and serving read it as any training run's
    state, start = initial_state(config, optimizer, checkpointer, reference)
    schedule = config.optimizer.lr_schedule(grpo.num_updates)
    prompts, long_prompts = load_prompts(envs, chat, cfg.seq_len, grpo.sampling.max_completion_tokens)
    return RlRun(
        config=config,
        cfg=cfg,
        chat=chat,
        envs=envs,
        records={(name, r["id"]): r for name, env in envs.items() for r in env.records},
        prompts=prompts,
        long_prompts=long_prompts,
        update=make_update_step(
            cfg,
            optimizer,
            schedule,
            grpo.loss,
            config.precision,
            config.num_microbatches,
            averaging=StepConfig(ema_decay=config.optimizer.ema_decay, schedule_free=config.optimizer.schedule_free),
        ),
        ref_logprobs=make_logprob_fn(cfg, config.precision) if grpo.loss.beta else None,
        reference=reference if grpo.loss.beta else None,
        checkpointer=checkpointer,
        state=state,
        start=start,
    )


def train_rl(config: TrainRlConfig) -> RlResult:
    tune_host_allocator()  # before JAX's runtime starts: the update trains at a fresh process's speed
    run = setup(config)
    total = config.grpo.num_iterations
    source = _rollout_source(run)
    tracker = Tracker(config.tracker, config.output_path, _as_dict(config), resume_step=run.start, total_steps=total)
    metrics: dict[str, float] = {}
    try:
        for iteration in range(run.start, total):
            metrics = run_iteration(run, source, iteration)
            tracker.log(iteration + 1, metrics)
            tracker.progress(
                iteration + 1, metrics.get("train/loss", 0.0), metrics.get("throughput/rollout_tokens_per_s", 0.0)
            )
            kind = "permanent" if iteration + 1 == total else run.checkpointer.due(iteration + 1)
            if kind:
                run.checkpointer.save(run.state, iteration + 1, kind)
        run.checkpointer.wait()
    finally:
        source.close()
        run.checkpointer.close()
        tracker.finish()
    return RlResult(iterations=total, state=run.state, last_metrics=metrics)


def run_iteration(run: RlRun, source: RolloutSource, iteration: int) -> dict[str, float]:
    """Request what must be sampled now (this iteration, or the one ``off_policy_lag`` ahead), take this
    iteration's rollouts, score them, update ``run.state``; returns the iteration's metrics."""
    grpo = run.config.grpo
    for ahead in range(iteration, min(iteration + grpo.off_policy_lag, grpo.num_iterations - 1) + 1):
        if not source.requested(ahead):
            plan = plan_iteration(
                run.prompts,
                {name: env.config.weight for name, env in run.envs.items()},
                iteration=ahead,
                seed=grpo.seed,
                prompts_per_iteration=grpo.prompts_per_iteration,
                num_generations=grpo.num_generations,
            )
            source.request(ahead, plan, _engine_params(run.config, run.state.params), version=iteration)
    recorder = IterationMetrics(iteration, run.envs)
    rollouts = source.take(iteration, recorder)
    scored = score_groups(
        rollouts, run.envs, run.records, num_generations=grpo.num_generations, scale=grpo.scale_rewards
    )
    recorder.add_rollouts(scored, run.long_prompts)
    run.state = _update(run, scored.rollouts, recorder)
    metrics = recorder.finish()
    write_samples(run.config.output_path, iteration, scored.rollouts, run.records, run.config.sample_groups)
    logger.info("iteration %d: reward %.4f", iteration + 1, metrics.get("rl/reward_mean", float("nan")))
    return metrics


def _update(run: RlRun, rollouts: list, recorder: IterationMetrics) -> TrainState:
    """``ppo_epochs`` passes of ``num_minibatches`` optimizer steps over the iteration's rollouts (minibatch
    rows shuffled by (seed, iteration, epoch): a pure function of the iteration, as everything else)."""
    grpo, state = run.config.grpo, run.state
    if not rollouts:
        logger.warning("iteration %d: no scorable group; no update", recorder.iteration + 1)
        return state
    batch = make_batch(rollouts, rows=grpo.rows, seq_len=run.cfg.seq_len)
    size = grpo.rows // grpo.num_minibatches
    if run.ref_logprobs is not None:
        chunks = [{k: v[i : i + size] for k, v in batch.items()} for i in range(0, grpo.rows, size)]
        batch["ref_logp"] = np.concatenate([np.asarray(run.ref_logprobs(run.reference, c)) for c in chunks])
    for epoch in range(grpo.ppo_epochs):
        order = np.random.default_rng([grpo.seed, recorder.iteration, epoch]).permutation(grpo.rows)
        for start in range(0, grpo.rows, size):
            rows = order[start : start + size]
            state, step_metrics = run.update(state, {k: v[rows] for k, v in batch.items()})
            recorder.add_update(step_metrics)
    return state


def _engine_params(config: TrainRlConfig, params: Any) -> Any:
    """The weights the engine samples with: a copy in the compute dtype (the update donates its state's
    buffers, so the engine must never share them)."""
    return jax.tree.map(jnp.copy, config.precision.cast_for_compute(params))


def _rollout_source(run: RlRun) -> RolloutSource:
    config = run.config
    if config.rollout.num_workers:
        return WorkerRollouts(run.cfg, config.tokenizer, config.grpo.sampling, config.rollout)
    params = _engine_params(config, run.state.params)
    return LocalRollouts(run.cfg, params, run.chat, config.grpo.sampling, config.rollout)


def _as_dict(config: Any) -> dict:
    try:
        import draccus

        return draccus.encode(config)
    except Exception:  # the tracker's copy of the config is informational only
        return dataclasses.asdict(config)
