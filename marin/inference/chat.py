"""python -m marin.inference.chat --checkpoint PATH [--message "What does the cow say?"] [--system "..."]
   [--tokenizer DIR] [--max_new_tokens 128] [--temperature 0] [--top_p 0.9] [--top_k 50] [--seed 0]

Talk to a chat model. PATH is an SFT run's output directory (its chat tokenizer is found through its
``sft.json``) or a Hugging Face export of one (its ``tokenizer_config.json`` carries the template);
``--tokenizer`` names a chat tokenizer directory explicitly. Each turn is rendered with the chat template,
the reply generated with the KV cache until the end-of-turn token (or ``--max_new_tokens``) and printed.

- ``--message`` (repeatable): the user turns of one conversation, each reply printed in turn;
- otherwise, with stdin a terminal: interactive (``/reset`` starts over, ``/exit`` or Ctrl-D quits);
- otherwise each line of stdin is the next user turn.

When the conversation outgrows the model's context, the oldest turns (never the system prompt) are dropped.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Iterator

from marin.logs import configure_logging


def find_chat_tokenizer(checkpoint: str, tokenizer: str | None = None) -> str | None:
    """The chat tokenizer directory of ``checkpoint`` — explicit (if it has a chat template), the export
    itself, or the one its SFT run recorded — or None for a model without a chat template."""
    from marin.storage import exists, join, read_text
    from marin.trainer.sft import SFT_INFO

    for candidate in (tokenizer, checkpoint):
        config_url = join(candidate, "tokenizer_config.json") if candidate else None
        if config_url and exists(config_url) and json.loads(read_text(config_url)).get("chat_template"):
            return candidate
    info_url = join(checkpoint, SFT_INFO)
    if exists(info_url) and json.loads(read_text(info_url)).get("chat_tokenizer"):
        return json.loads(read_text(info_url))["chat_tokenizer"]
    return None


def chat_tokenizer_dir(checkpoint: str, tokenizer: str | None) -> str:
    """The chat tokenizer of ``checkpoint``: explicit, the export itself, or the one its SFT run recorded."""
    if tokenizer:
        return tokenizer
    found = find_chat_tokenizer(checkpoint)
    if found is None:
        raise SystemExit(
            f"{checkpoint}: no chat tokenizer found (not an HF export with a chat template and no SFT record "
            "of one); pass --tokenizer <sft tokenize step>/tokenizer"
        )
    return found


class ChatSession:
    """A conversation with a loaded model: ``reply(text)`` adds a user turn and returns the assistant's."""

    def __init__(self, cfg, params, chat, gen, system: str | None = None):
        self.cfg, self.params, self.chat, self.gen = cfg, params, chat, gen
        self.system = system
        self.reset()

    def reset(self) -> None:
        self.messages = [{"role": "system", "content": self.system}] if self.system else []

    def prompt_ids(self) -> list[int]:
        """The rendered conversation; oldest exchanges dropped while it leaves no room for the reply."""
        budget = self.cfg.seq_len - self.gen.max_new_tokens
        head = 1 if self.system else 0
        while True:
            ids = self.chat.encode_prompt(self.messages).tolist()
            if len(ids) <= budget or len(self.messages) - head <= 1:
                return ids[-budget:]
            del self.messages[head : head + 2]  # one user turn and its reply

    def reply(self, text: str) -> str:
        from marin.inference.sampling import generate

        self.messages.append({"role": "user", "content": text})
        (tokens,) = generate(self.cfg, self.params, [self.prompt_ids()], self.gen)
        answer = self.chat.decode_reply(tokens).strip()
        self.messages.append({"role": "assistant", "content": answer or "…"})
        return answer


def _turns(args) -> Iterator[str]:
    if args.message:
        yield from args.message
        return
    interactive = sys.stdin.isatty()
    while True:
        try:
            line = input("you> ") if interactive else sys.stdin.readline()
        except EOFError:
            return
        if not interactive and not line:
            return
        if line.strip():
            yield line.strip()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="Chat with a fine-tuned model (chat template, KV cache).")
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--tokenizer", default=None, help="chat tokenizer directory (default: found from the run)")
    parser.add_argument("--message", action="append", default=[], help="a user turn (repeatable); else stdin")
    parser.add_argument("--system", default=None, help="system prompt")
    parser.add_argument("--max_new_tokens", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=0.0, help="0: greedy")
    parser.add_argument("--top_k", type=int, default=None)
    parser.add_argument("--top_p", type=float, default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    configure_logging(logging.WARNING)

    from marin.chat.template import ChatTokenizer
    from marin.inference import GenerationConfig, load_model, place_params
    from marin.tokenize import eos_id

    chat = ChatTokenizer.load(chat_tokenizer_dir(args.checkpoint, args.tokenizer))
    cfg, params, _ = load_model(args.checkpoint)
    if args.max_new_tokens >= cfg.seq_len:
        raise SystemExit(f"--max_new_tokens {args.max_new_tokens} leaves no room for a prompt in seq_len {cfg.seq_len}")
    gen = GenerationConfig(
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed,
        stop_tokens=(chat.eot_id, eos_id(chat.tokenizer)),
    )
    session = ChatSession(cfg, place_params(cfg, params), chat, gen, system=args.system)
    interactive = not args.message and sys.stdin.isatty()
    for text in _turns(args):
        if text in ("/exit", "/quit"):
            break
        if text == "/reset":
            session.reset()
            continue
        answer = session.reply(text)
        print(f"assistant> {answer}" if interactive else answer, flush=True)


if __name__ == "__main__":
    main()
