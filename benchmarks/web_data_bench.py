"""Throughput of the extract and classify steps against their libraries called in a plain loop.

    python benchmarks/web_data_bench.py [--pages_per_domain 3000] [--workers 2] [--repeat_docs 10] [--rounds 3]

- extractors: resiliparse vs trafilatura on the bundled pages: share of main-text words recovered, share of
  boilerplate words leaked (``marin.extract.measure``), pages/s in one process.
- extract: pages/s of ``extract_pages`` (reading WARC, charset detection, extraction, writing documents and
  skips) vs ``extract_text`` over the same pages already decoded in memory (the extractor's ceiling), and vs
  a plain script that reads each WARC file, extracts its pages and writes the texts: one process vs
  ``use_ray=False``, and ``workers`` processes (multiprocessing) vs ``workers`` Ray tasks.
- classify: documents/s of ``classify_documents`` (reading documents, scoring, writing attribute files) vs
  fastText's own ``predict(list, k=-1)`` on the same texts already on one line in memory, and vs a plain
  script that reads each file, predicts on its list and writes the scores; likewise on one and N cores.

Ray is started before any timing. Prints one JSON object and writes it to ``benchmarks/results/web_data_bench.json``;
docs/data_quality.md records the numbers.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from marin.corpus import CorpusConfig, generate_corpus
from marin.extract import ExtractConfig, ExtractorConfig, decode_html, extract_pages, extract_text
from marin.extract.measure import word_counts
from marin.quality import ClassifyConfig, FastTextConfig, TrainClassifierConfig, classify_documents, train_classifier
from marin.quality.model import fasttext_line, load_model
from marin.storage.records import find_record_files, read_documents, read_records, write_records
from marin.storage.shards import list_shards
from marin.storage.warc import read_warc

EXTRACTOR = ExtractorConfig()
RESULTS = Path(__file__).resolve().parent / "results" / "web_data_bench.json"


def _extract_chunk(htmls: list[str]) -> int:
    return sum(len(extract_text(h, EXTRACTOR)) for h in htmls)


def _extract_script(args) -> int:
    """What a user would write without the step: read each WARC file, extract every page, write the texts."""
    files, out_dir = args
    n = 0
    for i, url in enumerate(files):
        rows = []
        for page in read_warc(url):
            html, _ = decode_html(page.payload, page.content_type)
            text = extract_text(html, EXTRACTOR) if html is not None else ""
            if text:
                rows.append({"id": page.record_id, "text": text, "url": page.url})
        n += write_records(f"{out_dir}/{os.getpid()}-{i}.jsonl.gz", rows)
    return n


def _predict_chunk(args) -> int:
    model_path, lines = args
    labels, _ = load_model(model_path).predict(lines, k=-1)
    return len(labels)


def _plain_script(args) -> int:
    """What a user would write without the step: read each file, predict on its list, write the scores."""
    model_path, files, out_dir = args
    model = load_model(model_path)
    n = 0
    for i, url in enumerate(files):
        docs = list(read_documents(url))
        labels, probs = model.predict([fasttext_line(d["text"], 5_000) for d in docs], k=-1)
        rows = [
            {"id": d["id"], "scores": dict(zip(ls, ps.tolist(), strict=True))}
            for d, ls, ps in zip(docs, labels, probs, strict=True)
        ]
        n += write_records(f"{out_dir}/{os.getpid()}-{i}.jsonl.gz", rows)
    return n


def _split(items: list, n: int) -> list[list]:
    return [items[i::n] for i in range(n)]


def compare_extractors(root: str) -> dict:
    """Main-text words recovered, boilerplate words leaked and pages/s (one process) per extractor."""
    truth = {r["id"]: r for r in read_records(os.path.join(root, "ground_truth", "web_pages.jsonl.gz"))}
    shards = list_shards(os.path.join(root, "web"), suffixes=(".warc.gz",), field="web")
    pages = [(p.record_id, decode_html(p.payload, p.content_type)[0]) for s in shards for p in read_warc(s.url)]
    pages = [(pid, html) for pid, html in pages if html is not None]
    out = {}
    for name, fast in (("resiliparse", False), ("trafilatura", False), ("trafilatura", True)):
        config = ExtractorConfig(name=name, fast=fast)
        totals = [0, 0, 0, 0]
        start = time.perf_counter()
        texts = [(pid, extract_text(html, config)) for pid, html in pages]
        seconds = time.perf_counter() - start
        for pid, text in texts:
            if truth[pid]["expect"] == "text":
                counts = word_counts(text, truth[pid]["main_text"], truth[pid]["boilerplate_text"])
                totals = [a + b for a, b in zip(totals, counts, strict=True)]
        out[name + (" fast" if fast else "")] = {
            "recovered": round(totals[0] / totals[1], 3),
            "leaked": round(totals[2] / totals[3], 3),
            "pages_per_s": round(len(pages) / seconds, 1),
        }
    return out


def rounds(runs: dict[str, callable], n: int) -> dict[str, float]:
    """Median seconds of each zero-argument run, over ``n`` rounds run round-robin (alternating who goes
    first), so background load on a shared machine hits every side alike."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    names = list(runs)
    for r in range(n):
        for name in names if r % 2 == 0 else names[::-1]:
            t = time.perf_counter()
            runs[name]()
            times[name].append(time.perf_counter() - t)
    return {name: statistics.median(ts) for name, ts in times.items()}


def _fresh(work: str, name: str):
    """A new output directory per call (the steps skip finished work; every round must redo it)."""
    counter = iter(range(1_000_000))
    return lambda: f"{work}/{name}-{next(counter)}"


