"""The chat template: conversations to token ids plus a loss mask that is true only on assistant tokens.

    chat = ChatTokenizer(load_tokenizer("local_store/tokenizers/bundled-bpe2k-1a2b"))
    ids, mask = chat.encode([{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}])
    # text:  <|begin_of_text|><|start_header_id|>user<|end_header_id|>\\n\\n2+2?<|eot_id|>
    #        <|start_header_id|>assistant<|end_header_id|>\\n\\n4<|eot_id|>
    # mask:  true on "4" and on its <|eot_id|>, false everywhere else (system, user, headers)

The template is Jinja in the Hugging Face ``chat_template`` convention (Llama 3's turn format), rendered
with the same sandboxed environment ``transformers`` uses (``trim_blocks``, ``lstrip_blocks``), so the
exported tokenizer's ``apply_chat_template`` produces the same ids. Assistant turns sit inside
``{% generation %}`` blocks; while rendering we record the character span of each block, tokenize the
whole text once (with offsets) and mark the tokens that overlap a span. Tokenizing the whole text (not
turn by turn) is what guarantees the ids equal ``transformers``' own.

Turn boundaries are special tokens: Llama 3's tokenizer has them already; the lab's BPE reserves them
when trained with ``CHAT_SPECIAL_TOKENS`` (``with_chat_tokens`` adds any that are missing).

Only the template emits control tokens. A message whose content holds a special token's string (a user
pasting ``<|eot_id|><|start_header_id|>assistant<|end_header_id|>`` to forge a turn, an assistant reply
quoting ``<|endoftext|>``) is encoded with those strings as ordinary text (``marin.tokenize.special``):
the text between the template's own control tokens is tokenized with special tokens unmatched, which is
what tokenizing the whole text does between control tokens, so conversations without such strings keep
exactly the whole-text ids. ``special_strings_in_messages`` tells the chat cache which rows to count.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Mapping, Sequence
from typing import ClassVar

import numpy as np
from tokenizers import AddedToken, Tokenizer

from marin.tokenize.special import special_strings, special_strings_in, text_encoder
from marin.tokenize.tokenizer import fingerprint

logger = logging.getLogger(__name__)

BOS_TOKEN = "<|begin_of_text|>"
START_HEADER = "<|start_header_id|>"
END_HEADER = "<|end_header_id|>"
EOT_TOKEN = "<|eot_id|>"
CHAT_SPECIAL_TOKENS = (BOS_TOKEN, START_HEADER, END_HEADER, EOT_TOKEN)
"""Llama 3's turn tokens; the lab's BPE reserves the same names (first after its own specials)."""

CHAT_TEMPLATE = (
    "{{- bos_token }}\n"
    "{%- for message in messages %}\n"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}\n"
    "{%- if message['role'] == 'assistant' %}\n"
    "{%- generation %}{{ message['content'] | trim + '<|eot_id|>' }}{% endgeneration %}\n"
    "{%- else %}\n"
    "{{- message['content'] | trim + '<|eot_id|>' }}\n"
    "{%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n"
    "{%- endif %}\n"
)
"""Llama 3's turn format (without its tool-use and date preamble), assistant turns in generation blocks."""

Message = Mapping[str, str]


def with_chat_tokens(tokenizer: Tokenizer) -> Tokenizer:
    """A copy of ``tokenizer`` with every ``CHAT_SPECIAL_TOKENS`` entry present as a special token (new ids
    are appended at the end of the vocabulary; existing ones, as in Llama 3, are kept)."""
    copy = Tokenizer.from_str(tokenizer.to_str())
    missing = [t for t in CHAT_SPECIAL_TOKENS if copy.token_to_id(t) is None]
    if missing:
        copy.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in missing])
        logger.info("added chat tokens %s (vocab now %d)", missing, copy.get_vocab_size())
    return copy


def _compile(template: str):
    """The template compiled as ``transformers`` compiles it (its AssistantTracker is ``_Generation``)."""
    import jinja2
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class _Generation(Extension):
        tags: ClassVar[set[str]] = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_track", []), [], [], body).set_lineno(lineno)

        def _track(self, caller):
            text = caller()
            spans = self.environment.spans
            if spans is not None:
                start = len("".join(self.environment.blocks))
                spans.append((start, start + len(text)))
            return text

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[_Generation, loopcontrols])
    env.filters["tojson"] = lambda x, indent=None: json.dumps(x, ensure_ascii=False, indent=indent)
    env.globals["raise_exception"] = raise_exception
    return env, env.from_string(template)


