"""Small chat tokenizers trained in a second: one that reserves the chat tokens (the lab's BPE as the
quickstart trains it) and one that gets them appended by ``with_chat_tokens`` (like any foreign tokenizer)."""

import json

import pytest

from marin.chat import CHAT_SPECIAL_TOKENS, ChatTokenizer, SftTokenizeConfig, tokenize_chat, with_chat_tokens
from marin.tokenize import TrainTokenizerConfig, build_bpe_tokenizer

TEXTS = [
    "Tom had a red ball. He liked to play with it in the park every day.",
    "What is 12 plus 7? The answer is 19. Questions and answers, numbers and words.",
    "Lily saw a big dog. The dog was happy and ran around the garden. Ünïcödé and emoji 🙂 too.",
] * 50


def train_bpe(special_tokens):
    config = TrainTokenizerConfig(input_paths=["-"], output_path="-", vocab_size=400, special_tokens=special_tokens)
    return build_bpe_tokenizer(iter(TEXTS), config)


@pytest.fixture(scope="session")
def reserved_chat():
    """Chat tokens reserved at training time (ids right after <|endoftext|> and <|pad|>)."""
    return ChatTokenizer(train_bpe(("<|endoftext|>", "<|pad|>", *CHAT_SPECIAL_TOKENS)))


@pytest.fixture(scope="session")
def added_chat():
    """Chat tokens appended to a tokenizer trained without them."""
    return ChatTokenizer(with_chat_tokens(train_bpe(("<|endoftext|>", "<|pad|>"))))


CONVERSATIONS = [
    [{"role": "user", "content": "What is 12 plus 7?"}, {"role": "assistant", "content": "19"}],
    [
        {"role": "system", "content": "You are a helpful assistant. Answer briefly."},
        {"role": "user", "content": "Who had a red ball?"},
        {"role": "assistant", "content": "Tom had a red ball."},
        {"role": "user", "content": "  And the dog?\n"},
        {"role": "assistant", "content": "The dog was happy 🙂 and ran around the garden.\n\nÜnïcödé."},
    ],
    [
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "and 3+3?"},
        {"role": "assistant", "content": " 6 "},
    ],
]


@pytest.fixture(scope="session")
def sft_dir(tmp_path_factory, reserved_chat):
    """An SFT tokenize step's output (tokenizer/, train/, validation/) over ``CONVERSATIONS``."""
    root = tmp_path_factory.mktemp("sft")
    reserved_chat.tokenizer.save(str(root / "tokenizer.json"))
    (root / "chat.jsonl").write_text("".join(json.dumps({"messages": c}) + "\n" for c in CONVERSATIONS * 10))
    tokenize_chat(
        SftTokenizeConfig(
            train_paths=[str(root / "chat.jsonl")],
            validation_paths=[str(root / "chat.jsonl")],
            tokenizer=str(root / "tokenizer.json"),
            output_path=str(root / "sft"),
        )
    )
    return root / "sft"
