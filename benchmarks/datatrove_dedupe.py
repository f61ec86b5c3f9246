"""The datatrove side of benchmarks/dedupe_bench.py; runs inside benchmarks/.venv-datatrove only.

    python datatrove_dedupe.py --mode minhash --input DIR --work DIR [--buckets 14 --rows 8]

Runs datatrove's standard 4-stage MinHash pipeline (signature -> buckets -> cluster -> filter) or its
3-stage exact pipeline, each stage with one worker (one core), and prints JSON: seconds per stage,
CPU seconds, and the path of a file with the ids it kept.
"""

import argparse
import glob
import gzip
import json
import os
import resource
import time

from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.readers import JsonlReader
from datatrove.pipeline.writers import JsonlWriter


def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime + c.ru_utime + c.ru_stime


def run(stage, tasks):
    LocalPipelineExecutor(pipeline=stage["pipeline"], tasks=tasks, workers=1, logging_dir=stage["logs"]).run()


def minhash(args, num_files):
    from datatrove.pipeline.dedup import (
        MinhashConfig,
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
        MinhashDedupSignature,
    )

    cfg = MinhashConfig(n_grams=5, num_buckets=args.buckets, hashes_per_bucket=args.rows)
    w = args.work
    return [
        ("signatures", num_files, [JsonlReader(args.input), MinhashDedupSignature(f"{w}/sigs", config=cfg)]),
        ("buckets", cfg.num_buckets, [MinhashDedupBuckets(f"{w}/sigs", f"{w}/buckets", config=cfg)]),
        ("cluster", 1, [MinhashDedupCluster(f"{w}/buckets", f"{w}/remove", config=cfg)]),
        ("filter", num_files, [JsonlReader(args.input), MinhashDedupFilter(f"{w}/remove"), JsonlWriter(f"{w}/out")]),
    ]


def exact(args, num_files):
    from datatrove.pipeline.dedup.exact_dedup import (
        ExactDedupConfig,
        ExactDedupFilter,
        ExactDedupSignature,
        ExactFindDedups,
    )

    # Same normalization as marin's exact dedupe (case and whitespace), so both find the same duplicates.
    cfg = ExactDedupConfig(content_getter=lambda doc: " ".join(doc.text.lower().split()))
    w = args.work
    return [
        ("signatures", num_files, [JsonlReader(args.input), ExactDedupSignature(f"{w}/sigs", config=cfg)]),
        ("find", 1, [ExactFindDedups(f"{w}/sigs", f"{w}/dups", config=cfg)]),
        (
            "filter",
            num_files,
            [JsonlReader(args.input), ExactDedupFilter(f"{w}/dups", config=cfg), JsonlWriter(f"{w}/out")],
        ),
    ]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["minhash", "exact"], required=True)
    p.add_argument("--input", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--buckets", type=int, default=14)
    p.add_argument("--rows", type=int, default=8)
    args = p.parse_args()
    num_files = len(glob.glob(os.path.join(args.input, "**", "*.jsonl.gz"), recursive=True))
    stages = (minhash if args.mode == "minhash" else exact)(args, num_files)
    seconds = {}
    start, cpu0 = time.monotonic(), cpu_seconds()
    for name, tasks, pipeline in stages:
        t = time.monotonic()
        run({"pipeline": pipeline, "logs": f"{args.work}/logs/{name}"}, tasks)
        seconds[name] = round(time.monotonic() - t, 2)
    seconds["total"] = round(time.monotonic() - start, 2)
    kept = []
    for f in sorted(glob.glob(f"{args.work}/out/*.jsonl.gz")):
        with gzip.open(f, "rt") as fh:
            kept.extend(json.loads(line)["id"] for line in fh)
    kept_path = f"{args.work}/kept_ids.json"
    with open(kept_path, "w") as fh:
        json.dump(kept, fh)
    print(json.dumps({"seconds": seconds, "cpu_seconds": round(cpu_seconds() - cpu0, 2), "kept_ids": kept_path}))


if __name__ == "__main__":
    main()
