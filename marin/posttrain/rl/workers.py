"""Rollouts on separate Ray workers: each holds an engine; weights flow to them through Ray's object store.

    pool = RolloutPool(model_cfg, chat_tokenizer_dir, SamplingConfig(), RolloutConfig(num_workers=2))
    ticket = pool.submit(requests, params, version=3)    # returns at once: workers sample while the trainer trains
    rollouts = pool.collect(ticket)                      # every request exactly once, in request order

An iteration's requests are cut into units of whole groups and dealt to the workers round-robin. A unit
carries a reference to the policy's weights (put in the object store once per version); a worker loads
them into its engine in place (``Engine.update_params``) when the version changes, never from disk. When a
worker dies (preempted, killed, out of memory) its units fail with ``RayActorError``: the pool starts a
replacement and deals the lost units again. Results are keyed by (iteration, group, sample): a key that
arrives twice is used once, a missing one is an error, so no rollout is lost or used twice. Since a
rollout's sampling seed is a function of its key and the engine's draws depend only on the seed, a
redone unit samples the same completions the lost one would have.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
import ray
from ray.exceptions import RayActorError

from marin.posttrain.rl.config import RolloutConfig
from marin.posttrain.rl.rollout import Rollout, RolloutRequest, SamplingConfig, generate_rollouts
from marin.trainer.model.config import LlamaConfig

logger = logging.getLogger(__name__)


class RolloutWorker:
    """A Ray actor: one engine, refreshed to a policy version on demand."""

    def __init__(self, model: dict, tokenizer: str, sampling: SamplingConfig, slots: int, prefill_chunk: int):
        from marin.chat import ChatTokenizer

        self.cfg = LlamaConfig.from_dict(model)
        self.chat = ChatTokenizer.load(tokenizer)
        self.sampling, self.slots, self.prefill_chunk = sampling, slots, prefill_chunk
        self.engine, self.version = None, None

    def generate(self, version: int, params_ref: list, requests: list[RolloutRequest]) -> list[Rollout]:
        """Sample ``requests`` with the weights of ``version`` (``params_ref``: [ObjectRef], wrapped so Ray
        hands the reference over and the worker fetches the weights only when its version is stale)."""
        from marin.inference.engine import Engine, EngineConfig

        if version != self.version:
            params = jax.tree.map(jax.numpy.asarray, ray.get(params_ref[0]))
            if self.engine is None:
                config = EngineConfig(slots=self.slots, prefill_chunk=self.prefill_chunk)
                self.engine = Engine(self.cfg, params, config, end_tokens=(self.chat.eot_id,))
            else:
                self.engine.update_params(params)
            self.version = version
        return generate_rollouts(self.engine, requests, self.sampling, self.chat.decode_reply, version)

    def ping(self) -> bool:
        return True


@dataclasses.dataclass
class Ticket:
    """The work of one submission: units of requests and where each runs."""

    version: int
    params_ref: Any
    units: list[list[RolloutRequest]]
    running: dict[Any, int]  # ObjectRef -> unit index
    assigned: dict[int, tuple[int, Any]]  # unit index -> (worker index, actor handle)


class RolloutPool:
    def __init__(
        self,
        model: LlamaConfig,
        tokenizer: str,
        sampling: SamplingConfig,
        config: RolloutConfig,
        on_unit_done: Callable[[RolloutPool, Ticket, int], None] | None = None,
    ):
        """``on_unit_done(pool, ticket, unit)`` runs after each unit's results arrive (tests kill workers there)."""
        if not ray.is_initialized():
            ray.init()
        self.config, self.on_unit_done = config, on_unit_done
        actor = ray.remote(num_cpus=config.worker_cpus, max_restarts=0)(RolloutWorker)
        args = (dataclasses.asdict(model), tokenizer, sampling, config.slots, config.prefill_chunk)
        self._start = lambda: actor.remote(*args)
        self.workers = [self._start() for _ in range(config.num_workers)]
        self.replaced = 0
        self.duplicates = 0
        self._next = 0

    def submit(self, requests: Sequence[RolloutRequest], params: Any, version: int) -> Ticket:
        """Deal ``requests`` (whole groups per unit) to the workers; returns at once."""
        params_ref = ray.put(jax.tree.map(np.asarray, params))
        groups: dict[int, list[RolloutRequest]] = {}
        for r in requests:
            groups.setdefault(r.group, []).append(r)
        count = min(len(groups), len(self.workers) * self.config.units_per_worker)
        units = [[] for _ in range(count)]
        for i, group in enumerate(sorted(groups)):
            units[i * count // len(groups)].extend(groups[group])
        ticket = Ticket(version, params_ref, units, {}, {})
        for unit in range(len(units)):
            self._dispatch(ticket, unit)
        return ticket

    def _dispatch(self, ticket: Ticket, unit: int) -> None:
        worker = self._next % len(self.workers)
        self._next += 1
        ref = self.workers[worker].generate.remote(ticket.version, [ticket.params_ref], ticket.units[unit])
        ticket.running[ref] = unit
        ticket.assigned[unit] = (worker, self.workers[worker])

    def collect(self, ticket: Ticket) -> list[Rollout]:
        """Every rollout of the ticket exactly once, in (group, sample) order; lost units are redone."""
        results: dict[tuple, Rollout] = {}
        while ticket.running:
            [ref], _ = ray.wait(list(ticket.running), num_returns=1)
            unit = ticket.running.pop(ref)
            try:
                rollouts = ray.get(ref)
            except RayActorError as e:
                self._replace(*ticket.assigned[unit], e)
                self._dispatch(ticket, unit)
                continue
            for rollout in rollouts:
                if rollout.request.key in results:
                    self.duplicates += 1  # a unit that ran twice: its first copy is the one used
                    continue
                results[rollout.request.key] = rollout
            if self.on_unit_done is not None:
                self.on_unit_done(self, ticket, unit)
        wanted = [r.key for unit in ticket.units for r in unit]
        missing = [key for key in wanted if key not in results]
        if missing or len(results) != len(wanted):
            raise RuntimeError(f"rollouts lost: {missing[:5]} ({len(missing)} of {len(wanted)})")
        return [results[key] for key in sorted(wanted)]

    def _replace(self, worker: int, handle: Any, error: Exception) -> None:
        if self.workers[worker] is not handle:
            return  # replaced already, when another of its units failed
        logger.warning("rollout worker %d died (%s); starting a replacement and redoing its units", worker, error)
        self.workers[worker] = self._start()
        self.replaced += 1

    def kill(self, worker: int) -> None:
        """Kill a worker now (as a preemption would); its running and queued units will be redone."""
        ray.kill(self.workers[worker], no_restart=True)

    def close(self) -> None:
        for w in self.workers:
            ray.kill(w, no_restart=True)
        self.workers = []
