"""Where an iteration's rollouts come from: the training process's own engine, or a pool of Ray workers.

    source.request(iteration, requests, engine_params, version)   # sample (or start sampling) an iteration
    rollouts = source.take(iteration, recorder)                     # its rollouts, in request order

The loop requests iteration k + off_policy_lag at the start of iteration k, with the policy it has then, and
takes iteration k's rollouts: with workers and a lag, sampling ahead overlaps the trainer's updates.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from marin.chat import ChatTokenizer
from marin.inference.engine import Engine, EngineConfig
from marin.posttrain.rl.config import RolloutConfig
from marin.posttrain.rl.rollout import Rollout, RolloutRequest, SamplingConfig, generate_rollouts
from marin.trainer.model.config import LlamaConfig


class RolloutSource(Protocol):
    def requested(self, iteration: int) -> bool: ...

    def request(self, iteration: int, requests: list[RolloutRequest], params: Any, version: int) -> None: ...

    def take(self, iteration: int, recorder: Any) -> list[Rollout]: ...

    def close(self) -> None: ...


class LocalRollouts:
    """One engine in the training process, refreshed in place with each version of the policy."""

    def __init__(
        self, cfg: LlamaConfig, params: Any, chat: ChatTokenizer, sampling: SamplingConfig, config: RolloutConfig
    ):
        engine_config = EngineConfig(slots=config.slots, prefill_chunk=config.prefill_chunk)
        self.engine = Engine(cfg, params, engine_config, end_tokens=(chat.eot_id,))
        self.chat, self.sampling = chat, sampling
        self.done: dict[int, tuple[list[Rollout], float]] = {}

    def requested(self, iteration: int) -> bool:
        return iteration in self.done

    def request(self, iteration: int, requests: list[RolloutRequest], params: Any, version: int) -> None:
        start = time.perf_counter()
        self.engine.update_params(params)
        rollouts = generate_rollouts(self.engine, requests, self.sampling, self.chat.decode_reply, version)
        self.done[iteration] = (rollouts, time.perf_counter() - start)

    def take(self, iteration: int, recorder: Any) -> list[Rollout]:
        rollouts, seconds = self.done.pop(iteration)
        recorder.add_timing("rollout_s", seconds)
        return rollouts

    def close(self) -> None:
        self.done.clear()


class WorkerRollouts:
    """A ``RolloutPool`` of Ray workers; requests return at once and are collected when taken."""

    def __init__(self, cfg: LlamaConfig, tokenizer: str, sampling: SamplingConfig, config: RolloutConfig):
        from marin.posttrain.rl.workers import RolloutPool

        self.pool = RolloutPool(cfg, tokenizer, sampling, config)
        self.tickets: dict[int, Any] = {}

    def requested(self, iteration: int) -> bool:
        return iteration in self.tickets

    def request(self, iteration: int, requests: list[RolloutRequest], params: Any, version: int) -> None:
        self.tickets[iteration] = self.pool.submit(requests, params, version)

    def take(self, iteration: int, recorder: Any) -> list[Rollout]:
        start = time.perf_counter()
        rollouts = self.pool.collect(self.tickets.pop(iteration))
        recorder.add_timing("rollout_wait_s", time.perf_counter() - start)
        recorder.add_counts(
            {"rollout_workers_replaced": self.pool.replaced, "duplicate_rollouts": self.pool.duplicates}
        )
        return rollouts

    def close(self) -> None:
        self.pool.close()
