"""Token cache: round trip, determinism (workers, kill-and-resume), reader at shard boundaries, validation."""

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from marin.storage.records import RecordError, write_records
from marin.tokenize import (
    CacheError,
    TokenCache,
    TokenizeConfig,
    TrainTokenizerConfig,
    build_bpe_tokenizer,
    build_cache,
    load_tokenizer,
    tokenize_corpus,
    train_tokenizer,
)
from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
WORDS = "the a cat dog sat on mat ran far away and then slept ünïcödé 数字 3 + 4 = 7 def f(x): return x".split()


def make_docs(seed, n, empty_every=0):
    rng = random.Random(seed)
    docs = []
    for i in range(n):
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 60)))
        if rng.random() < 0.3:
            text += "\n\n" + text[::-1]
        if empty_every and i % empty_every == 0:
            text = ""
        docs.append({"id": f"{seed}-{i}", "text": text})
    return docs


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    files = []
    for shard, suffix in enumerate([".jsonl.gz", ".jsonl", ".jsonl.zst", ".parquet", ".jsonl.gz"]):
        path = str(root / f"train-{shard:03d}{suffix}")
        write_records(path, make_docs(shard, 50 + 10 * shard, empty_every=17))
        files.append(path)
    return root, files


@pytest.fixture(scope="module")
def tokenizer_path(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("tok")
    train_tokenizer(TrainTokenizerConfig(input_paths=[str(corpus[0])], output_path=str(out), vocab_size=400))
    return str(out)


def texts_of(files):
    from marin.storage.records import read_records

    return [r["text"] for f in files for r in read_records(f)]


def tree_digest(path):
    """Digest of every cache file's bytes (what must not depend on workers or interruptions)."""
    h = hashlib.sha256()
    for p in sorted(Path(path).rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(path)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def test_tokenizer_training_is_byte_identical_across_runs_and_processes(corpus, tokenizer_path, tmp_path):
    again = tmp_path / "again"
    train_tokenizer(TrainTokenizerConfig(input_paths=[str(corpus[0])], output_path=str(again), vocab_size=400))
    reference = Path(tokenizer_path, "tokenizer.json").read_bytes()
    assert (again / "tokenizer.json").read_bytes() == reference
    other = tmp_path / "other"
    code = (
        "from marin.tokenize import train_tokenizer, TrainTokenizerConfig;"
        f"train_tokenizer(TrainTokenizerConfig(input_paths=[{str(corpus[0])!r}], output_path={str(other)!r},"
        " vocab_size=400))"
    )
    env = {**os.environ, "RAYON_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
    assert (other / "tokenizer.json").read_bytes() == reference
    tok = load_tokenizer(tokenizer_path)
    assert 256 < tok.get_vocab_size() <= 400 and tok.token_to_id("<|endoftext|>") == 0


def test_round_trip_reproduces_documents_and_counts_empties(corpus, tokenizer_path, tmp_path):
    _, files = corpus
    tok = load_tokenizer(tokenizer_path)
    ledger = build_cache(files, str(tmp_path / "c"), tok, tokenizer_name=tokenizer_path, long_document_tokens=100)
    cache = TokenCache.open(str(tmp_path / "c"), tokenizer=tok)
    texts = texts_of(files)
    nonempty = [t for t in texts if t]
    assert cache.num_documents == len(nonempty) and ledger["empty_documents"] == len(texts) - len(nonempty) > 0
    assert [tok.decode(cache.document(i).tolist()) for i in range(cache.num_documents)] == nonempty
    lengths = [len(tok.encode(t, add_special_tokens=False).ids) + 1 for t in nonempty]
    assert cache.num_tokens == sum(lengths)
    assert ledger["long_documents"] == sum(n > 100 for n in lengths) > 0
    assert ledger["max_document_tokens"] == max(lengths)
    assert cache.dtype == np.uint16


def test_reader_ranges_across_shard_boundaries_match_the_stream(corpus, tokenizer_path, tmp_path):
    _, files = corpus
    tok = load_tokenizer(tokenizer_path)
    build_cache(files, str(tmp_path / "c"), tok, tokenizer_name="t")
    cache = TokenCache.open(str(tmp_path / "c"))
    stream = np.concatenate([cache.document(i).tolist() + [cache.eos_id] for i in range(cache.num_documents)])
    assert cache.read(0, cache.num_tokens).tolist() == stream.tolist()
    boundaries = [int(s["num_tokens"]) for s in cache.ledger["shards"]]
    edge = 0
    for n in boundaries[:-1]:
        edge += n
        for start in (edge - 3, edge - 1, edge):
            np.testing.assert_array_equal(cache.read(start, 7), stream[start : start + 7])
    rng = np.random.default_rng(0)
    for _ in range(200):
        start = int(rng.integers(0, cache.num_tokens - 64))
        np.testing.assert_array_equal(cache.read(start, 64), stream[start : start + 64])
    starts = np.flatnonzero(np.concatenate([[True], stream[:-1] == cache.eos_id]))
    np.testing.assert_array_equal(cache.document_starts(0, cache.num_tokens), starts)
    mid = cache.num_tokens // 2
    np.testing.assert_array_equal(cache.document_starts(mid, mid + 500), starts[(starts >= mid) & (starts < mid + 500)])
    with pytest.raises(IndexError):
        cache.read(cache.num_tokens - 2, 3)


def test_reader_over_fsspec_range_reads_matches_local(corpus, tokenizer_path, tmp_path):
    import fsspec

    _, files = corpus
    build_cache(files, str(tmp_path / "c"), load_tokenizer(tokenizer_path), tokenizer_name="t")
    fs = fsspec.filesystem("memory")
    fs.put(str(tmp_path / "c"), "/cache-test", recursive=True)
    local, remote = TokenCache.open(str(tmp_path / "c")), TokenCache.open("memory:///cache-test")
    for start, n in [(0, 10), (local.num_tokens - 50, 50), (1234, 3000)]:
        np.testing.assert_array_equal(remote.read(start, n), local.read(start, n))
    for i in (0, 77, local.num_documents - 1):
        np.testing.assert_array_equal(remote.document(i), local.document(i))
    np.testing.assert_array_equal(remote.document_starts(100, 2000), local.document_starts(100, 2000))


def _digest_of_reads(cache, ranges):
    """Runs in worker processes: what a shared reader returns there."""
    return hashlib.sha256(b"".join(cache.read(s, n).tobytes() for s, n in ranges)).hexdigest()


FORK_PROBE = """
import hashlib, os, sys
from marin.tokenize import TokenCache
cache = TokenCache.open(sys.argv[1])
ranges = [(int(start), 256) for start in sys.argv[2].split(",")]
digest = lambda: hashlib.sha256(b"".join(cache.read(s, n).tobytes() for s, n in ranges)).hexdigest()
parent = digest()  # maps the shards in this process before the fork
read_end, write_end = os.pipe()
pid = os.fork()
if pid == 0:
    os.write(write_end, digest().encode())
    os._exit(0)
os.close(write_end)
child = os.read(read_end, 128).decode()
os.waitpid(pid, 0)
print(parent, child)
"""


def test_reader_is_shared_across_processes(corpus, tokenizer_path, tmp_path):
    """A reader used in the parent (its shards already memory-mapped) reads the same tokens in a forked
    child and, pickled (only url + ledger travel), in spawned workers."""
    import multiprocessing

    _, files = corpus
    build_cache(files, str(tmp_path / "c"), load_tokenizer(tokenizer_path), tokenizer_name="t")
    cache = TokenCache.open(str(tmp_path / "c"))
    rng = np.random.default_rng(1)
    ranges = [[(int(s), 256) for s in rng.integers(0, cache.num_tokens - 256, 32)] for _ in range(4)]
    expected = [_digest_of_reads(cache, r) for r in ranges]  # maps shards in the parent first
    # A fork in a fresh process (this one runs Ray and JAX threads, which a fork may deadlock on).
    probe = subprocess.run(
        [sys.executable, "-c", FORK_PROBE, str(tmp_path / "c"), ",".join(str(s) for s, _ in ranges[0])],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert probe.returncode == 0, probe.stderr[-2000:]
    assert probe.stdout.split() == [expected[0], expected[0]]
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        assert pool.starmap(_digest_of_reads, [(cache, r) for r in ranges]) == expected


def test_reader_on_the_gcs_server_matches_local(corpus, tokenizer_path, tmp_path, gcs_prefix):
    from marin.storage import filesystem

    _, files = corpus
    build_cache(files, str(tmp_path / "c"), load_tokenizer(tokenizer_path), tokenizer_name="t")
    fs, root = filesystem(gcs_prefix)
    fs.put(str(tmp_path / "c"), f"{root}/c", recursive=True)
    local = TokenCache.open(str(tmp_path / "c"))
    remote = TokenCache.open(f"{gcs_prefix}/c", tokenizer=local.fingerprint)
    for start, n in [(0, 10), (local.num_tokens - 50, 50), (1234, 3000)]:
        np.testing.assert_array_equal(remote.read(start, n), local.read(start, n))
    for i in (0, 77, local.num_documents - 1):
        np.testing.assert_array_equal(remote.document(i), local.document(i))


def test_cache_bytes_do_not_depend_on_worker_count(corpus, tokenizer_path, tmp_path, ray_address):
    _, files = corpus
    tok = load_tokenizer(tokenizer_path)
    build_cache(files, str(tmp_path / "one"), tok, tokenizer_name="t", num_workers=1)
    build_cache(files, str(tmp_path / "three"), tok, tokenizer_name="t", num_workers=3, batch_size=7)
    assert tree_digest(tmp_path / "one") == tree_digest(tmp_path / "three")


def test_fingerprint_mismatch_is_a_clear_error(corpus, tokenizer_path, tmp_path):
    _, files = corpus
    build_cache(files[:1], str(tmp_path / "c"), load_tokenizer(tokenizer_path), tokenizer_name="stories-bpe")
    other = build_bpe_tokenizer(
        iter(["completely different text"] * 10),
        TrainTokenizerConfig(input_paths=["x"], output_path="y", vocab_size=300),
    )
    with pytest.raises(CacheError, match=r"built with tokenizer 'stories-bpe'.*read with a different one"):
        TokenCache.open(str(tmp_path / "c"), tokenizer=other)
    with pytest.raises(CacheError, match="no ledger"):
        TokenCache.open(str(tmp_path / "missing"))


def test_bad_record_names_file_and_line_or_is_skipped_and_counted(tokenizer_path, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{"text": 5}\n{not json\n{"text": "also fine"}\n')
    tok = load_tokenizer(tokenizer_path)
    with pytest.raises(RecordError, match=r"bad.jsonl:2: field 'text' must be a string"):
        build_cache([str(bad)], str(tmp_path / "c"), tok, tokenizer_name="t")
    assert not (tmp_path / "c" / "cache.json").exists()
    ledger = build_cache([str(bad)], str(tmp_path / "c"), tok, tokenizer_name="t", on_error="skip")
    assert ledger["num_documents"] == 2 and ledger["skipped_records"] == 2


def test_tokenize_step_writes_both_splits(corpus, tokenizer_path, tmp_path):
    root, files = corpus
    val = tmp_path / "val.jsonl"
    write_records(str(val), make_docs(99, 20))
    tokenize_corpus(
        TokenizeConfig(
            train_paths=[str(root)],
            validation_paths=[str(val)],
            tokenizer=tokenizer_path,
            output_path=str(tmp_path / "out"),
        )
    )
    train = TokenCache.open(str(tmp_path / "out" / "train"))
    valid = TokenCache.open(str(tmp_path / "out" / "validation"))
    assert len(train.ledger["shards"]) == len(files) and valid.num_documents == 20
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["validation"]["num_tokens"] == valid.num_tokens


KILL_SCRIPT = """
import sys, time
import marin.tokenize.writer as w
real = w.build_shard
def slow(job):
    out = real(job)
    time.sleep(0.4)
    return out
w.build_shard = slow
from marin.tokenize import load_tokenizer
w.build_cache(sys.argv[3:], sys.argv[1], load_tokenizer(sys.argv[2]), tokenizer_name="t")
"""


def test_kill_and_resume_rebuilds_only_unfinished_shards_and_matches(corpus, tokenizer_path, tmp_path):
    _, files = corpus
    tok = load_tokenizer(tokenizer_path)
    build_cache(files, str(tmp_path / "clean"), tok, tokenizer_name="t")
    target = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-c", KILL_SCRIPT, str(target), tokenizer_path, *files])
    # (a glob of the not yet created shards/ finds nothing)
    two_shards = lambda: len(list((target / "shards").glob("*.json"))) >= 2  # noqa: E731
    wait_for(two_shards, "two finished shards", proc=proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    finished = sorted((target / "shards").glob("*.json"))
    assert 2 <= len(finished) < len(files) and not (target / "cache.json").exists()
    mtimes = {p.name: p.stat().st_mtime_ns for p in finished}
    build_cache(files, str(target), tok, tokenizer_name="t")
    assert {p.name: p.stat().st_mtime_ns for p in finished} == mtimes  # finished shards were not redone
    for leftover in target.rglob("*.tmp"):  # an interrupted shard's temp file may remain; never read
        leftover.unlink()
    assert tree_digest(target) == tree_digest(tmp_path / "clean")


def test_cache_is_a_trainer_token_source(corpus, tokenizer_path, tmp_path):
    from marin.trainer.data import TokenCacheSourceConfig
    from marin.trainer.data.source import TokenSource

    _, files = corpus
    build_cache(files, str(tmp_path / "c"), load_tokenizer(tokenizer_path), tokenizer_name="t")
    source = TokenCacheSourceConfig(path=str(tmp_path / "c")).build()
    assert isinstance(source, TokenSource)
    cache = TokenCache.open(str(tmp_path / "c"))
    assert source.num_bytes == sum(len(t.encode()) for t in texts_of(files))
    assert source.read(10, 5).dtype == np.int32 and source.read(10, 5).tolist() == cache.read(10, 5).tolist()
    np.testing.assert_array_equal(source.doc_starts(0, 500), cache.document_starts(0, 500))


def test_configs_accept_executor_placeholders_and_validate_values():
    from marin.execution import this_output_path, versioned

    TokenizeConfig(
        train_paths=[this_output_path()],
        validation_paths=[],
        tokenizer="t",
        output_path=this_output_path(),
        num_workers=versioned(2),
    )
    TrainTokenizerConfig(input_paths=[this_output_path()], output_path=this_output_path(), vocab_size=versioned(512))
    with pytest.raises(ValueError, match=r"TokenizeConfig.num_workers must be >= 1, got 0"):
        TokenizeConfig(train_paths=["x"], validation_paths=[], tokenizer="t", output_path="o", num_workers=versioned(0))
    with pytest.raises(ValueError, match=r"TrainTokenizerConfig.vocab_size must be >= 258"):
        TrainTokenizerConfig(input_paths=["x"], output_path="o", vocab_size=100)


def test_tokenizer_loads_from_a_file_a_directory_and_an_object_store_url(tokenizer_path, tmp_path, gcs_prefix):
    from marin.storage import filesystem
    from marin.tokenize.tokenizer import fingerprint

    expected = fingerprint(load_tokenizer(tokenizer_path))
    file = os.path.join(tokenizer_path, "tokenizer.json")
    fs, root = filesystem(gcs_prefix)
    fs.put(file, f"{root}/tok/tokenizer.json")
    for where in (file, f"{gcs_prefix}/tok/tokenizer.json", f"{gcs_prefix}/tok"):
        assert fingerprint(load_tokenizer(where)) == expected, where
    with pytest.raises(FileNotFoundError, match="no tokenizer.json there"):
        load_tokenizer(str(tmp_path / "nothing"))
