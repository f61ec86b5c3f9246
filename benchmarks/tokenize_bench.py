"""Tokenize step throughput vs raw ``Tokenizer.encode_batch``, and token-cache random-read speed.

    python benchmarks/tokenize_bench.py [--docs 60000] [--repeat 3] [--gcs]

1. Throughput: the same documents (JSONL.gz shards on local disk) go through (a) the whole tokenize step
   (read + decompress + tokenize + EOS + write shards + ledgers) and (b) raw ``encode_batch`` over the
   texts already in memory, batches of 1,024, same tokenizer, same cores. Interleaved ``--repeat`` times;
   the ratio step/raw of median tokens/s is reported (goal >= 0.8).
2. Reader: random batches of 8 sequences x 1,024 tokens at random offsets, batches/s, from the local
   cache (memory-mapped) and, with ``--gcs``, from the same cache uploaded to a fake-gcs-server on
   loopback (ranged GETs through gcsfs).

Results go to stdout as a Markdown table and to benchmarks/results/tokenize_bench.json.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from marin.storage.records import write_records
from marin.tokenize import (
    TokenCache,
    TokenizeConfig,
    TrainTokenizerConfig,
    build_bpe_tokenizer,
    tokenize_corpus,
)

RESULTS = Path(__file__).resolve().parent / "results"
WORDS = (
    "once upon a time there was little girl named lily who loved to play in the park with her dog "
    "max one day they found big red ball under tree and sun was shining 12 + 35 = 47 def add(a, b): "
    "return a + b for i in range(10): print(i)"
).split()


def make_corpus(root: Path, docs: int, shards: int = 8) -> list[str]:
    rng = random.Random(0)
    files = []
    per = docs // shards
    for s in range(shards):
        records = [{"id": f"{s}-{i}", "text": " ".join(rng.choices(WORDS, k=rng.randint(40, 400)))} for i in range(per)]
        path = str(root / f"docs-{s:03d}.jsonl.gz")
        write_records(path, records)
        files.append(path)
    return files


def bench_throughput(files, tok_dir, texts, tokenizer, repeat):
    raw, step = [], []
    for _ in range(repeat):
        start = time.perf_counter()
        n = 0
        for i in range(0, len(texts), 1024):
            n += sum(len(e.ids) + 1 for e in tokenizer.encode_batch(texts[i : i + 1024], add_special_tokens=False))
        raw.append(n / (time.perf_counter() - start))
        with tempfile.TemporaryDirectory() as out:
            start = time.perf_counter()
            tokenize_corpus(TokenizeConfig(train_paths=files, validation_paths=[], tokenizer=tok_dir, output_path=out))
            elapsed = time.perf_counter() - start
            tokens = TokenCache.open(f"{out}/train").num_tokens
        assert tokens == n, (tokens, n)
        step.append(tokens / elapsed)
    return statistics.median(raw), statistics.median(step)


def bench_reader(cache: TokenCache, seconds: float = 3.0, batch=8, seq=1024) -> float:
    rng = np.random.default_rng(0)
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for offset in rng.integers(0, cache.num_tokens - seq, size=batch):
            cache.read(int(offset), seq)
        count += 1
    return count / (time.perf_counter() - start)


def gcs_reader(cache_dir: str) -> float:
    """Upload the cache to a loopback fake-gcs-server (the test suite's) and time random batches through gcsfs."""
    import sys
    import tempfile as _tempfile

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import fsspec

    from tests.object_store_servers import GCS_BUCKET, start_servers

    servers = start_servers(_tempfile.mkdtemp(prefix="tokbench-"))
    try:
        if servers.gcs_missing:
            raise RuntimeError(servers.gcs_missing)
        fsspec.filesystem("gs").put(cache_dir, f"{GCS_BUCKET}/tokbench-cache", recursive=True)
        return bench_reader(TokenCache.open(f"gs://{GCS_BUCKET}/tokbench-cache"), seconds=5.0)
    finally:
        servers.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=60000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--gcs", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        files = make_corpus(root, args.docs)
        from marin.tokenize.inputs import iter_texts

        texts = list(iter_texts(files))
        tokenizer = build_bpe_tokenizer(
            iter(texts[:5000]), TrainTokenizerConfig(input_paths=files, output_path="", vocab_size=8192)
        )
        tok_dir = root / "tok"
        tok_dir.mkdir()
        (tok_dir / "tokenizer.json").write_text(tokenizer.to_str())
        raw, step = bench_throughput(files, str(tok_dir), texts, tokenizer, args.repeat)
        cache_dir = root / "cache"
        tokenize_corpus(
            TokenizeConfig(train_paths=files, validation_paths=[], tokenizer=str(tok_dir), output_path=str(cache_dir))
        )
        cache = TokenCache.open(str(cache_dir / "train"))
        local = bench_reader(cache)
        remote = gcs_reader(str(cache_dir / "train")) if args.gcs else None
    results = {
        "docs": args.docs,
        "tokens": cache.num_tokens,
        "raw_tokens_per_s": raw,
        "step_tokens_per_s": step,
        "step_over_raw": step / raw,
        "reader_batches_per_s_local": local,
        "reader_batches_per_s_gcs": remote,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "tokenize_bench.json").write_text(json.dumps(results, indent=2))
    print("| measurement | value |\n|---|---|")
    print(f"| raw encode_batch | {raw:,.0f} tokens/s |")
    print(f"| tokenize step | {step:,.0f} tokens/s |")
    print(f"| step / raw | {step / raw:.2f} |")
    print(f"| reader, local, 8x1024 random | {local:,.0f} batches/s |")
    if remote is not None:
        print(f"| reader, fake GCS, 8x1024 random | {remote:,.1f} batches/s |")


if __name__ == "__main__":
    main()
