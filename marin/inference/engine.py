"""Continuous batching over a KV cache of fixed slots: the one generation engine of the lab.

    engine = Engine(cfg, params, EngineConfig(slots=16))
    request = engine.submit(prompt_ids, SamplingParams(max_tokens=64, temperature=0.7, seed=1, stop=("\\n",)),
                            detokenize=tokenizer.decode)
    engine.run_until_idle()            # or engine.start(): a background thread steps while requests exist
    request.result().text, request.result().tokens

Each ``step()`` admits waiting requests into free slots, feeds one prefill chunk of the oldest request still
reading its prompt (so a long prompt never stalls the requests already decoding), and decodes one token for
every slot that is generating. When both happen in one step they run as one program (``mixed_step``: the
chunk's tokens and the decoding rows share each weight read, chunks of ``mixed_chunk`` tokens); a step with
only prompts to read feeds chunks of up to ``prefill_chunk`` tokens. A request joins at any step and leaves
the step it finishes — at a stop token, a stop string, ``max_tokens`` or the context's end — freeing its slot
for the next one. Shapes are fixed (``slots`` rows, prefill chunks of a few power-of-two sizes), so after
warm-up nothing recompiles (``compilations()`` counts).

Log-probabilities are the model's own (log-softmax of the logits, before temperature, top-k and top-p), as
OpenAI-compatible servers report them. ``prompt_logprobs`` (echo) scores every prompt token given the ones
before it: lm-eval's log-likelihood requests through the server are exactly this.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import secrets
import threading
import time
from collections.abc import Callable, Sequence

import jax
import numpy as np

from marin.inference.slots import (
    TOP_LOGPROBS,
    SamplingRows,
    attention_span,
    cache_positions,
    decode_rows,
    decode_slots,
    init_slot_cache,
    mixed_step,
    prefill_chunk,
    split_layers,
)
from marin.trainer.model.config import LlamaConfig

logger = logging.getLogger(__name__)


class QueueFull(RuntimeError):
    """More requests are waiting than ``EngineConfig.max_waiting`` allows."""


class EngineStopped(RuntimeError):
    """The engine was shut down before the request finished."""


@dataclasses.dataclass(frozen=True)
class EngineConfig:
    slots: int = 16
    """Requests decoded together (rows of the KV cache)."""
    prefill_chunk: int = 256
    """Most prompt tokens fed in one step (smaller chunks: power-of-two buckets from 16)."""
    mixed_chunk: int = 64
    """Prompt tokens fed in a step that also decodes (one size: each size is a program per decoding width
    and attention span), at most ``prefill_chunk``; 0 runs prefill and decoding as separate programs (a
    third fewer programs to compile at warm-up)."""
    max_waiting: int = 256
    """Requests queued beyond the slots; ``submit`` raises ``QueueFull`` past it (the server answers 429)."""

    def __post_init__(self):
        if self.slots < 1 or self.max_waiting < 0:
            raise ValueError(f"EngineConfig: slots must be >= 1 and max_waiting >= 0, got {self}")
        for name, off in (("prefill_chunk", False), ("mixed_chunk", True)):
            size = getattr(self, name)
            if (size < 16 or size & (size - 1)) and not (off and size == 0):
                raise ValueError(f"EngineConfig.{name} must be a power of two >= 16{' or 0' * off}, got {size}")


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    max_tokens: int = 16
    temperature: float = 1.0
    """0 means greedy (argmax)."""
    top_p: float = 1.0
    top_k: int = 0
    """0 means off."""
    seed: int | None = None
    """Same seed, same prompt, same parameters: same tokens, whatever else runs beside it."""
    stop: tuple[str, ...] = ()
    """Generation ends before the first occurrence of any of these in the generated text (not included)."""
    stop_token_ids: tuple[int, ...] = ()
    """Generation ends at one of these (the token is not part of the text)."""
    ignore_eos: bool = False
    """Do not stop at the engine's end tokens (benchmarks: fixed output lengths)."""
    logprobs: int | None = None
    """Return each generated token's log-probability and this many alternatives (0..5)."""
    prompt_logprobs: int | None = None
    """Return each prompt token's log-probability given the tokens before it, and this many alternatives."""

    @staticmethod
    def of(gen) -> SamplingParams:
        """The engine's form of a ``marin.inference.GenerationConfig`` (its stop tokens end generation)."""
        return SamplingParams(
            max_tokens=gen.max_new_tokens,
            temperature=gen.temperature,
            top_p=gen.top_p if gen.top_p is not None else 1.0,
            top_k=gen.top_k or 0,
            seed=gen.seed,
            stop_token_ids=tuple(gen.stop_tokens),
        )

    def __post_init__(self):
        checks = [
            ("max_tokens", self.max_tokens >= 0, "an integer >= 0"),
            ("temperature", 0 <= self.temperature, "a number >= 0"),
            ("top_p", 0 < self.top_p <= 1, "a number in (0, 1]"),
            ("top_k", self.top_k >= 0, "an integer >= 0"),
            ("logprobs", self.logprobs is None or 0 <= self.logprobs <= TOP_LOGPROBS, f"0..{TOP_LOGPROBS}"),
            (
                "prompt_logprobs",
                self.prompt_logprobs is None or 0 <= self.prompt_logprobs <= TOP_LOGPROBS,
                f"0..{TOP_LOGPROBS}",
            ),
        ]
        for name, ok, expected in checks:
            if not ok:
                raise InvalidRequest(name, f"{name} must be {expected}, got {getattr(self, name)!r}")


