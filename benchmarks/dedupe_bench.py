"""Dedupe throughput against datatrove: documents per second per core at equal recall.

    python benchmarks/dedupe_bench.py                 # ~220k documents; results/dedupe_bench.json
    python benchmarks/dedupe_bench.py --docs_per_domain 5000   # a quick look

Both sides read the same generated corpus (``marin.corpus``, ~220k documents in 16 JSONL.gz shards)
with one process and one worker, so wall time and CPU time both measure one core:

- exact:   marin ``ExactDedupeConfig`` vs datatrove ``ExactDedupSignature -> ExactFindDedups ->
           ExactDedupFilter`` (datatrove given the same case/whitespace normalization);
- minhash: marin ``MinHashConfig`` vs datatrove ``MinhashDedupSignature -> Buckets -> Cluster ->
           Filter``, both with 5-word shingles and 14 bands x 8 rows (datatrove's defaults), marin
           with and without exact verification of candidates.

Recall is measured on the corpus ground truth (exact mode: the planted exact copies; minhash mode: all
pairs with Jaccard >= 0.8, exact copies included): a pair counts as found when the two documents are
not both kept. "Unexplained" removals are removed
documents without any ground-truth partner at Jaccard >= 0.8 (false positives, roughly).

datatrove lives in a benchmark-only venv, ``benchmarks/.venv-datatrove``, created on first use; it is
never a dependency of the project.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PEER_VENV = os.path.join(HERE, ".venv-datatrove")
PEER_PY = os.path.join(PEER_VENV, "bin", "python")
PEER_REQUIREMENTS = ["datatrove[processing]==0.10.1", "orjson", "spacy"]


def ensure_peer_venv() -> None:
    if os.path.exists(PEER_PY):
        return
    subprocess.run([sys.executable, "-m", "venv", PEER_VENV], check=True)
    subprocess.run([PEER_PY, "-m", "pip", "install", "-q", *PEER_REQUIREMENTS], check=True)


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run_ours(mode: str, input_path: str, work: str, verify: bool) -> dict:
    """Runs in a fresh process (see --_ours) so CPU accounting covers only this run."""
    import logging

    from marin.dedupe import DedupeConfig, ExactDedupeConfig, MinHashConfig, dedupe_documents
    from marin.storage.records import find_record_files, read_records

    logging.basicConfig(level=logging.WARNING)
    if mode == "exact":
        config = DedupeConfig(
            input_path=input_path, output_path=work, exact=ExactDedupeConfig(), fuzzy=None, use_ray=False
        )
    else:
        config = DedupeConfig(
            input_path=input_path,
            output_path=work,
            exact=None,
            use_ray=False,
            fuzzy=MinHashConfig(shingle_size=5, bands=14, rows=8, verify=verify),
        )
    start, cpu0 = time.monotonic(), cpu_seconds()
    summary = dedupe_documents(config)
    seconds = {**summary["seconds"], "total": round(time.monotonic() - start, 2)}
    kept = [r["id"] for f in find_record_files(os.path.join(work, "attributes")) for r in read_records(f) if r["kept"]]
    kept_path = os.path.join(work, "kept_ids.json")
    with open(kept_path, "w") as fh:
        json.dump(kept, fh)
    return {"seconds": seconds, "cpu_seconds": round(cpu_seconds() - cpu0, 2), "kept_ids": kept_path}


def quality(corpus: str, kept_path: str, mode: str) -> dict:
    """Recall over exact copies (exact mode) or all pairs with Jaccard >= 0.8 (minhash mode)."""
    from marin.corpus import load_ground_truth

    duplicates, _ = load_ground_truth(corpus)
    kept = set(json.load(open(kept_path)))
    positives = [d for d in duplicates if (d["kind"] == "exact" if mode == "exact" else d["jaccard"] >= 0.8)]
    found = sum(not (d["original"] in kept and d["copy"] in kept) for d in positives)
    explained = {d[k] for d in positives for k in ("original", "copy")}
    manifest = json.load(open(os.path.join(corpus, "manifest.json")))
    total = sum(v for k, v in manifest["files"].items() if k.startswith("train/"))
    removed = total - len(kept)
    unexplained = removed - len(explained - kept)
    return {
        "documents": total,
        "removed": removed,
        "recall": round(found / len(positives), 4),
        "unexplained_removals": unexplained,
        "precision_estimate": round(1 - unexplained / max(removed, 1), 4),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--docs_per_domain", type=int, default=100_000)
    p.add_argument("--work", default=os.path.join(HERE, "results", "dedupe_work"))
    p.add_argument("--only", choices=["exact", "minhash"], default=None)
    p.add_argument("--_ours", nargs=4, metavar=("MODE", "INPUT", "WORK", "VERIFY"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args._ours:
        mode, inp, work, verify = args._ours
        print(json.dumps(run_ours(mode, inp, work, verify == "1")))
        return
    ensure_peer_venv()
    corpus = os.path.join(args.work, f"corpus-{args.docs_per_domain}")
    if not os.path.exists(os.path.join(corpus, "manifest.json")):
        subprocess.run(
            [
                sys.executable,
                "-m",
                "marin.corpus",
                "--output",
                corpus,
                "--train_docs_per_domain",
                str(args.docs_per_domain),
            ],
            check=True,
            cwd=ROOT,
        )
    train = os.path.join(corpus, "train")
    runs = []
    for mode in ("exact", "minhash"):
        if args.only and mode != args.only:
            continue
        variants = [("marin", "1"), ("datatrove", None)] + ([("marin (no verify)", "0")] if mode == "minhash" else [])
        for name, verify in variants:
            work = os.path.join(args.work, f"{mode}-{name.replace(' ', '_').strip('()')}")
            subprocess.run(["rm", "-rf", work], check=True)
            if name.startswith("marin"):
                cmd = [sys.executable, __file__, "--_ours", mode, train, work, verify]
            else:
                cmd = [
                    PEER_PY,
                    os.path.join(HERE, "datatrove_dedupe.py"),
                    "--mode",
                    mode,
                    "--input",
                    train,
                    "--work",
                    work,
                ]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT)
            result = json.loads(out.stdout.strip().splitlines()[-1])
            q = quality(corpus, result["kept_ids"], mode)
            row = {
                "mode": mode,
                "system": name,
                **q,
                "seconds": result["seconds"],
                "cpu_seconds": result["cpu_seconds"],
                "docs_per_second": round(q["documents"] / result["seconds"]["total"]),
                "docs_per_cpu_second": round(q["documents"] / result["cpu_seconds"]),
            }
            runs.append(row)
            print(
                f"{mode:8s} {name:18s} {row['docs_per_second']:>8d} docs/s  {row['docs_per_cpu_second']:>8d} "
                f"docs/cpu-s  recall {q['recall']:.4f}  precision~{q['precision_estimate']:.4f}",
                flush=True,
            )
    for mode in ("exact", "minhash"):
        ours = next((r for r in runs if r["mode"] == mode and r["system"] == "marin"), None)
        peer = next((r for r in runs if r["mode"] == mode and r["system"] == "datatrove"), None)
        if ours and peer:
            print(
                f"{mode}: marin / datatrove = {ours['docs_per_cpu_second'] / peer['docs_per_cpu_second']:.1f}x "
                f"per CPU-second, {ours['docs_per_second'] / peer['docs_per_second']:.1f}x wall"
            )
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "dedupe_bench.json"), "w") as fh:
        json.dump({"docs_per_domain": args.docs_per_domain, "runs": runs}, fh, indent=2)


if __name__ == "__main__":
    main()
