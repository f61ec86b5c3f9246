"""One generation inside the engine: what was asked (prompt, ``SamplingParams``), how far it got (tokens fed
into the cache, tokens generated, their text) and how it ended (``Result``).

A request's state is touched by the engine's thread only, except ``cancel()`` (any thread) and its listener
(``on_event``), which the engine calls with ``("token", index, text, logprob)`` for each generated token (the
text that became final with it, "" while a character or a possible stop string is incomplete; the logprob
entry or None) and ``("done", result)`` at the end (a ``Result``, or the exception that failed the request).
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
import threading
import time

from marin.inference.detokenize import TextStream
from marin.inference.sampling_params import SamplingParams, packed_row

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class TokenLogprob:
    token: int
    logprob: float | None  # None for the first prompt token (nothing conditions it)
    top: list[tuple[int, float]]  # the most likely tokens there, best first


@dataclasses.dataclass
class Result:
    tokens: list[int]
    """Every generated token, the stop token included when one ended generation."""
    text: str
    """The generated text, ending before a stop token or stop string ("" without a ``detokenize``)."""
    finish_reason: str  # "stop" | "length" | "cancelled"
    logprobs: list[TokenLogprob] | None
    """One entry per generated token (the stop token's included), when ``SamplingParams.logprobs`` is set."""
    prompt_logprobs: list[TokenLogprob] | None
    prompt_tokens: int
    time_to_first_token: float | None


class Request:
    """One submitted generation; ``result()`` waits for it."""

    def __init__(self, prompt: list[int], params: SamplingParams, detokenize, on_event, end_tokens):
        self.prompt = prompt
        self.params = params
        self.on_event = on_event
        self.end_tokens = () if params.ignore_eos else tuple(end_tokens)
        self.seed = params.seed if params.seed is not None else secrets.randbits(32)
        self.row = packed_row(params, self.seed)
        self.tokens: list[int] = []
        self.token_logprobs: list[TokenLogprob] = []
        self.prompt_logprobs: list[TokenLogprob] = [TokenLogprob(prompt[0], None, [])]
        self.text = TextStream(detokenize, params.stop) if detokenize is not None else None
        self.feed = prompt  # what goes into the cache before decoding: the prompt (see ``restart``)
        self.fed = 0  # tokens of ``feed`` already in the cache
        self.replaying = False  # re-feeding tokens after the cache was lost: nothing to record or sample
        self.suspect_until: int | None = None  # was in a failed program: runs alone until it has this many tokens
        self.slot: int | None = None
        self.cancelled = False
        self.submitted = time.perf_counter()
        self.first_token_at: float | None = None
        self._done = threading.Event()
        self._result: Result | BaseException | None = None

    def cancel(self) -> None:
        """Stop generating: the engine frees the slot at its next step (safe from any thread)."""
        self.cancelled = True

    @property
    def done(self) -> bool:
        return self._done.is_set()

    @property
    def prefilling(self) -> bool:
        return self.fed < len(self.feed)

    def result(self, timeout: float | None = None) -> Result:
        """The result; raises the error that failed the request, if one did."""
        if not self._done.wait(timeout):
            raise TimeoutError("the request did not finish in time")
        if isinstance(self._result, BaseException):
            raise self._result
        return self._result

    def restart(self) -> None:
        """The cache lost this request's keys and values: feed them again, the prompt and every generated token
        but the last (the next input), recording and sampling nothing, then go on decoding."""
        self.feed = self.prompt + self.tokens[:-1]
        self.fed = 0
        self.replaying = bool(self.tokens)
        if not self.tokens:
            del self.prompt_logprobs[1:]  # scored again as the prompt is fed again

    def emit(self, *event) -> None:
        if self.on_event is not None:
            try:
                self.on_event(*event)
            except Exception:  # a listener's failure (a closed connection) never stops the engine
                logger.exception("request listener failed")
                self.cancel()

    def finish(self, reason: str, error: BaseException | None = None) -> None:
        """Record the result (or the error), wake ``result()`` and tell the listener."""
        if self.done:
            return
        if error is None:
            if self.text is not None:
                self.text.finish()
            self._result = Result(
                tokens=list(self.tokens),
                text=self.text.text if self.text is not None else "",
                finish_reason=reason,
                logprobs=self.token_logprobs if self.params.logprobs is not None else None,
                prompt_logprobs=self.prompt_logprobs if self.params.prompt_logprobs is not None else None,
                prompt_tokens=len(self.prompt),
                time_to_first_token=None if self.first_token_at is None else self.first_token_at - self.submitted,
            )
        else:
            self._result = error
        self._done.set()
        self.emit("done", self._result)

    def accept(self, token: int, entry: TokenLogprob | None, seq_len: int) -> str | None:
        """Record a generated token; returns the finish reason if generation ends with it."""
        if self.first_token_at is None:
            self.first_token_at = time.perf_counter()
        self.tokens.append(token)
        if entry is not None:
            self.token_logprobs.append(entry)
        if token in self.end_tokens or token in self.params.stop_token_ids:
            self.emit("token", len(self.tokens) - 1, "", entry)
            return "stop"
        delta = self.text.push(token) if self.text is not None else ""
        self.emit("token", len(self.tokens) - 1, delta, entry)
        if self.text is not None and self.text.stopped:
            return "stop"
        if len(self.tokens) >= self.params.max_tokens or len(self.prompt) + len(self.tokens) >= seq_len:
            return "length"
        return None