class InvalidRequest(ValueError):
    """A request the engine cannot run; ``param`` names the offending field."""

    def __init__(self, param: str, message: str):
        super().__init__(message)
        self.param = param


@dataclasses.dataclass
class TokenLogprob:
    token: int
    logprob: float | None  # None for the first prompt token (nothing conditions it)
    top: list[tuple[int, float]]  # the most likely tokens there, best first


@dataclasses.dataclass
class Result:
    tokens: list[int]
    """Generated tokens up to the stop (a stop token is not included)."""
    text: str
    finish_reason: str  # "stop" | "length" | "cancelled"
    logprobs: list[TokenLogprob] | None
    prompt_logprobs: list[TokenLogprob] | None
    prompt_tokens: int
    time_to_first_token: float | None
    stop_logprob: TokenLogprob | None = None
    """With ``logprobs``: the end or stop token that finished the request (not in ``tokens``) and its
    log-probability; an RL update trains on that choice too. None when it ended otherwise."""


class Request:
    """One submitted generation. ``on_event`` (if given) is called from the engine's thread with
    ``("token", index)`` for each new generated token and ``("done", result)`` at the end."""

    def __init__(self, prompt: list[int], params: SamplingParams, detokenize, on_event, end_tokens):
        self.prompt = prompt
        self.params = params
        self.detokenize = detokenize
        self.on_event = on_event
        self.end_tokens = () if params.ignore_eos else tuple(end_tokens)
        self.seed = params.seed if params.seed is not None else secrets.randbits(32)
        self.tokens: list[int] = []
        self.token_logprobs: list[TokenLogprob] = []
        self.prompt_logprobs: list[TokenLogprob] = [TokenLogprob(prompt[0], None, [])]
        self.stop_logprob: TokenLogprob | None = None
        self.fed = 0  # prompt tokens already in the cache
        self.slot: int | None = None
        self.text = ""
        self.cancelled = False
        self.submitted = time.perf_counter()
        self.first_token_at: float | None = None
        self._done = threading.Event()
        self._result: Result | None = None

    def cancel(self) -> None:
        """Stop generating: the engine frees the slot at its next step (safe from any thread)."""
        self.cancelled = True

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def result(self, timeout: float | None = None) -> Result:
        if not self._done.wait(timeout):
            raise TimeoutError("the request did not finish in time")
        if isinstance(self._result, BaseException):
            raise self._result
        return self._result

    def _emit(self, *event) -> None:
        if self.on_event is not None:
            try:
                self.on_event(*event)
            except Exception:  # a listener's failure (a closed connection) never stops the engine
                logger.exception("request listener failed")
                self.cancel()