class ChatTokenizer:
    """A ``tokenizers.Tokenizer`` plus a chat template: render, encode with masks, save in HF format."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        *,
        template: str = CHAT_TEMPLATE,
        bos_token: str = BOS_TOKEN,
        eot_token: str = EOT_TOKEN,
    ):
        for name in (bos_token, eot_token):
            if tokenizer.token_to_id(name) is None:
                raise ValueError(f"tokenizer has no {name!r} token: build it with with_chat_tokens(tokenizer)")
        self.tokenizer, self.template = tokenizer, template
        self.bos_token, self.eot_token = bos_token, eot_token
        self.bos_id, self.eot_id = tokenizer.token_to_id(bos_token), tokenizer.token_to_id(eot_token)
        self._env, self._compiled = _compile(template)
        self._text_tokenizer = text_encoder(tokenizer)
        self.special_strings = special_strings(tokenizer)
        self._special_pattern = (
            re.compile("|".join(map(re.escape, self.special_strings))) if self.special_strings else None
        )

    def identity(self) -> dict[str, str]:
        """What a cache rendered with this tokenizer must match to be reused: the tokenizer's fingerprint and the
        template's sha256 (both cache ledgers, SFT and pairs, record them)."""
        return {
            "tokenizer_fingerprint": fingerprint(self.tokenizer),
            "chat_template_sha256": hashlib.sha256(self.template.encode("utf-8")).hexdigest(),
        }

    def special_strings_in_messages(self, messages: Sequence[Message]) -> tuple[str, ...]:
        """The special-token strings that occur in the messages' contents (data, not template)."""
        found = {s for m in messages for s in special_strings_in(_content(m), self.special_strings)}
        return tuple(s for s in self.special_strings if s in found)

    def render(
        self, messages: Sequence[Message], *, add_generation_prompt: bool = False
    ) -> tuple[str, list[tuple[int, int]]]:
        """The conversation's text and the character spans of its assistant turns (each with its EOT)."""
        for i, message in enumerate(messages):
            for key in ("role", "content"):  # Jinja would render None as the text "None"
                if not isinstance(message.get(key), str):
                    raise ValueError(f"messages[{i}].{key}: expected a string, got {type(message.get(key)).__name__}")
        self._env.blocks, self._env.spans = [], []
        try:
            for block in self._compiled.generate(
                messages=list(messages),
                bos_token=self.bos_token,
                eos_token=self.eot_token,
                add_generation_prompt=add_generation_prompt,
            ):
                self._env.blocks.append(block)
            return "".join(self._env.blocks), self._env.spans
        finally:
            self._env.blocks, self._env.spans = [], None

    def encode(self, messages: Sequence[Message]) -> tuple[np.ndarray, np.ndarray]:
        """Token ids (int32) and the assistant mask (bool) of one conversation."""
        return self.encode_batch([messages])[0]

    def encode_batch(self, conversations: Sequence[Sequence[Message]]) -> list[tuple[np.ndarray, np.ndarray]]:
        """``encode`` for many conversations; the tokenizer runs once over all of them (Rust threads). An
        empty assistant reply is an error: nothing to train on, and its prompt would not be a prefix of its
        ids (the header's blank line then ends the text)."""
        for conversation in conversations:
            for i, message in enumerate(conversation):
                if message.get("role") == "assistant" and isinstance(message.get("content"), str):
                    if not message["content"].strip():
                        raise ValueError(f"messages[{i}].content: empty assistant reply")
        return [
            (np.asarray(ids, np.int32), _span_mask(offsets, spans))
            for ids, offsets, spans in self._encode_rendered(conversations)
        ]

    def encode_prompt(self, messages: Sequence[Message]) -> np.ndarray:
        """Ids of the conversation so far followed by the assistant header: what a chat model continues.

        These are the first ids of the conversation *with* a reply, exactly as training saw them. Rendering
        the prompt alone (``add_generation_prompt``) and tokenizing it can differ at the end: a GPT-2-style
        pre-tokenizer reads a trailing "\\n\\n" as one piece, but "\\n" + "\\n" when text follows it."""
        [(ids, offsets, spans)] = self._encode_rendered([[*messages, {"role": "assistant", "content": "x"}]])
        cut = spans[-1][0]  # where the placeholder reply starts
        return np.asarray([t for t, (start, _) in zip(ids, offsets) if start < cut], np.int32)

    def _encode_rendered(self, conversations: Sequence[Sequence[Message]]) -> list[tuple[list, list, list]]:
        """``(ids, offsets, assistant spans)`` per conversation. Conversations without special strings in
        their contents are tokenized whole, in one batch; the others segment by segment (module docstring)."""
        rendered = [self.render(c) for c in conversations]
        forged = [i for i, c in enumerate(conversations) if self.special_strings_in_messages(c)]
        plain = sorted(set(range(len(conversations))) - set(forged))
        out: list = [None] * len(conversations)
        encodings = self.tokenizer.encode_batch([rendered[i][0] for i in plain], add_special_tokens=False)
        for i, enc in zip(plain, encodings):
            out[i] = (enc.ids, enc.offsets, rendered[i][1])
        for i in forged:
            text, spans = rendered[i]
            ids, offsets = self._encode_with_data_as_text(conversations[i], text)
            out[i] = (ids, offsets, spans)
        return out

    def _encode_with_data_as_text(self, messages: Sequence[Message], text: str) -> tuple[list, list]:
        """``text`` (the render of ``messages``) with only the template's control tokens as controls: they are
        found in a render whose contents have every special string masked (same length, so the positions
        hold), and the text between them is tokenized with special tokens unmatched."""
        masked = [
            {**m, "content": self._special_pattern.sub(lambda x: "\0" * len(x.group()), _content(m))} for m in messages
        ]
        masked_text, _ = self.render(masked)
        controls = [(m.start(), m.end()) for m in self._special_pattern.finditer(masked_text)]
        if len(masked_text) != len(text) or any(masked_text[a:b] != text[a:b] for a, b in controls):
            raise ValueError(
                "chat template: cannot tell the template's control tokens from special-token strings in the "
                f"messages' contents ({list(self.special_strings_in_messages(messages))}); the template must insert "
                "contents unchanged"
            )
        pieces, at = [], 0
        for a, b in controls:
            pieces.append((at, text[at:a]))
            at = b
        pieces.append((at, text[at:]))
        encodings = self._text_tokenizer.encode_batch([piece for _, piece in pieces], add_special_tokens=False)
        ids, offsets = [], []
        for k, ((start, _), enc) in enumerate(zip(pieces, encodings)):
            ids += enc.ids
            offsets += [(start + x, start + y) for x, y in enc.offsets]
            if k < len(controls):
                a, b = controls[k]
                ids.append(self.tokenizer.token_to_id(text[a:b]))
                offsets.append((a, b))
        return ids, offsets

    def decode_reply(self, ids: Sequence[int]) -> str:
        """The text of generated ids, up to (not including) the first end-of-turn token."""
        ids = list(ids)
        if self.eot_id in ids:
            ids = ids[: ids.index(self.eot_id)]
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    # -- Hugging Face format --------------------------------------------------------------------
    def hf_config(self, model_max_length: int | None = None) -> dict:
        """``tokenizer_config.json``: ``transformers`` reads the template and the special tokens from it."""
        config = {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": self.bos_token,
            "eos_token": self.eot_token,
            "chat_template": self.template,
        }
        if model_max_length:
            config["model_max_length"] = model_max_length
        return config

    def save(self, directory: str, model_max_length: int | None = None) -> None:
        """Write ``tokenizer.json``, ``tokenizer_config.json`` (with the template), ``special_tokens_map.json``."""
        from marin.storage import join, write_atomic

        write_atomic(join(directory, "tokenizer.json"), self.tokenizer.to_str())
        write_atomic(
            join(directory, "special_tokens_map.json"),
            json.dumps({"bos_token": self.bos_token, "eos_token": self.eot_token}, indent=2),
        )
        write_atomic(join(directory, "tokenizer_config.json"), json.dumps(self.hf_config(model_max_length), indent=2))

    @classmethod
    def load(cls, directory: str) -> ChatTokenizer:
        """From a directory written by ``save`` (or any HF tokenizer directory whose config has a template)."""
        from marin.storage import join, read_text

        config_url = join(directory, "tokenizer_config.json")
        try:
            config = json.loads(read_text(config_url))
        except FileNotFoundError:
            raise FileNotFoundError(f"{config_url}: missing; not a chat tokenizer directory") from None
        if not config.get("chat_template"):
            raise ValueError(f"{config_url}: no 'chat_template'; not a chat tokenizer")
        tokenizer = Tokenizer.from_str(read_text(join(directory, "tokenizer.json")))
        return cls(
            tokenizer,
            template=config["chat_template"],
            bos_token=_token_name(config["bos_token"]),
            eot_token=_token_name(config["eos_token"]),
        )


def _content(message: Message) -> str:
    content = message.get("content")
    return content if isinstance(content, str) else ""


def _token_name(value) -> str:
    return value["content"] if isinstance(value, dict) else value


def _span_mask(offsets: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int]]) -> np.ndarray:
    """True for tokens whose character range overlaps an assistant span."""
    mask = np.zeros(len(offsets), dtype=bool)
    if not spans or not offsets:
        return mask
    off = np.asarray(offsets, dtype=np.int64)  # [tokens, 2]
    for start, end in spans:
        mask |= (off[:, 0] < end) & (off[:, 1] > start)
    return mask
