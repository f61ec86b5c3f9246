"""How one request is sampled: the lab's one sampling-parameter type, validated once, when it is made.

    SamplingParams(max_tokens=64, temperature=0.7, top_p=0.9, seed=1, stop=("\\n",), logprobs=1)

The server builds it from a request's JSON fields (a bad value is a 400 naming the field), the chat and sample
CLIs from their flags, the evals and post-training from their configs; the engine (``marin.inference.engine``)
runs it as given. Its rules are the engine's: every value it accepts is one the engine represents exactly
(seeds are uint32, ``top_k`` int32, temperatures float32), so no accepted request can fail inside a step.

"Off" is one value per field: ``temperature=0`` is greedy, ``top_k=0`` keeps every token (-1, vLLM's spelling,
is accepted and stored as 0), ``top_p=1`` keeps the whole distribution, ``seed=None`` draws a fresh seed.
Generation ends at the first of: a stop token (the engine's end-of-text tokens unless ``ignore_eos``, or one
of ``stop_token_ids``), a ``stop`` string in the generated text, ``max_tokens``, the model's context. The
result's tokens are every token the model generated, a stop token included (with its log-probability: what
lm-eval and RL need); its text ends before the stop token or stop string.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

TOP_LOGPROBS = 5
"""Most alternatives per position for ``logprobs``/``prompt_logprobs`` (OpenAI's completions API allows 5)."""
SEED_LIMIT = 2**32
"""Seeds are uint32 (``jax.random.key``'s): 0 <= seed < 2**32."""
INT32_LIMIT = 2**31
_FLOAT32 = np.finfo(np.float32)


class InvalidRequest(ValueError):
    """A request the engine cannot run; ``param`` names the offending field."""

    def __init__(self, param: str, message: str):
        super().__init__(message)
        self.param = param


@dataclasses.dataclass(frozen=True, kw_only=True)
class SamplingParams:
    max_tokens: int = 16
    """Most tokens to generate (0: only score the prompt)."""
    temperature: float = 1.0
    """0 means greedy (argmax); otherwise a positive number float32 holds."""
    top_p: float = 1.0
    """Nucleus sampling: keep the smallest set of tokens whose probability reaches top_p, in (0, 1]; 1 is off."""
    top_k: int = 0
    """Keep the k most likely tokens; 0 (or -1) is off."""
    seed: int | None = None
    """0 <= seed < 2**32. Same seed, prompt and parameters: same tokens, whatever shares the batch. None: random."""
    stop: tuple[str, ...] = ()
    """Generation ends before the first occurrence of any of these in the generated text (empty ones dropped)."""
    stop_token_ids: tuple[int, ...] = ()
    """Generation ends at any of these tokens, beside the engine's end-of-text tokens."""
    ignore_eos: bool = False
    """Do not stop at the engine's end-of-text tokens (benchmarks: fixed output lengths)."""
    logprobs: int | None = None
    """Return each generated token's log-probability and this many alternatives (0..5)."""
    prompt_logprobs: int | None = None
    """Return each prompt token's log-probability given the tokens before it, and this many alternatives."""

    def __post_init__(self):
        set_ = object.__setattr__  # normalizing a frozen instance before anyone sees it
        _check_int("max_tokens", self.max_tokens, 0, None)
        set_(self, "temperature", _check_temperature(self.temperature))
        set_(self, "top_p", _check_number("top_p", self.top_p))
        if not 0 < self.top_p <= 1:
            raise InvalidRequest("top_p", f"top_p must be a number in (0, 1], got {self.top_p!r}")
        _check_int("top_k", self.top_k, -1, INT32_LIMIT - 1, "(0 or -1: off)")
        set_(self, "top_k", max(self.top_k, 0))
        if self.seed is not None:
            _check_int("seed", self.seed, 0, SEED_LIMIT - 1)
        set_(self, "stop", _check_stops(self.stop))
        set_(self, "stop_token_ids", _check_token_ids(self.stop_token_ids))
        if not isinstance(self.ignore_eos, bool):
            raise InvalidRequest("ignore_eos", f"ignore_eos must be a boolean, got {self.ignore_eos!r}")
        for name in ("logprobs", "prompt_logprobs"):
            if getattr(self, name) is not None:
                _check_int(name, getattr(self, name), 0, TOP_LOGPROBS)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def with_seed_offset(self, offset: int) -> SamplingParams:
        """The same parameters for the ``offset``-th sample of one prompt (``n`` > 1): a seeded request's
        samples use seed, seed + 1, ... (mod 2**32), so each is reproducible on its own."""
        if self.seed is None or offset == 0:
            return self
        return dataclasses.replace(self, seed=(self.seed + offset) % SEED_LIMIT)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_int(name: str, value, low: int, high: int | None, note: str = "") -> None:
    ok = _is_int(value) and value >= low and (high is None or value <= high)
    if not ok:
        bounds = f"an integer >= {low}" if high is None else f"an integer in [{low}, {high}]"
        raise InvalidRequest(name, f"{name} must be {bounds}{' ' + note if note else ''}, got {value!r}")


def _check_number(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidRequest(name, f"{name} must be a finite number, got {value!r}")
    return float(value)


def _check_temperature(value) -> float:
    t = _check_number("temperature", value)
    # float32 must hold it: a positive temperature that rounds to 0 (or overflows) would change its meaning
    if t < 0 or (t > 0 and not float(_FLOAT32.tiny) <= t <= float(_FLOAT32.max)):
        raise InvalidRequest(
            "temperature", f"temperature must be 0 (greedy) or in [{_FLOAT32.tiny:.3g}, {_FLOAT32.max:.3g}], got {t!r}"
        )
    return t


def _check_stops(stop) -> tuple[str, ...]:
    if isinstance(stop, str):
        stop = (stop,)
    if not isinstance(stop, (list, tuple)) or not all(isinstance(s, str) for s in stop):
        raise InvalidRequest("stop", f"stop must be a string or a list of strings, got {stop!r:.80}")
    for s in stop:
        try:
            s.encode("utf-8")
        except UnicodeEncodeError as error:
            raise InvalidRequest("stop", f"stop strings must be valid Unicode text: {error}") from error
    return tuple(s for s in stop if s)


def _check_token_ids(ids) -> tuple[int, ...]:
    if not isinstance(ids, (list, tuple)) or not all(_is_int(t) and 0 <= t < INT32_LIMIT for t in ids):
        raise InvalidRequest("stop_token_ids", f"stop_token_ids must be a list of token ids, got {ids!r:.80}")
    return tuple(ids)


def from_flags(**fields) -> SamplingParams:
    """For the CLIs (``marin.inference.sample``, ``chat``): a refused value exits naming its flag."""
    try:
        return SamplingParams(**fields)
    except InvalidRequest as error:
        flag = {"max_tokens": "max_new_tokens", "stop_token_ids": "stop_token_id"}.get(error.param, error.param)
        raise SystemExit(f"--{flag}: {error}") from error


def packed_row(params: SamplingParams, seed: int) -> tuple:
    """The request's row of the engine's ``SamplingRows``: temperature, top_k, top_p, seed in the dtypes the
    programs take (float32, int32, float32, uint32)."""
    return np.float32(params.temperature), np.int32(params.top_k), np.float32(params.top_p), np.uint32(seed)
