"""The vectorized hashing agrees with the reference text definitions and does not depend on batching;
MinHash estimates Jaccard without bias; the Bloom filter is sized right and its false-positive rate is
within 2x of the configured one."""

import numpy as np
import pytest

from marin.dedupe.bloom import BloomFilter, bloom_size
from marin.dedupe.hashing import band_hashes, minhash_params, minhash_signatures, shingle_hashes, word_hashes
from marin.dedupe.text import jaccard, remove_spans, shingles, split_paragraphs, words

TEXTS = [
    "Hello,  World! Hello-world.",
    "",
    "   ",
    "one",
    "a b c d",
    "Ünïcode  café, naïve—façade\u00a0x",
    "The cow said moo.\n\nThe cow said moo!\n",
    "x " * 40,
    "tab\tseparated\nlines\r\nhere",
]


def test_vectorized_words_and_shingles_match_reference():
    w, off = word_hashes(TEXTS)
    for i, text in enumerate(TEXTS):
        ref = words(text)
        mine = w[off[i] : off[i + 1]]
        assert len(mine) == len(ref)
        # Equal words hash equal, different words differently.
        assert len(set(mine.tolist())) == len(set(ref))
        assert all((mine[a] == mine[b]) == (ref[a] == ref[b]) for a in range(len(ref)) for b in range(len(ref)))
    for n in (1, 3, 5):
        sh, soff = shingle_hashes(w, off, n)
        for i, text in enumerate(TEXTS):
            assert len(set(sh[soff[i] : soff[i + 1]].tolist())) == len(shingles(text, n)), (n, text)


def test_hashes_do_not_depend_on_batch_boundaries(corpus):
    texts = list(corpus["docs"].values())[:300]
    a, b = minhash_params(60, 0)
    whole = minhash_signatures(*shingle_hashes(*word_hashes(texts), 5), a, b)
    parts = np.concatenate(
        [
            minhash_signatures(*shingle_hashes(*word_hashes(texts[i : i + 7]), 5), a, b, block_shingles=64)
            for i in range(0, 300, 7)
        ]
    )
    np.testing.assert_array_equal(whole, parts)
    np.testing.assert_array_equal(band_hashes(whole, 10, 6), band_hashes(parts, 10, 6))


def test_minhash_estimates_jaccard(corpus):
    pairs = [d for d in corpus["duplicates"] if d["kind"] == "near"][:400]
    texts = [corpus["docs"][p[k]] for p in pairs for k in ("original", "copy")]
    a, b = minhash_params(128, 7)
    sig = minhash_signatures(*shingle_hashes(*word_hashes(texts), 5), a, b)
    est = (sig[0::2] == sig[1::2]).mean(axis=1)
    truth = np.array([p["jaccard"] for p in pairs])
    err = est - truth
    assert abs(err.mean()) < 0.01  # unbiased
    assert 0.02 < err.std() < 0.06  # about sqrt(J(1-J)/128): a real estimate, not an exact copy
    unrelated = (sig[0:-2:2] == sig[3::2]).mean()  # original i vs copy of i+1
    assert unrelated < 0.1


def test_bloom_size_formula():
    assert bloom_size(1_000_000, 0.001) == (14_377_588, 10)
    assert bloom_size(1000, 0.01) == (9586, 7)
    with pytest.raises(ValueError, match="false_positive_rate must be in"):
        bloom_size(10, 1.5)


@pytest.mark.parametrize("rate", [0.01, 0.001])
def test_bloom_false_positive_rate_within_2x(rate):
    rng = np.random.default_rng(0)
    n = 50_000
    items = rng.integers(0, 2**64, size=n, dtype=np.uint64, endpoint=False)
    bloom = BloomFilter(n, rate)
    seen = np.concatenate([bloom.add_new(items[i : i + 5000]) for i in range(0, n, 5000)])
    assert bloom.contains(items).all()  # no false negatives
    queries = rng.integers(0, 2**64, size=int(400 / rate), dtype=np.uint64, endpoint=False)
    measured = bloom.contains(queries).mean()
    assert rate / 2 <= measured <= 2 * rate, measured
    assert seen.mean() < rate  # false positives while filling are rarer than in the full filter
    repeated = bloom.add_new(np.concatenate([items[:10], items[:10]]))
    assert repeated.all()


def test_paragraph_spans_and_removal():
    text = "first\n\nsecond para\n\n\n  \nthird\n"
    spans = split_paragraphs(text, "\n\n")
    assert [text[s:e] for s, e in spans] == ["first", "second para", "\n  \nthird\n"]
    lines = split_paragraphs(text, "\n")
    assert [text[s:e] for s, e in lines] == ["first", "second para", "third"]
    assert remove_spans(text, [lines[1]]) == "first\n\nthird"
    assert remove_spans(text, lines) == ""
    assert jaccard("a b c d e f", "a b c d e f") == 1.0