def _rates(count: int, seconds: dict[str, float], step: str, peers: list[str], unit: str) -> dict:
    out = {f"{name}_{unit}_per_s": round(count / t, 1) for name, t in seconds.items()}
    out.update({f"step_ratio_to_{peer}": round(seconds[peer] / seconds[step], 3) for peer in peers})
    return out


def bench_extract(root: str, work: str, workers: int, n_rounds: int) -> dict:
    shards = list_shards(os.path.join(root, "web"), suffixes=(".warc.gz",), field="web")
    htmls = []
    for s in shards:
        for page in read_warc(s.url):
            html, _ = decode_html(page.payload, page.content_type)
            if html is not None:
                htmls.append(html)
    pages = sum(1 for s in shards for _ in read_warc(s.url))
    files = [s.url for s in shards]
    web = os.path.join(root, "web")
    out = _fresh(work, "extract")
    _extract_script((files[:1], out()))  # first-use costs (imports, regexes) out of every timing
    one = rounds(
        {
            "plain_loop": lambda: _extract_chunk(htmls),
            "plain_script": lambda: _extract_script((files, out())),
            "step": lambda: extract_pages(ExtractConfig(input_path=web, output_path=out(), use_ray=False)),
        },
        n_rounds,
    )
    # Ray's workers are warmed (imports) by a first run, as the pool is by its first map.
    extract_pages(ExtractConfig(input_path=web, output_path=out(), max_workers=workers))
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        pool.map(_extract_script, [(files[:1], out())] * workers)
        many = rounds(
            {
                "plain_loop": lambda: pool.map(_extract_chunk, _split(htmls, workers)),
                "plain_script": lambda: pool.map(_extract_script, [(c, out()) for c in _split(files, workers)]),
                "step": lambda: extract_pages(ExtractConfig(input_path=web, output_path=out(), max_workers=workers)),
            },
            n_rounds,
        )
    peers = ["plain_loop", "plain_script"]
    return {
        "pages": pages,
        "files": len(shards),
        "rounds": n_rounds,
        "one_core": _rates(pages, one, "step", peers, "pages"),
        f"{workers}_workers": _rates(pages, many, "step", peers, "pages"),
    }


def bench_classify(root: str, work: str, workers: int, repeat: int, n_rounds: int) -> dict:
    model_dir = f"{work}/model"
    train_classifier(
        TrainClassifierConfig(
            datasets={
                "hq": (os.path.join(root, "quality", "reference"),),
                "web": (os.path.join(root, "quality", "web_sample"),),
            },
            output_path=model_dir,
            fasttext=FastTextConfig(),  # the lab default: dim 64, word bigrams, 200k buckets
        )
    )
    extract_pages(ExtractConfig(input_path=os.path.join(root, "web"), output_path=f"{work}/pages", use_ray=False))
    docs = [d for f in find_record_files(f"{work}/pages/documents") for d in read_documents(f)]
    # More documents than the corpus has, as several shards, so that workers have something to share.
    files = max(2 * workers, 8)
    per = len(docs) * repeat // files
    everything = [{**d, "id": f"{d['id']}-{r}"} for r in range(repeat) for d in docs]
    for i in range(files):
        write_records(f"{work}/docs/shard-{i:05d}.jsonl.gz", everything[i * per : (i + 1) * per])
    lines = [fasttext_line(d["text"], 5_000) for d in everything[: files * per]]
    model = f"{model_dir}/model.bin"
    shard_files = sorted(find_record_files(f"{work}/docs"))
    out = _fresh(work, "classify")

    def step(**kw):
        return lambda: classify_documents(
            ClassifyConfig(input_path=f"{work}/docs", model_path=model_dir, output_path=out(), **kw)
        )

    _predict_chunk((model, lines[:10]))
    one = rounds(
        {
            "predict": lambda: _predict_chunk((model, lines)),
            "plain_script": lambda: _plain_script((model, shard_files, out())),
            "step": step(use_ray=False),
        },
        n_rounds,
    )
    step(max_workers=workers)()  # warms Ray's workers
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        pool.map(_predict_chunk, [(model, lines[:10])] * workers)
        many = rounds(
            {
                "predict": lambda: pool.map(_predict_chunk, [(model, c) for c in _split(lines, workers)]),
                "plain_script": lambda: pool.map(
                    _plain_script, [(model, c, out()) for c in _split(shard_files, workers)]
                ),
                "step": step(max_workers=workers),
            },
            n_rounds,
        )
    peers = ["predict", "plain_script"]
    return {
        "documents": len(lines),
        "files": files,
        "rounds": n_rounds,
        "one_core": _rates(len(lines), one, "step", peers, "docs"),
        f"{workers}_workers": _rates(len(lines), many, "step", peers, "docs"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages_per_domain", type=int, default=3000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat_docs", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per measurement (median)")
    args = parser.parse_args()
    os.environ.setdefault("MARIN_PROGRESS", "0")
    import ray

    ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False)
    work = tempfile.mkdtemp(prefix="web-bench-")
    try:
        root = f"{work}/corpus"
        generate_corpus(
            CorpusConfig(
                output_path=root,
                train_docs_per_domain=10,
                validation_docs_per_domain=5,
                eval_items_per_task=10,
                contaminated_docs_per_task=1,
                web_pages_per_domain=args.pages_per_domain,
                web_shards_per_domain=4,
            )
        )
        result = {
            "cpus": os.cpu_count(),
            "extractors": compare_extractors(root),
            "extract": bench_extract(root, work, args.workers, args.rounds),
        }
        result["classify"] = bench_classify(root, work, args.workers, args.repeat_docs, args.rounds)
        result["load_avg"] = os.getloadavg()
        print(json.dumps(result, indent=2))
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(result, indent=2))
    finally:
        shutil.rmtree(work, ignore_errors=True)
        ray.shutdown()


if __name__ == "__main__":
    main()
