"""The character tokenizer: nanoGPT's vocabulary on TinyShakespeare, one cache format with BPE, clear errors."""

import json

import numpy as np
import pytest

from marin.corpus.public import TEXTS_DIR
from marin.storage.records import write_records
from marin.tokenize import (
    TokenCache,
    TokenizeConfig,
    TrainTokenizerConfig,
    UnknownCharacter,
    build_char_tokenizer,
    fingerprint,
    is_char_tokenizer,
    load_tokenizer,
    tokenize_corpus,
    train_tokenizer,
)

SHAKESPEARE = (TEXTS_DIR / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8")
EOS = "<|endoftext|>"


def nanogpt_prepare(data: str) -> dict[str, int]:
    """nanoGPT's data/shakespeare_char/prepare.py, verbatim in what it computes."""
    chars = sorted(list(set(data)))
    return {ch: i for i, ch in enumerate(chars)}


def test_vocabulary_and_ids_equal_nanogpt_prepare_on_tinyshakespeare():
    stoi = nanogpt_prepare(SHAKESPEARE)
    tok = build_char_tokenizer([SHAKESPEARE], special_tokens=(EOS,))
    assert len(stoi) == 65 and tok.get_vocab_size() == 66 and tok.token_to_id(EOS) == 65
    assert {ch: tok.token_to_id(ch) for ch in stoi} == stoi
    ids = tok.encode(SHAKESPEARE, add_special_tokens=False).ids
    assert ids == [stoi[c] for c in SHAKESPEARE]
    assert tok.decode(ids) == SHAKESPEARE  # every character, newlines and runs of spaces included
    assert is_char_tokenizer(tok)


def test_derivation_is_deterministic_whatever_the_order_of_texts():
    a = build_char_tokenizer(["ba\n", "c a"], special_tokens=(EOS, "<|pad|>"))
    b = build_char_tokenizer(["c a", "ba\n"], special_tokens=(EOS, "<|pad|>"))
    assert a.to_str() == b.to_str() and fingerprint(a) == fingerprint(b)
    assert [a.id_to_token(i) for i in range(a.get_vocab_size())] == ["\n", " ", "a", "b", "c", EOS, "<|pad|>"]


def test_bad_corpora_are_refused():
    with pytest.raises(ValueError, match="no characters"):
        build_char_tokenizer(["", ""], special_tokens=(EOS,))
    with pytest.raises(ValueError, match="also characters"):
        build_char_tokenizer(["abc"], special_tokens=("a",))


def write_docs(path, texts):
    write_records(str(path), [{"id": str(i), "text": t} for i, t in enumerate(texts)])


def test_step_derives_the_vocabulary_and_the_cache_round_trips(tmp_path):
    train, val = ["First Citizen:\nBefore we proceed", "any further, hear me speak."], ["Speak, speak!"]
    chars = len(set("".join(train + val)))
    write_docs(tmp_path / "train.jsonl", train)
    write_docs(tmp_path / "val.jsonl", val)
    config = TrainTokenizerConfig(
        input_paths=[str(tmp_path / "train.jsonl"), str(tmp_path / "val.jsonl")],
        output_path=str(tmp_path / "tok"),
        kind="char",
        vocab_size=64,
        special_tokens=(EOS,),
    )
    train_tokenizer(config)
    info = json.loads((tmp_path / "tok" / "tokenizer_info.json").read_text())
    tok = load_tokenizer(str(tmp_path / "tok"))
    assert info["kind"] == "char" and info["vocab_size"] == tok.get_vocab_size() == chars + 1
    assert info["fingerprint"] == fingerprint(tok)
    tokenize_corpus(
        TokenizeConfig(
            train_paths=[str(tmp_path / "train.jsonl")],
            validation_paths=[str(tmp_path / "val.jsonl")],
            tokenizer=str(tmp_path / "tok"),
            output_path=str(tmp_path / "cache"),
        )
    )
    cache = TokenCache.open(str(tmp_path / "cache" / "train"), tok)
    assert cache.fingerprint == fingerprint(tok) and cache.num_tokens == len(train[0]) + len(train[1]) + 2
    start, end = cache.document_span(0)
    first = cache.read(start, end - start)
    assert tok.decode(first[:-1].tolist()) == train[0] and first[-1] == tok.token_to_id(EOS)
    assert cache.dtype == np.uint8  # a character vocabulary fits a byte per token

    # vocab_size caps a character vocabulary: the error says how many characters the corpus has
    with pytest.raises(ValueError, match=f"the corpus has {chars} distinct characters, more than vocab_size=20"):
        train_tokenizer(TrainTokenizerConfig(**{**config.__dict__, "vocab_size": 20}))


def test_a_character_outside_the_vocabulary_names_file_document_character_and_position(tmp_path):
    tok_dir = tmp_path / "tok"
    tok_dir.mkdir()
    (tok_dir / "tokenizer.json").write_text(build_char_tokenizer(["abc \n"], special_tokens=(EOS,)).to_str())
    write_docs(tmp_path / "docs.jsonl", ["abc", "cab ba", "a bzc"])
    with pytest.raises(UnknownCharacter) as caught:
        tokenize_corpus(
            TokenizeConfig(
                train_paths=[str(tmp_path / "docs.jsonl")], validation_paths=[], tokenizer=str(tok_dir),
                output_path=str(tmp_path / "cache"),
            )
        )  # fmt: skip
    message = str(caught.value)
    assert "docs.jsonl" in message and "document 2" in message
    assert "'z' (U+007A) at position 3" in message
    assert not (tmp_path / "cache" / "train" / "cache.json").exists()  # nothing half-written reads as complete


def test_kind_is_validated():
    with pytest.raises(ValueError, match="TrainTokenizerConfig.kind must be one of"):
        TrainTokenizerConfig(input_paths=["x"], output_path="y", kind="chars")
