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
for the next one. Prompts that arrive together (RL rollouts, evals: ``generate``) are read several per step:
whole prompts not yet begun share one chunk of up to ``prefill_chunk`` tokens (``prefill_packed``; each attends
to its own tokens only), so 128 rollouts of a 28-token prompt take 39 steps, not 143 (docs/serving.md). Shapes
are fixed (``slots`` rows, prefill chunks of a few power-of-two sizes), so after warm-up nothing recompiles
(``compilations()`` counts).

Log-probabilities are the model's own (log-softmax of the logits, before temperature, top-k and top-p), as
OpenAI-compatible servers report them. ``prompt_logprobs`` (echo) scores every prompt token given the ones
before it: lm-eval's log-likelihood requests through the server are exactly this.

One request's failure is its own. Its values are checked when it is submitted (``SamplingParams`` holds only
what the programs represent); its host-side work in a step (building its inputs, decoding its text, calling
its listener) fails only it; and when a program fails, a program that held one request fails that request,
while the requests of a program that held several are stepped alone until each has produced, alone, the
token that program was producing (the one that fails alone is the cause). If the failed program had consumed
the cache (its buffers are donated), the requests in the slots feed their prompt and generated tokens again
(``Request.restart``) and go on: same tokens as if nothing had happened.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import threading
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from marin.inference.request import Request, Result, TokenLogprob
from marin.inference.sampling_params import InvalidRequest, SamplingParams
from marin.inference.slots import (
    SamplingRows,
    attention_span,
    cache_positions,
    decode_rows,
    decode_slots,
    init_slot_cache,
    mixed_step,
    packed_rows,
    prefill_chunk,
    prefill_packed,
    split_layers,
)
from marin.trainer.model.config import LlamaConfig

logger = logging.getLogger(__name__)

__all__ = [
    "Engine",
    "EngineConfig",
    "EngineStopped",
    "InvalidRequest",
    "QueueFull",
    "Request",
    "Result",
    "SamplingParams",
    "TokenLogprob",
    "compilations",
]


SERVING_DTYPES = (None, "float32", "bfloat16")


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
    max_model_len: int | None = None
    """Longest sequence served (prompt + generated tokens), at most the model's ``seq_len`` (None: that). The
    cache holds this many positions per slot and warm-up compiles only the attention spans they need: less
    memory and fewer programs where requests are short (vLLM's ``max_model_len``)."""
    dtype: str | None = None
    """Precision of the weights and the KV cache: "bfloat16", "float32", or None (the parameters' own).
    Attention's softmax, the logits and every log-probability are fp32 whatever this is."""
    rolling_windows: bool = True
    """A sliding-window layer's cache keeps only its window (plus a chunk) of positions per slot, in a ring:
    its memory and its attention's reads stop growing with the context (vLLM and transformers' sliding-window
    caches do the same). False keeps the whole context in every layer, the windowed ones masked."""

    def __post_init__(self):
        if self.slots < 1 or self.max_waiting < 0:
            raise ValueError(f"EngineConfig: slots must be >= 1 and max_waiting >= 0, got {self}")
        if self.max_model_len is not None and self.max_model_len < 1:
            raise ValueError(f"EngineConfig.max_model_len must be >= 1 or None, got {self.max_model_len}")
        if self.dtype not in SERVING_DTYPES:
            raise ValueError(f"EngineConfig.dtype must be one of {sorted(SERVING_DTYPES, key=str)}, got {self.dtype!r}")
        for name, off in (("prefill_chunk", False), ("mixed_chunk", True)):
            size = getattr(self, name)
            if (size < 16 or size & (size - 1)) and not (off and size == 0):
                raise ValueError(f"EngineConfig.{name} must be a power of two >= 16{' or 0' * off}, got {size}")


def _bucket(n: int, most: int) -> int:
    size = 16
    while size < n and size < most:
        size *= 2
    return min(size, most)


def _is_token(t) -> bool:
    return isinstance(t, (int, np.integer)) and not isinstance(t, bool)


