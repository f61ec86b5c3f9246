"""Incremental detokenizing: the streamed pieces add up to the text of the whole generation, cut before the
first stop string, and nothing handed out is ever taken back."""

import numpy as np
import pytest

from marin.inference.detokenize import TextStream, text_offsets
from tests.export.tiny_model import make_tiny_export


@pytest.fixture(scope="module")
def decode(tmp_path_factory):
    from marin.tokenize import load_tokenizer

    path = str(tmp_path_factory.mktemp("detok") / "hf")
    make_tiny_export(path)
    tokenizer = load_tokenizer(path)
    return lambda ids: tokenizer.decode(ids, skip_special_tokens=True)


def _stream(decode, ids, stops=()):
    stream, pieces = TextStream(decode, stops), []
    for token in ids:
        pieces.append(stream.push(token))
        if stream.stopped:
            break
    pieces.append(stream.finish())
    return stream, pieces


def test_pieces_add_up_to_the_whole_decode(decode):
    """Random ids (byte tokens that split characters, the end-of-text token that decodes to nothing)."""
    rng = np.random.default_rng(0)
    for _ in range(50):
        ids = rng.integers(0, 300, size=int(rng.integers(1, 60))).tolist()
        stream, pieces = _stream(decode, ids)
        assert "".join(pieces) == stream.text == decode(ids)
        assert all("\ufffd" not in p for p in pieces[:-1]) or "\ufffd" in decode(ids)


def test_stop_strings_cut_the_text_and_are_never_sent(decode):
    rng = np.random.default_rng(1)
    for _ in range(50):
        ids = rng.integers(1, 300, size=40).tolist()
        full = decode(ids)
        k = int(rng.integers(0, max(len(full) - 3, 1)))
        stops = (full[k : k + 3], "never there")
        stream, pieces = _stream(decode, ids, stops)
        cut = min(full.find(s) for s in stops if s and s in full)
        assert stream.stopped and stream.text == full[:cut] and "".join(pieces) == full[:cut]


def test_text_offsets_count_only_the_text(decode):
    ids = [0, *range(60, 70)]  # the document-start token has no text
    offsets = text_offsets(decode, ids)
    assert offsets[:2] == [0, 0] and offsets == sorted(offsets) and offsets[-1] <= len(decode(ids))