def _bucket(n: int, most: int) -> int:
    size = 16
    while size < n and size < most:
        size *= 2
    return min(size, most)


class Engine:
    def __init__(
        self,
        cfg: LlamaConfig,
        params,
        config: EngineConfig = EngineConfig(),
        end_tokens: Sequence[int] = (),
    ):
        self.cfg, self.config = cfg, config
        self.params = split_layers(params)  # one weight dict per layer: read in place by the steps
        self.end_tokens = tuple(end_tokens)
        self.cache = init_slot_cache(cfg, config.slots, config.prefill_chunk, params["embed"].dtype)
        self.scratch = cache_positions(self.cache) - 1
        self.slots: list[Request | None] = [None] * config.slots
        self.waiting: collections.deque[Request] = collections.deque()
        self._lock = threading.RLock()
        self._wake = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None
        self._stopping = False
        self.steps = 0
        self.mixed_steps = 0  # steps that fed a prompt chunk and decoded in one program

    # ---- submission (any thread) -------------------------------------------------------------------

    def submit(
        self,
        prompt: Sequence[int],
        params: SamplingParams = SamplingParams(),
        *,
        detokenize: Callable[[list[int]], str] | None = None,
        on_event: Callable | None = None,
    ) -> Request:
        prompt = [int(t) for t in prompt]
        if not prompt:
            raise InvalidRequest("prompt", "the prompt needs at least one token")
        if not all(0 <= t < self.cfg.vocab_size for t in prompt):
            raise InvalidRequest("prompt", f"prompt token ids must be in [0, {self.cfg.vocab_size})")
        if len(prompt) + params.max_tokens > self.cfg.seq_len:
            raise InvalidRequest(
                "max_tokens",
                f"the prompt ({len(prompt)} tokens) plus max_tokens ({params.max_tokens}) exceeds the model's "
                f"context of {self.cfg.seq_len} tokens",
            )
        if params.stop and detokenize is None:
            raise InvalidRequest("stop", "stop strings need a tokenizer to decode the generated text")
        request = Request(prompt, params, detokenize, on_event, self.end_tokens)
        with self._lock:
            if self._stopping:
                raise EngineStopped("the engine is shutting down")
            if self._queue_full():
                raise QueueFull(f"{len(self.waiting)} requests are already waiting (max_waiting)")
            self.waiting.append(request)
            self._wake.notify()
        return request

    def update_params(self, params) -> None:
        """Serve these weights from the next request on (same shapes and dtypes: nothing recompiles): an RL
        loop refreshes its policy in place, without a reload from disk. The engine keeps references to the
        arrays, so the caller must not donate or delete them. Only between requests: an idle engine."""
        with self._lock:
            if self.busy:
                raise RuntimeError("update_params needs an idle engine (requests are waiting or running)")
            new = split_layers(params)
            old = jax.tree.map(lambda x: (x.shape, x.dtype), self.params)
            if jax.tree.map(lambda x: (x.shape, x.dtype), new) != old:
                raise ValueError("update_params: the new parameters' shapes or dtypes differ from the engine's")
            self.params = new

    @property
    def busy(self) -> bool:
        return bool(self.waiting) or any(r is not None for r in self.slots)

    def free_slots(self) -> int:
        return sum(r is None for r in self.slots)

    def _queue_full(self) -> bool:
        """``max_waiting`` requests wait beyond the slots still free."""
        return len(self.waiting) >= self.config.max_waiting + self.free_slots()

    # ---- stepping (one thread) ---------------------------------------------------------------------

    def step(self) -> None:
        """Admit, feed one prefill chunk, decode one token for every generating slot."""
        self.steps += 1
        with self._lock:
            for r in [*self.slots, *self.waiting]:
                if r is not None and r.cancelled:
                    self._finish(r, "cancelled")
            while self.waiting and None in self.slots:
                r = self.waiting.popleft()
                r.slot = self.slots.index(None)
                self.slots[r.slot] = r
        prefilling = [r for r in self.slots if r is not None and r.fed < len(r.prompt)]
        decoding = [r for r in self.slots if r is not None and r.fed == len(r.prompt) and r.tokens]
        oldest = min(prefilling, key=lambda r: r.submitted) if prefilling else None
        if oldest is not None and decoding and self._mixed_chunk:
            self._mixed(oldest, decoding)
            return
        if oldest is not None:
            self._prefill(oldest)
        if decoding:
            self._decode(decoding)

    def warmup(self) -> int:
        """Compile every program a request can need (each prefill chunk size at each attention span, the
        decoding step and the mixed step at each width and span) on the free cache, so that no request
        waits for a compilation; returns how many there are. Call before serving (``marin.inference.serve``
        does)."""
        if self.busy:
            raise RuntimeError("warm up an idle engine")
        cache_len, chunk = self.scratch + 1, self.config.prefill_chunk
        greedy = self._rows([None])
        # a prompt is fed in chunks of `chunk` tokens from position 0, its last chunk rounded up to a bucket
        sizes = sorted({_bucket(n, chunk) for n in range(1, chunk + 1)})
        for start in range(0, self.cfg.seq_len, chunk):
            for size in sizes:
                tokens = np.zeros(size, np.int32)
                span = attention_span(start + size, cache_len)
                _, self.cache = prefill_chunk(
                    self.cfg, self.params, self.cache, 0, tokens, tokens, start, 1, False, greedy, span
                )
        widths = sorted({decode_rows(n, self.config.slots) for n in range(1, self.config.slots + 1)})
        mixed = self._mixed_chunk
        # a mixed step's span covers its chunk, which may reach past seq_len into the cache's spare room
        mixed_spans = sorted(
            {attention_span(n, cache_len) for n in range(1, self.cfg.seq_len + mixed)} if mixed else ()
        )
        for width in widths:
            zeros, rows = np.zeros(width, np.int32), self._rows([None] * width)
            for span in sorted({attention_span(n, cache_len) for n in range(1, self.cfg.seq_len + 1)}):
                _, self.cache = decode_slots(self.cfg, self.params, self.cache, zeros, zeros, rows, span)
            for span in mixed_spans:
                tokens = np.zeros(mixed, np.int32)
                *_, self.cache = mixed_step(
                    self.cfg, self.params, self.cache, 0, tokens, tokens, 0, 1, False, greedy, zeros, zeros, rows, span
                )
        jax.block_until_ready(self.cache)
        return compilations()

    def run_until_idle(self) -> None:
        while self.busy:
            self.step()

    def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams | Sequence[SamplingParams], detokenize=None
    ) -> list[Result]:
        """Offline use (evals, CLIs): run these requests to the end, continuously batched; results in order."""
        each = [params] * len(prompts) if isinstance(params, SamplingParams) else list(params)
        requests = []
        for prompt, p in zip(prompts, each):
            while self._queue_full():
                self.step()  # make room rather than refuse: the caller waits for all of them anyway
            requests.append(self.submit(prompt, p, detokenize=detokenize))
        self.run_until_idle()
        return [r.result() for r in requests]

    def start(self) -> None:
        """Step in a background thread whenever there is work (``stop()`` ends it)."""
        self._thread = threading.Thread(target=self._loop, name="marin-engine", daemon=True)
        self._thread.start()

    def stop(self, cancel: bool = True, timeout: float | None = 30) -> None:
        """Refuse new requests; cancel the running ones (or, with ``cancel=False``, let them finish)."""
        with self._lock:
            self._stopping = True
            if cancel:
                for r in [*self.waiting, *self.slots]:
                    if r is not None:
                        r.cancel()
            self._wake.notify()
        if self._thread is not None:
            self._thread.join(timeout)

    def _loop(self) -> None:
        while True:
            with self._lock:
                while not self.busy and not self._stopping:
                    self._wake.wait()
                if self._stopping and not self.busy:
                    return
            try:
                self.step()
            except Exception as error:  # a failed step fails its requests, never the engine's thread
                logger.exception("engine step failed")
                for r in [*self.slots, *self.waiting]:
                    if r is not None:
                        self._finish(r, "error", error)
                self.cache = init_slot_cache(
                    self.cfg, self.config.slots, self.config.prefill_chunk, self.params["embed"].dtype
                )

    # ---- internals -----------------------------------------------------------------------------------

    def _rows(self, requests: list[Request | None]) -> SamplingRows:
        def row(r):
            if r is None:
                return (0.0, 0, 1.0, 0, 0)
            p = r.params
            return (p.temperature, p.top_k, p.top_p, r.seed, len(r.tokens))

        return SamplingRows.of([row(r) for r in requests])

    @property
    def _mixed_chunk(self) -> int:
        return min(self.config.mixed_chunk, self.config.prefill_chunk)

    def _chunk(self, r: Request, size: int):
        """The next ``size`` tokens of r's prompt (zero-padded), the tokens after them (the targets whose
        log-probabilities echo reports), and how many are real."""
        valid = min(len(r.prompt) - r.fed, size)
        tokens, targets = np.zeros(size, np.int32), np.zeros(size, np.int32)
        tokens[:valid] = r.prompt[r.fed : r.fed + valid]
        nxt = r.prompt[r.fed + 1 : r.fed + valid + 1]
        targets[: len(nxt)] = nxt
        return tokens, targets, valid, nxt

    def _prefill(self, r: Request) -> None:
        size = _bucket(len(r.prompt) - r.fed, self.config.prefill_chunk)
        tokens, targets, valid, nxt = self._chunk(r, size)
        span = attention_span(r.fed + size, self.scratch + 1)
        scored = r.params.prompt_logprobs is not None
        out, self.cache = prefill_chunk(
            self.cfg, self.params, self.cache, r.slot, tokens, targets, r.fed, valid, scored, self._rows([r]), span
        )
        self._fed(r, out[:4], nxt, valid, lambda: jax.device_get(out.next), 0)

    def _decode_inputs(self, decoding: list[Request]):
        """Each decoding slot's last token and its position (other rows: the scratch position), for the
        smallest width of rows covering them."""
        width = decode_rows(max(r.slot for r in decoding) + 1, self.config.slots)
        tokens = np.zeros(width, np.int32)
        positions = np.full(width, self.scratch, np.int32)
        for r in decoding:
            tokens[r.slot] = r.tokens[-1]
            positions[r.slot] = len(r.prompt) + len(r.tokens) - 1
        rows = self._rows([r if r in decoding else None for r in self.slots[:width]])
        return tokens, positions, rows, max(positions[r.slot] for r in decoding) + 1

    def _decode(self, decoding: list[Request]) -> None:
        tokens, positions, rows, needed = self._decode_inputs(decoding)
        span = attention_span(needed, self.scratch + 1)
        out, self.cache = decode_slots(self.cfg, self.params, self.cache, tokens, positions, rows, span)
        out = jax.device_get(out)
        for r in decoding:
            self._accept(r, out, r.slot)

    def _mixed(self, r: Request, decoding: list[Request]) -> None:
        """A prefill chunk of r and a decoding step of ``decoding`` in one program."""
        self.mixed_steps += 1
        size = self._mixed_chunk
        tokens, targets, valid, nxt = self._chunk(r, size)
        decode_tokens, positions, rows, needed = self._decode_inputs(decoding)
        span = attention_span(max(needed, r.fed + size), self.scratch + 1)
        scores, out, self.cache = mixed_step(
            self.cfg,
            self.params,
            self.cache,
            r.slot,
            tokens,
            targets,
            r.fed,
            valid,
            r.params.prompt_logprobs is not None,
            self._rows([r]),
            decode_tokens,
            positions,
            rows,
            span,
        )
        out = jax.device_get(out)  # row 0: r's next token; row 1 + i: decoding slot i's
        self._fed(r, scores, nxt, valid, lambda: out, 0)
        for d in decoding:
            self._accept(d, out, 1 + d.slot)

    def _fed(self, r: Request, scores, nxt: list[int], valid: int, sampled, row: int) -> None:
        """After a chunk of r's prompt went in: record its prompt log-probabilities (when asked), and once
        the whole prompt is in, take the first generated token (row ``row`` of ``sampled()``)."""
        if r.params.prompt_logprobs is not None:
            logp, _, top_lp, top_tok = jax.device_get(scores)
            n = r.params.prompt_logprobs
            for i, token in enumerate(nxt):
                top = list(zip(top_tok[i, :n].tolist(), top_lp[i, :n].tolist()))
                r.prompt_logprobs.append(TokenLogprob(token, float(logp[i]), top))
        r.fed += valid
        if r.fed == len(r.prompt):
            if r.params.max_tokens == 0:
                self._finish(r, "length")
            else:
                self._accept(r, sampled(), row)

    def _accept(self, r: Request, out, row: int) -> None:
        """Record the token sampled for ``r`` (row ``row`` of ``out``) and finish the request if it stops."""
        if r.cancelled:
            self._finish(r, "cancelled")
            return
        token = int(out.token[row])
        if r.first_token_at is None:
            r.first_token_at = time.perf_counter()
        scored = None
        if r.params.logprobs is not None:
            n = r.params.logprobs
            top = list(zip(out.top_token[row, :n].tolist(), out.top_logprob[row, :n].tolist()))
            scored = TokenLogprob(token, float(out.logprob[row]), top)
        if token in r.end_tokens or token in r.params.stop_token_ids:
            r.stop_logprob = scored
            self._finish(r, "stop")
            return
        r.tokens.append(token)
        if scored is not None:
            r.token_logprobs.append(scored)
        if r.params.stop:
            r.text = r.detokenize(r.tokens)
            cut = min((r.text.find(s) for s in r.params.stop if s in r.text), default=-1)
            if cut >= 0:
                r.text = r.text[:cut]
                self._finish(r, "stop")
                return
        r._emit("token", len(r.tokens) - 1)
        if len(r.tokens) >= r.params.max_tokens:
            self._finish(r, "length")
        elif len(r.prompt) + len(r.tokens) >= self.cfg.seq_len:
            self._finish(r, "length")

    def _finish(self, r: Request, reason: str, error: BaseException | None = None) -> None:
        if r.slot is not None and self.slots[r.slot] is r:
            self.slots[r.slot] = None
        with self._lock:
            if r in self.waiting:
                self.waiting.remove(r)
        if r.done:
            return
        if error is not None:
            r._result = error
        else:
            if not r.params.stop and r.detokenize is not None:
                r.text = r.detokenize(r.tokens)
            r._result = Result(
                tokens=list(r.tokens),
                text=r.text,
                finish_reason=reason,
                logprobs=r.token_logprobs if r.params.logprobs is not None else None,
                prompt_logprobs=r.prompt_logprobs if r.params.prompt_logprobs is not None else None,
                prompt_tokens=len(r.prompt),
                time_to_first_token=None if r.first_token_at is None else r.first_token_at - r.submitted,
                stop_logprob=r.stop_logprob,
            )
        r._done.set()
        r._emit("done", r._result)


def compilations() -> int:
    """Programs compiled so far for the engine's prefill and decode steps (all engines in the process)."""
    return prefill_chunk._cache_size() + decode_slots._cache_size() + mixed_step._cache_size()
