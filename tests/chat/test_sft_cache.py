"""SFT token caches: masks stored beside the tokens, surviving packing; attention never crosses conversations."""

import itertools
import json

import jax
import numpy as np
import pytest

from marin.chat import SftTokenizeConfig, tokenize_chat
from marin.chat.template import ChatTokenizer
from marin.tokenize import TokenCache
from marin.trainer.data import CacheTokenSource
from marin.trainer.data.loader import assemble, pack_window
from marin.trainer.model.config import LlamaConfig
from marin.trainer.model.llama import forward, init_params
from tests.chat.conftest import CONVERSATIONS


@pytest.fixture
def sft_cache(tmp_path, reserved_chat):
    reserved_chat.tokenizer.save(str(tmp_path / "tokenizer.json"))
    rows = [{"messages": c} for c in CONVERSATIONS * 3]
    (tmp_path / "chat.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "sft"
    tokenize_chat(
        SftTokenizeConfig(
            train_paths=[str(tmp_path / "chat.jsonl")], tokenizer=str(tmp_path / "tokenizer.json"), output_path=str(out)
        )
    )
    return out, rows


def test_cache_holds_template_ids_and_assistant_masks(sft_cache):
    out, rows = sft_cache
    chat = ChatTokenizer.load(str(out / "tokenizer"))
    cache = TokenCache.open(str(out / "train"), tokenizer=chat.tokenizer)
    assert cache.has_mask and cache.num_documents == len(rows)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["train"]["num_masked_tokens"] == int(cache.read_mask(0, cache.num_tokens).sum())
    for i, row in enumerate(rows):
        ids, mask = chat.encode(row["messages"])
        start, end = cache.document_span(i)
        np.testing.assert_array_equal(cache.document(i), ids)
        assert cache.read(end - 1, 1)[0] == cache.eos_id  # EOS closes the document, untrained
        np.testing.assert_array_equal(cache.read_mask(start, end - start), np.append(mask, False).astype(np.uint8))


def test_rerun_skips_finished_shards_and_is_identical(sft_cache, tmp_path):
    out, _ = sft_cache
    before = {p.name: p.read_bytes() for p in (out / "train" / "shards").iterdir()}
    (out / "train" / "cache.json").unlink()
    tokenize_chat(
        SftTokenizeConfig(
            train_paths=[str(tmp_path / "chat.jsonl")], tokenizer=str(tmp_path / "tokenizer.json"), output_path=str(out)
        )
    )
    assert {p.name: p.read_bytes() for p in (out / "train" / "shards").iterdir()} == before


def test_mask_survives_packing_across_sequence_boundaries(sft_cache):
    out, _ = sft_cache
    source = CacheTokenSource(TokenCache.open(str(out / "train")))
    stored = source.read_mask(0, source.num_tokens).astype(bool)
    starts = source.doc_starts(0, source.num_tokens)
    seq_len = 24  # shorter than every conversation: each one is cut by at least one sequence boundary
    trained = np.zeros(source.num_tokens, bool)
    crossing = 0
    for index in range((source.num_tokens - 1) // seq_len):
        batch = assemble([pack_window(source, index, seq_len)])
        positions = index * seq_len + 1 + np.arange(seq_len)  # global position of each target
        trained[positions[batch["loss_mask"][0] > 0]] = True
        assert np.all(batch["targets"][0] == source.read(index * seq_len + 1, seq_len))
        # a document that starts before this window and continues into it, with assistant tokens on both sides
        doc = np.searchsorted(starts, index * seq_len, side="right") - 1
        doc_end = starts[doc + 1] if doc + 1 < len(starts) else source.num_tokens
        if (
            starts[doc] < index * seq_len
            and stored[starts[doc] : index * seq_len].any()
            and stored[index * seq_len : doc_end].any()
        ):
            crossing += 1
    assert crossing > 0
    covered = (((source.num_tokens - 1) // seq_len) * seq_len) + 1
    # exactly the assistant tokens are trained targets, wherever the sequence boundaries fall
    np.testing.assert_array_equal(trained[:covered], stored[:covered])


def test_segment_ids_keep_attention_inside_each_conversation(sft_cache):
    out, _ = sft_cache
    source = CacheTokenSource(TokenCache.open(str(out / "train")))
    seq_len = 160
    tokens, segments, _ = pack_window(source, 0, seq_len)
    starts = source.doc_starts(0, seq_len + 1)
    assert len(starts) >= 3  # the window packs several conversations
    assert np.array_equal(np.flatnonzero(np.diff(segments)) + 1, starts[1:])
    cfg = LlamaConfig(
        vocab_size=source.cache.ledger["vocab_size"],
        hidden_dim=32,
        mlp_dim=64,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        seq_len=seq_len,
    )
    params = jax.jit(lambda key: init_params(cfg, key))(jax.random.PRNGKey(0))  # one program, not one per leaf
    run = jax.jit(lambda tokens, segments: forward(cfg, params, tokens, segments))
    spans = list(itertools.pairwise(starts))  # the whole conversations of the window
    # Row 0: the packed window; row i: conversation i alone, at position 0, padded at the end (causal
    # attention: the padding cannot change the positions before it).
    rows = np.zeros((1 + len(spans), seq_len), np.int32)
    segs = np.zeros_like(rows)
    rows[0], segs[0] = tokens[:seq_len], segments[:seq_len]
    for i, (lo, hi) in enumerate(spans, 1):
        rows[i, : hi - lo] = tokens[lo:hi]
    logits = np.asarray(run(rows, segs))
    for i, (lo, hi) in enumerate(spans, 1):
        np.testing.assert_allclose(logits[0, lo:hi], logits[i, : hi - lo], atol=2e-5, rtol=1e-4)
    # without segment ids the later conversations would attend to the earlier ones: the test can fail
    crossed = np.asarray(run(rows[:1], np.zeros_like(segs[:1])))[0]
    lo, hi = spans[-1]
    assert np.max(np.abs(crossed[lo:hi] - logits[-1, : hi - lo])) > 1e-3