class Engine:
    def __init__(
        self,
        cfg: LlamaConfig,
        params,
        config: EngineConfig = EngineConfig(),
        end_tokens: Sequence[int] = (),
    ):
        if config.max_model_len is not None:
            if config.max_model_len > cfg.seq_len:
                raise ValueError(
                    f"EngineConfig.max_model_len ({config.max_model_len}) exceeds the model's seq_len ({cfg.seq_len})"
                )
            cfg = dataclasses.replace(cfg, seq_len=config.max_model_len)  # the context; RoPE does not depend on it
        self.cfg, self.config = cfg, config
        self.params = split_layers(self._cast(params))  # one weight dict per layer: read in place by the steps
        self.end_tokens = tuple(end_tokens)
        self.cache = self._new_cache()
        self.scratch = cfg.seq_len + config.prefill_chunk - 1  # the last position of a full-attention layer
        # the most entries any layer reads: spans past it are the same program (a model whose every layer keeps
        # a ring compiles none of the longer spans)
        self.longest = max(cache_positions(self.cache))
        self.slots: list[Request | None] = [None] * config.slots
        self.waiting: collections.deque[Request] = collections.deque()
        self._lock = threading.RLock()
        self._wake = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None
        self._stopping = False
        self.steps = 0
        self.mixed_steps = 0  # steps that fed a prompt chunk and decoded in one program
        self.packed_steps = 0  # steps that read whole prompts packed in one chunk (prefill_packed)
        self._batch = False  # inside generate(): full-size steps (see _packable and _decode_inputs)

    # ---- submission (any thread) -------------------------------------------------------------------

    def check(self, prompt: Sequence[int], params: SamplingParams, detokenize=None) -> list[int]:
        """The prompt as a list of ints, if this engine can run it with ``params``; else ``InvalidRequest``
        naming the field. ``submit`` checks; callers submitting several requests at once check them all
        first."""
        if not isinstance(params, SamplingParams):
            raise TypeError(f"params must be a SamplingParams, got {type(params).__name__}")
        prompt = list(prompt)
        vocab, context = self.cfg.vocab_size, self.cfg.seq_len
        if not prompt:
            raise InvalidRequest("prompt", "the prompt needs at least one token")
        if not all(_is_token(t) and 0 <= t < vocab for t in prompt):
            raise InvalidRequest("prompt", f"prompt token ids must be integers in [0, {vocab})")
        if len(prompt) > context:
            raise InvalidRequest("prompt", f"the prompt has {len(prompt)} tokens; {context} are served")
        if len(prompt) + params.max_tokens > context:
            raise InvalidRequest(
                "max_tokens",
                f"the prompt ({len(prompt)} tokens) plus max_tokens ({params.max_tokens}) exceeds the "
                f"context served, {context} tokens",
            )
        if any(t >= vocab for t in params.stop_token_ids):
            raise InvalidRequest("stop_token_ids", f"stop_token_ids must be token ids in [0, {vocab})")
        if params.stop and detokenize is None:
            raise InvalidRequest("stop", "stop strings need a tokenizer to decode the generated text")
        return [int(t) for t in prompt]

    def submit(
        self,
        prompt: Sequence[int],
        params: SamplingParams = SamplingParams(),
        *,
        detokenize: Callable[[list[int]], str] | None = None,
        on_event: Callable | None = None,
    ) -> Request:
        """Queue a request (``InvalidRequest`` if it cannot run, ``QueueFull``, ``EngineStopped``).
        ``detokenize`` (ids -> text) gives the result its text and makes ``params.stop`` usable."""
        request = Request(self.check(prompt, params, detokenize), params, detokenize, on_event, self.end_tokens)
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
            new = split_layers(self._cast(params))
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
        """Admit, feed one prefill chunk (or several whole prompts packed in one), decode one token for every
        generating slot."""
        self.steps += 1
        self._admit()
        active = [r for r in self.slots if r is not None]
        suspects = [r for r in active if r.suspect_until is not None]
        if suspects:  # after a program of several requests failed: one of them at a time
            r = min(suspects, key=lambda r: r.submitted)
            if (self._prefill(r) if r.prefilling else self._decode([r])) and len(r.tokens) >= r.suspect_until:
                r.suspect_until = None  # it produced, alone, the token the failed program was producing
            return
        prefilling = [r for r in active if r.prefilling]
        decoding = [r for r in active if not r.prefilling and r.tokens]
        packable = self._packable(prefilling)  # whole prompts at once, else one chunk of the oldest
        oldest = min(prefilling, key=lambda r: r.submitted) if prefilling else None
        if not packable and oldest is not None and decoding and self._mixed_chunk and not self._batch:
            self._mixed(oldest, decoding)
            return
        if packable or oldest is not None:
            if packable:
                self._prefill_packed(packable)
            else:
                self._prefill(oldest)
            decoding = [r for r in decoding if self.slots[r.slot] is r and not r.prefilling]  # (a failure restarts)
        if decoding:
            self._decode(decoding)

    def programs(self) -> list[tuple[str, int, int]]:
        """Every program a request can need, as (kind, size, attention span): a prefill chunk of each size at
        each span it can reach, the packed chunk (its span: itself), the decoding step and the mixed step at
        each width of rows and each span."""
        cache_len, chunk, mixed = self.longest, self.config.prefill_chunk, self._mixed_chunk
        # a prompt is fed in chunks of `chunk` tokens from position 0, its last chunk rounded up to a bucket
        sizes = sorted({_bucket(n, chunk) for n in range(1, chunk + 1)})
        found = {
            ("prefill", size, attention_span(start + size, cache_len)): None
            for start in range(0, self.cfg.seq_len, chunk)
            for size in sizes
        }
        spans = sorted({attention_span(n, cache_len) for n in range(1, self.cfg.seq_len + 1)})
        # a mixed step's span covers its chunk, which may reach past seq_len into the cache's spare room
        mixed_spans = (
            sorted({attention_span(n, cache_len) for n in range(1, self.cfg.seq_len + mixed)}) if mixed else []
        )
        found[("packed", chunk, chunk)] = None  # packed prompts attend within their chunk only
        for width in sorted({decode_rows(n, self.config.slots) for n in range(1, self.config.slots + 1)}):
            found.update({("decode", width, span): None for span in spans})
            found.update({("mixed", width, span): None for span in mixed_spans})
        return list(found)

    def warmup(self) -> int:
        """Compile every program a request can need (``programs()``) on the free cache, so that no request
        waits for a compilation; returns how many programs the process has compiled. Call before serving
        (``marin.inference.serve`` does)."""
        if self.busy:
            raise RuntimeError("warm up an idle engine")
        greedy = self._rows([None])
        for kind, size, span in self.programs():
            if kind == "prefill":
                tokens = np.zeros(size, np.int32)
                _, self.cache = prefill_chunk(
                    self.cfg, self.params, self.cache, 0, tokens, tokens, 0, 1, False, greedy, span
                )
                continue
            if kind == "packed":
                count = packed_rows(self.config.slots)
                zeros, rows = np.zeros(size, np.int32), self._rows([None] * count)
                segments, positions = np.full(size, count, np.int32), np.full(size, self.scratch + 1, np.int32)
                last = np.zeros(count, np.int32)
                _, self.cache = prefill_packed(
                    self.cfg, self.params, self.cache, last, zeros, segments, positions, last, rows
                )
                continue
            zeros, rows = np.zeros(size, np.int32), self._rows([None] * size)
            if kind == "decode":
                _, self.cache = decode_slots(self.cfg, self.params, self.cache, zeros, zeros, rows, span)
            else:
                tokens = np.zeros(self._mixed_chunk, np.int32)
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
        """Offline use (evals, CLIs, RL rollouts): run these requests to the end, continuously batched; results
        in order. Steps run at full size (``_batch``): throughput, not each step's latency, is what counts."""
        each = [params] * len(prompts) if isinstance(params, SamplingParams) else list(params)
        requests = []
        self._batch = True
        try:
            for prompt, p in zip(prompts, each):
                while self._queue_full():
                    self.step()  # make room rather than refuse: the caller waits for all of them anyway
                requests.append(self.submit(prompt, p, detokenize=detokenize))
            self.run_until_idle()
        finally:
            self._batch = False
        return [r.result() for r in requests]

    def start(self) -> None:
        """Step in a background thread whenever there is work (``stop()`` ends it)."""
        self._thread = threading.Thread(target=self._loop, name="marin-engine", daemon=True)
        self._thread.start()

    def stop(self, cancel: bool = True, timeout: float | None = 30) -> None:
        """Refuse new requests; cancel the running ones (or, with ``cancel=False``, let them finish); wait up
        to ``timeout`` seconds for the thread to end (0: do not wait)."""
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
            except Exception as error:  # an engine bug (requests' own failures stay inside step): never die
                logger.exception("engine step failed")
                for r in [*self.slots, *self.waiting]:
                    if r is not None:
                        self._fail(r, error)
                self.cache = self._new_cache()

    # ---- internals: admission, failures ----------------------------------------------------------

    def _cast(self, params):
        """The floating-point parameters in ``config.dtype`` (a copy), or as they are."""
        if self.config.dtype is None:
            return params
        dtype = jnp.dtype(self.config.dtype)
        return jax.tree.map(lambda x: x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x, params)

    def _new_cache(self):
        dtype, config = self.params["embed"].dtype, self.config
        return init_slot_cache(self.cfg, config.slots, config.prefill_chunk, dtype, config.rolling_windows)

    def _admit(self) -> None:
        with self._lock:
            for r in [*self.slots, *self.waiting]:
                if r is not None and r.cancelled:
                    self._finish(r, "cancelled")
            while self.waiting and None in self.slots:
                r = self.waiting.popleft()
                r.slot = self.slots.index(None)
                self.slots[r.slot] = r

    def _release(self, r: Request) -> None:
        with self._lock:
            if r.slot is not None and self.slots[r.slot] is r:
                self.slots[r.slot] = None
            if r in self.waiting:
                self.waiting.remove(r)

    def _finish(self, r: Request, reason: str) -> None:
        self._release(r)
        try:
            r.finish(reason)
        except Exception as error:  # its text failed to decode: its failure, nobody else's
            logger.exception("finishing a request failed")
            r.finish("error", error)

    def _fail(self, r: Request, error: BaseException) -> None:
        self._release(r)
        r.finish("error", error)

    def _guard(self, r: Request, work: Callable, *args) -> None:
        """Host-side work of one request; if it raises, that request fails and the step goes on."""
        try:
            work(r, *args)
        except Exception as error:
            logger.exception("a request failed in an engine step")
            self._fail(r, error)

    def _run(self, requests: list[Request], program, *args):
        """``program(*args)`` (its last output is the new cache) with the rest of its outputs on the host; on
        failure, None: a lone request fails, several become suspects, a consumed cache is rebuilt and every
        request in a slot feeds its tokens again."""
        try:
            *outputs, cache = program(*args)
            outputs = jax.device_get(outputs)  # a failure while the program runs surfaces here
        except Exception as error:
            logger.exception("an engine program failed (%d request(s) in it)", len(requests))
            if any(x.is_deleted() for x in jax.tree.leaves(self.cache)):
                self.cache = self._new_cache()
                for r in self.slots:
                    if r is not None:
                        r.restart()
            if len(requests) == 1:
                self._fail(requests[0], error)
            else:
                for r in requests:
                    r.suspect_until = len(r.tokens) + 1
            return None
        self.cache = cache
        return outputs

    # ---- internals: the programs' inputs and outputs --------------------------------------------------

    def _rows(self, requests: list[Request | None]) -> SamplingRows:
        """Each request's packed sampling row and how many tokens it generated (None: a greedy filler row)."""
        return SamplingRows.of([(0.0, 0, 1.0, 0, 0) if r is None else (*r.row, len(r.tokens)) for r in requests])

    @property
    def _mixed_chunk(self) -> int:
        return min(self.config.mixed_chunk, self.config.prefill_chunk)

    def _chunk(self, r: Request, size: int):
        """The next ``size`` tokens r feeds (zero-padded), the tokens after them (the targets whose
        log-probabilities echo reports), and how many are real."""
        valid = min(len(r.feed) - r.fed, size)
        tokens, targets = np.zeros(size, np.int32), np.zeros(size, np.int32)
        tokens[:valid] = r.feed[r.fed : r.fed + valid]
        nxt = r.feed[r.fed + 1 : r.fed + valid + 1]
        targets[: len(nxt)] = nxt
        return tokens, targets, valid, nxt

    def _scored(self, r: Request) -> bool:
        return r.params.prompt_logprobs is not None and not r.replaying

    def _prefill(self, r: Request) -> bool:
        size = _bucket(len(r.feed) - r.fed, self.config.prefill_chunk)
        tokens, targets, valid, nxt = self._chunk(r, size)
        span = attention_span(r.fed + size, self.longest)
        args = (self.cache, r.slot, tokens, targets, r.fed, valid, self._scored(r), self._rows([r]), span)
        outputs = self._run([r], prefill_chunk, self.cfg, self.params, *args)
        if outputs is None:
            return False
        (out,) = outputs
        self._guard(r, self._fed, out[:4], nxt, valid, out.next, 0)
        return True

    def _packable(self, prefilling: list[Request]) -> list[Request]:
        """The oldest prompts not yet begun that fit in one chunk together (prompt scoring keeps its own chunks),
        to be read in one ``prefill_packed`` step of ``prefill_chunk`` tokens: in ``generate`` whenever there
        are any, otherwise when several fill more than half of it (a lone prompt, or a few short ones, take
        their own smaller chunks: a lower latency for the first token).

        A batch (``generate``) runs a few programs at full size: packed chunks, decoding over every slot, no
        mixed steps. Each program a smaller step would use costs a compilation (1.2-1.9 s for the quickstart's
        model on 2 CPU cores), more than the smaller steps save: the quickstart's instruct eval (200 replies of
        up to 32 tokens) 13.4 -> 7.4 s, 7 engine programs -> 2 (docs/serving.md)."""
        chunk, group, total = self.config.prefill_chunk, [], 0
        for r in sorted(prefilling, key=lambda r: r.submitted):
            if r.fed or self._scored(r):
                continue
            if total + len(r.feed) > chunk or len(group) == packed_rows(self.config.slots):
                break
            group.append(r)
            total += len(r.feed)
        worth_it = self._batch or (len(group) > 1 and 2 * total > chunk)
        return group if worth_it else []

    def _prefill_packed(self, group: list[Request]) -> None:
        self.packed_steps += 1
        size, count = self.config.prefill_chunk, packed_rows(self.config.slots)
        tokens, slots, last = np.zeros(size, np.int32), np.zeros(count, np.int32), np.zeros(count, np.int32)
        segments, positions = np.full(size, count, np.int32), np.full(size, self.scratch + 1, np.int32)
        start = 0
        for j, r in enumerate(group):
            n = len(r.feed)
            tokens[start : start + n] = r.feed
            segments[start : start + n], positions[start : start + n] = j, np.arange(n)
            slots[j], last[j] = r.slot, start + n - 1
            start += n
        rows = self._rows([*group, *[None] * (count - len(group))])
        args = (self.cache, slots, tokens, segments, positions, last, rows)
        outputs = self._run(group, prefill_packed, self.cfg, self.params, *args)
        if outputs is None:
            return
        (out,) = outputs
        for j, r in enumerate(group):
            self._guard(r, self._fed, None, [], len(r.feed), out, j)

    def _decode_inputs(self, decoding: list[Request]):
        """Each decoding slot's last token and its position (other rows: the scratch position), for the
        smallest width of rows covering them."""
        width = self.config.slots if self._batch else decode_rows(max(r.slot for r in decoding) + 1, self.config.slots)
        tokens = np.zeros(width, np.int32)
        positions = np.full(width, self.scratch, np.int32)
        for r in decoding:
            tokens[r.slot] = r.tokens[-1]
            positions[r.slot] = len(r.prompt) + len(r.tokens) - 1
        rows = self._rows([r if r in decoding else None for r in self.slots[:width]])
        return tokens, positions, rows, max(positions[r.slot] for r in decoding) + 1

    def _decode(self, decoding: list[Request]) -> bool:
        tokens, positions, rows, needed = self._decode_inputs(decoding)
        span = attention_span(needed, self.longest)
        outputs = self._run(decoding, decode_slots, self.cfg, self.params, self.cache, tokens, positions, rows, span)
        if outputs is None:
            return False
        (out,) = outputs
        for r in decoding:
            self._guard(r, self._accept, out, r.slot)
        return True

    def _mixed(self, r: Request, decoding: list[Request]) -> None:
        """A prefill chunk of r and a decoding step of ``decoding`` in one program."""
        self.mixed_steps += 1
        tokens, targets, valid, nxt = self._chunk(r, self._mixed_chunk)
        decode_tokens, positions, rows, needed = self._decode_inputs(decoding)
        span = attention_span(max(needed, r.fed + self._mixed_chunk), self.longest)
        chunk_args = (r.slot, tokens, targets, r.fed, valid, self._scored(r), self._rows([r]))
        outputs = self._run(
            [r, *decoding],
            mixed_step,
            self.cfg,
            self.params,
            self.cache,
            *chunk_args,
            decode_tokens,
            positions,
            rows,
            span,
        )
        if outputs is None:
            return
        scores, out = outputs  # out's row 0: r's next token; row 1 + i: decoding slot i's
        self._guard(r, self._fed, scores, nxt, valid, out, 0)
        for d in decoding:
            self._guard(d, self._accept, out, 1 + d.slot)

    def _fed(self, r: Request, scores, nxt: list[int], valid: int, sampled, row: int) -> None:
        """After a chunk went in: record its prompt log-probabilities (when asked), and once everything r
        feeds is in, take the first generated token (row ``row`` of ``sampled``), or after a replay go on
        decoding."""
        if self._scored(r):
            logp, _, top_lp, top_tok = scores
            n = r.params.prompt_logprobs
            for i, token in enumerate(nxt):
                top = list(zip(top_tok[i, :n].tolist(), top_lp[i, :n].tolist()))
                r.prompt_logprobs.append(TokenLogprob(token, float(logp[i]), top))
        r.fed += valid
        if r.fed < len(r.feed):
            return
        if r.replaying:
            r.replaying = False
        elif r.params.max_tokens == 0:
            self._finish(r, "length")
        else:
            self._accept(r, sampled, row)

    def _accept(self, r: Request, out, row: int) -> None:
        """Record the token sampled for ``r`` (row ``row`` of ``out``) and finish the request if it ends."""
        if r.cancelled:
            self._finish(r, "cancelled")
            return
        token, entry = int(out.token[row]), None
        if r.params.logprobs is not None:
            n = r.params.logprobs
            top = list(zip(out.top_token[row, :n].tolist(), out.top_logprob[row, :n].tolist()))
            entry = TokenLogprob(token, float(out.logprob[row]), top)
        reason = r.accept(token, entry, self.cfg.seq_len)
        if reason is not None:
            self._finish(r, reason)


def compilations() -> int:
    """Programs compiled so far for the engine's prefill and decode steps (all engines in the process)."""
    return (
        prefill_chunk._cache_size()
        + prefill_packed._cache_size()
        + decode_slots._cache_size()
        + mixed_step._cache_size()
    )
