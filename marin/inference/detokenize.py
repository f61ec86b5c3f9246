"""Generated tokens to text, a few tokens at a time, cut at the first stop string.

    text = TextStream(tokenizer.decode, stops=("\\n\\n",))
    for token in generated:
        send(text.push(token))      # the text that became final: whole characters, never part of a stop
        if text.stopped:
            break
    send(text.finish())             # the rest (a trailing incomplete character decodes as U+FFFD)
    text.text                       # everything, cut before the stop string

Decoding the whole generation again at every token costs O(n²) over a reply; ``push`` decodes only the tokens
since the last complete character (vLLM's prefix/read offsets): the text of ``ids[prefix:]`` minus that of
``ids[prefix:read]`` is what the new tokens added. A token that ends inside a multi-byte character adds
nothing until the character is complete. A stop string is searched only where it could newly end, and the last
``len(longest stop) - 1`` characters are held back (they may be the start of a stop), so what was handed out
is never taken back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

INCOMPLETE = "\ufffd"  # what a tokenizer decodes an unfinished byte sequence to


class TextStream:
    def __init__(self, decode: Callable[[list[int]], str], stops: Sequence[str] = ()):
        self.decode = decode
        self.stops = tuple(stops)
        self.hold = max((len(s) for s in self.stops), default=1) - 1
        self.ids: list[int] = []
        self.prefix = 0  # ids[prefix:read] decode to the last complete piece (context for the next tokens)
        self.read = 0
        self.text = ""
        self.sent = 0  # characters of text already handed out
        self.stopped = False

    def push(self, token: int) -> str:
        """Add a token; returns the text that became final."""
        if self.stopped:
            return ""
        self.ids.append(token)
        self._extend(final=False)
        return self._release(final=self.stopped)

    def finish(self) -> str:
        """No more tokens: returns what was held back (and a trailing incomplete character, as U+FFFD)."""
        if not self.stopped:
            self._extend(final=True)
        return self._release(final=True)

    def _extend(self, final: bool) -> None:
        if self.read == len(self.ids):
            return
        before = self.decode(self.ids[self.prefix : self.read])
        after = self.decode(self.ids[self.prefix :])
        if after == before and not after.endswith(INCOMPLETE) and not final:
            self.ids.pop()  # no text at all (a special token left out): keep the window short
            return
        if len(after) <= len(before) or (after.endswith(INCOMPLETE) and not final):
            return
        start = len(self.text)
        self.text += after[len(before) :]
        self.prefix, self.read = self.read, len(self.ids)
        self._cut_at_stop(start)

    def _cut_at_stop(self, start: int) -> None:
        """Cut the text before the first stop string that ends past ``start`` (the earlier text had none)."""
        found = [i for s in self.stops if (i := self.text.find(s, max(0, start - len(s) + 1), len(self.text))) >= 0]
        if found:
            self.text = self.text[: min(found)]
            self.stopped = True

    def _release(self, final: bool) -> str:
        end = len(self.text) if final else max(self.sent, len(self.text) - self.hold)
        delta, self.sent = self.text[self.sent : end], end
        return delta


def text_offsets(decode: Callable[[list[int]], str], ids: Sequence[int]) -> list[int]:
    """Where each token's text starts in the text of ``ids`` (OpenAI's ``text_offset``): a token that decodes
    to nothing (a special token left out of the text) or ends inside a character gets the offset of the text
    after the tokens before it."""
    stream, offsets = TextStream(decode), []
    for token in ids:
        offsets.append(len(stream.text))
        stream.push(token)
    return offsets
