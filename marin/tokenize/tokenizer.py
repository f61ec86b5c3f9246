"""Tokenizers: load any HF `tokenizers` tokenizer, fingerprint it, and train a byte-level BPE or derive a
character-level one (``marin.tokenize.chars``).

    tok = load_tokenizer("gs://bucket/tok/tokenizer.json")   # a file or URL
    tok = load_tokenizer("local_store/tokenizers/stories-1a2b")   # a directory holding tokenizer.json
    tok = load_tokenizer("meta-llama/Meta-Llama-3.1-8B")      # a hub repo (needs the hub to be reachable)

The fingerprint (SHA-256 of the tokenizer's JSON) is written into every token cache, so a cache can
never be read with a different tokenizer than the one that built it.

Training is deterministic: the corpus is read in sorted file order and the BPE trainer is fed one
ordered iterator, so the same corpus and config give a byte-identical ``tokenizer.json``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
from collections.abc import Iterator, Sequence

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from marin.storage import exists, is_absolute, join, read_text, write_atomic
from marin.tokenize.chars import build_char_tokenizer
from marin.validation import check, concrete

logger = logging.getLogger(__name__)

TOKENIZER_FILE = "tokenizer.json"
DEFAULT_SPECIAL_TOKENS = ("<|endoftext|>", "<|pad|>")

LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
r"""Llama 3's pre-tokenizer split. Its ``\s*[\r\n]+`` keeps a run of newlines one piece whether text follows or
not, so a chat prompt ending in the header's blank line tokenizes the same alone as inside the conversation
(GPT-2's split reads "\n\n" as one piece at the end, but "\n" + "\n..." before text); digits go in
groups of at most three."""
PRE_TOKENIZERS = ("llama3", "gpt2")
TOKENIZER_KINDS = ("bpe", "char")


def load_tokenizer(name_or_path: str) -> Tokenizer:
    """A tokenizer from a ``tokenizer.json`` file/URL, a directory holding one, or a hub repo id."""
    if name_or_path.endswith(".json") and exists(name_or_path):
        return Tokenizer.from_str(read_text(name_or_path))
    candidate = join(name_or_path, TOKENIZER_FILE)
    if exists(candidate):
        return Tokenizer.from_str(read_text(candidate))
    if is_absolute(name_or_path) or os.path.exists(name_or_path) or name_or_path.startswith("."):
        raise FileNotFoundError(
            f"{name_or_path}: no {TOKENIZER_FILE} there (expected a file or a directory holding one)"
        )
    return _load_from_hub(name_or_path)


def _load_from_hub(repo_id: str) -> Tokenizer:
    """Through the real hub client (honours HF_ENDPOINT, HF_TOKEN and the local HF cache)."""
    from huggingface_hub import hf_hub_download

    try:
        path = hf_hub_download(repo_id, TOKENIZER_FILE)
    except Exception as e:  # network, auth, missing repo: say which tokenizer and why
        raise OSError(f"could not load tokenizer {repo_id!r} from the Hugging Face hub: {type(e).__name__}: {e}") from e
    return Tokenizer.from_file(path)


def fingerprint(tokenizer: Tokenizer) -> str:
    """Identity of a tokenizer's full behaviour (vocab, merges, normalizer, specials)."""
    return hashlib.sha256(tokenizer.to_str().encode("utf-8")).hexdigest()


def eos_id(tokenizer: Tokenizer, eos_token: str | None = None) -> int:
    """The end-of-document token: ``eos_token`` if given, else the first known EOS spelling."""
    names = [eos_token] if eos_token else ["<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|eos|>"]
    for name in names:
        token_id = tokenizer.token_to_id(name)
        if token_id is not None:
            return token_id
    raise ValueError(f"tokenizer has no end-of-document token among {names}; set eos_token in the config")


@dataclasses.dataclass(frozen=True)
class TrainTokenizerConfig:
    input_paths: Sequence[str]
    """Record files, directories or globs (JSONL/Parquet with a text field) to learn merges from."""
    output_path: str
    vocab_size: int = 8192
    special_tokens: Sequence[str] = DEFAULT_SPECIAL_TOKENS
    """The first is the end-of-document token."""
    min_frequency: int = 2
    max_documents: int | None = None
    """Train on at most this many documents (in file order): enough for merges, bounded time."""
    text_key: str = "text"
    pre_tokenizer: str = "llama3"
    """How text is split before BPE: "llama3" (``LLAMA3_SPLIT``, then bytes) or "gpt2" (GPT-2's byte-level
    split, the lab's tokenizers before issue 25)."""
    kind: str = "bpe"
    """"bpe": a byte-level BPE of ``vocab_size`` entries; "char": one id per distinct character of the corpus
    (sorted), then the special tokens (``marin.tokenize.chars``); ``vocab_size`` is then the most it may hold."""

    def __post_init__(self):
        # check() skips executor placeholders: the executor re-validates the concrete config.
        check(
            "TrainTokenizerConfig", "kind", self.kind, lambda v: v in TOKENIZER_KINDS, f"one of {list(TOKENIZER_KINDS)}"
        )
        check(
            "TrainTokenizerConfig",
            "pre_tokenizer",
            self.pre_tokenizer,
            lambda v: v in PRE_TOKENIZERS,
            f"one of {list(PRE_TOKENIZERS)}",
        )
        check(
            "TrainTokenizerConfig",
            "special_tokens",
            self.special_tokens,
            lambda v: len(v) > 0,
            "at least the end-of-document token",
        )
        known, specials = concrete(self.special_tokens)
        kind_known, kind = concrete(self.kind)
        minimum = (0 if kind_known and kind == "char" else 256) + (len(specials) if known else 1)
        check(
            "TrainTokenizerConfig",
            "vocab_size",
            self.vocab_size,
            lambda v: v >= minimum,
            f">= {minimum} (the 256 byte tokens, for a BPE, and the special tokens)",
        )


def build_bpe_tokenizer(texts: Iterator[str], config: TrainTokenizerConfig) -> Tokenizer:
    """A byte-level BPE trained on ``texts``, split before BPE as ``config.pre_tokenizer`` says."""
    tokenizer = Tokenizer(models.BPE())
    if config.pre_tokenizer == "llama3":
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    else:
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=config.vocab_size,
        min_frequency=config.min_frequency,
        special_tokens=list(config.special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


def build_tokenizer(texts: Iterator[str], config: TrainTokenizerConfig) -> Tokenizer:
    """The tokenizer ``config.kind`` names, learned from ``texts``."""
    if config.kind == "bpe":
        return build_bpe_tokenizer(texts, config)
    tokenizer = build_char_tokenizer(texts, config.special_tokens)
    if tokenizer.get_vocab_size() > config.vocab_size:
        chars = tokenizer.get_vocab_size() - len(config.special_tokens)
        raise ValueError(
            f"TrainTokenizerConfig.vocab_size: the corpus has {chars} distinct characters, more than "
            f"vocab_size={config.vocab_size} allows with "
            f"{len(config.special_tokens)} special tokens"
        )
    return tokenizer


def train_tokenizer(config: TrainTokenizerConfig) -> None:
    """Step: train a byte-level BPE (or derive a character vocabulary) from a corpus and write
    ``tokenizer.json`` + ``tokenizer_info.json``."""
    from marin.tokenize.inputs import expand_record_paths, iter_texts

    files = expand_record_paths(config.input_paths)
    texts = iter_texts(files, config.text_key, limit=config.max_documents)
    tokenizer = build_tokenizer(texts, config)
    write_atomic(join(config.output_path, TOKENIZER_FILE), tokenizer.to_str())
    info = {
        "kind": config.kind,
        "vocab_size": tokenizer.get_vocab_size(),
        "special_tokens": list(config.special_tokens),
        "fingerprint": fingerprint(tokenizer),
        "input_files": files,
    }
    write_atomic(join(config.output_path, "tokenizer_info.json"), json.dumps(info, indent=2))
    logger.info("trained tokenizer: vocab %d from %d files", info["vocab_size"], len(files))
