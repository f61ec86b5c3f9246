"""Rollouts: which prompts an iteration asks, with which seeds, sampled through the lab's engine.

    requests = plan_iteration(prompts, iteration=3, seed=0, prompts_per_iteration=16, num_generations=8)
    rollouts = generate_rollouts(engine, requests, SamplingConfig(temperature=1.0), decode=chat.decode_reply)

Everything here is a pure function of (run seed, iteration): the prompts of iteration k are positions
``k * n ... (k + 1) * n`` of an endless stream of per-epoch shuffles of each environment's records, and the
j-th completion of a prompt is sampled with seed ``rollout_seed(seed, k, env, record id, j)``. The engine
draws a seeded request's tokens from its seed and its own history only, whatever shares its batch or which
worker runs it, so a resumed run, or one whose rollout worker died and whose work was redone elsewhere,
samples the same completions.

``engine_request`` is the one place a rollout becomes the engine's sampling-parameter type.
"""

from __future__ import annotations

import dataclasses
import hashlib
import zlib
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from marin.inference.engine import Engine, Result
from marin.inference.sampling_params import SamplingParams
from marin.validation import check


@dataclasses.dataclass(frozen=True, kw_only=True)
class SamplingConfig:
    temperature: float = 1.0
    """> 0. The loss's ratios use the model's log-probabilities at temperature 1 (what the engine reports),
    so 1.0 keeps rollouts exactly on-policy; other values sample from a sharpened or flattened policy."""
    top_p: float = 1.0
    top_k: int = 0
    """0 means off."""
    max_completion_tokens: int = 64
    """Most tokens per completion (TRL's ``max_completion_length``); the end-of-turn token counts."""

    def __post_init__(self):
        check("SamplingConfig", "temperature", self.temperature, lambda v: v > 0, "> 0 (rollouts are sampled)")
        check("SamplingConfig", "max_completion_tokens", self.max_completion_tokens, lambda v: v >= 1, ">= 1")


@dataclasses.dataclass(frozen=True)
class Prompt:
    """One usable record of an environment, rendered and tokenized."""

    env: str
    record: Mapping
    tokens: tuple[int, ...]
    text: str


@dataclasses.dataclass(frozen=True)
class RolloutRequest:
    iteration: int
    group: int
    """Index of the prompt in its iteration (its G completions form one group)."""
    sample: int
    env: str
    record_id: str
    prompt: tuple[int, ...]
    seed: int

    @property
    def key(self) -> tuple[int, int, int]:
        return self.iteration, self.group, self.sample


@dataclasses.dataclass
class Rollout:
    request: RolloutRequest
    tokens: list[int]
    """Completion tokens, the end-of-turn token included when the model chose to stop."""
    logprobs: list[float]
    """The rollout policy's log-probability of each of ``tokens`` (the engine's, at temperature 1)."""
    text: str
    finish_reason: str
    policy_version: int
    """The iteration whose starting policy sampled it (``iteration - off_policy_lag`` once warmed up)."""
    reward: float = float("nan")
    advantage: float = float("nan")


def rollout_seed(run_seed: int, iteration: int, env: str, record_id: str, sample: int) -> int:
    """The engine seed (32 bits) of one completion: a hash of what identifies it, nothing else."""
    key = f"{run_seed}/{iteration}/{env}/{record_id}/{sample}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=4).digest(), "little")


def prompt_counts(weights: Mapping[str, float], total: int) -> dict[str, int]:
    """``total`` prompts shared by weight (largest remainders; ties to the earlier name)."""
    names = sorted(weights)
    exact = {n: total * weights[n] / sum(weights.values()) for n in names}
    counts = {n: int(exact[n]) for n in names}
    for n in sorted(names, key=lambda n: -(exact[n] - counts[n]))[: total - sum(counts.values())]:
        counts[n] += 1
    return counts


def _stream(env: str, size: int, seed: int, start: int, count: int) -> list[int]:
    """Positions ``start..start+count`` of an endless stream of shuffles of ``range(size)`` (one per epoch)."""
    out, epochs = [], {}
    for position in range(start, start + count):
        epoch = position // size
        if epoch not in epochs:
            rng = np.random.default_rng([seed, zlib.crc32(env.encode()), epoch])
            epochs[epoch] = rng.permutation(size)
        out.append(int(epochs[epoch][position % size]))
    return out


def plan_iteration(
    prompts: Mapping[str, Sequence[Prompt]],
    weights: Mapping[str, float],
    *,
    iteration: int,
    seed: int,
    prompts_per_iteration: int,
    num_generations: int,
) -> list[RolloutRequest]:
    """The requests of one iteration: its prompts (by environment weight), each ``num_generations`` times."""
    requests, group = [], 0
    for env, count in prompt_counts(weights, prompts_per_iteration).items():
        for index in _stream(env, len(prompts[env]), seed, iteration * count, count):
            prompt = prompts[env][index]
            rid = prompt.record["id"]
            for sample in range(num_generations):
                requests.append(
                    RolloutRequest(
                        iteration,
                        group,
                        sample,
                        env,
                        rid,
                        prompt.tokens,
                        rollout_seed(seed, iteration, env, rid, sample),
                    )
                )
            group += 1
    return requests


def engine_request(sampling: SamplingConfig, request: RolloutRequest) -> SamplingParams:
    """The engine's sampling parameters for one rollout (log-probabilities of the sampled tokens on)."""
    return SamplingParams(
        max_tokens=sampling.max_completion_tokens,
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        top_k=sampling.top_k,
        seed=request.seed,
        logprobs=0,
    )


def as_rollout(request: RolloutRequest, result: Result, decode: Callable[[list[int]], str], version: int) -> Rollout:
    """The engine's result as a rollout. Its tokens include the end token when the model ended its turn (the
    engine returns it with its log-probability), so that choice is trained on too; the text leaves it out
    (rollouts use no stop strings, so a "stop" finish always ends on an end token)."""
    tokens = list(result.tokens)
    logprobs = [lp.logprob for lp in result.logprobs]
    text = decode(tokens[:-1] if result.finish_reason == "stop" else tokens)
    return Rollout(request, tokens, logprobs, text, result.finish_reason, version)


def generate_rollouts(
    engine: Engine,
    requests: Sequence[RolloutRequest],
    sampling: SamplingConfig,
    decode: Callable[[list[int]], str],
    version: int,
) -> list[Rollout]:
    """Sample every request through the engine (continuously batched), in request order."""
    results = engine.generate([list(r.prompt) for r in requests], [engine_request(sampling, r) for r in requests])
    return [as_rollout(r, result, decode, version) for r, result in zip(requests, results)]
