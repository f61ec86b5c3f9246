"""Throughput of the extract and classify steps against their libraries called in a plain loop.

    python benchmarks/web_data_bench.py [--pages_per_domain 1000] [--workers 2] [--repeat_docs 10]

- extractors: resiliparse vs trafilatura on the bundled pages: share of main-text words recovered, share of
  boilerplate words leaked (``marin.extract.measure``), pages/s in one process.
- extract: pages/s of ``extract_pages`` (reading WARC, charset detection, extraction, writing documents and
  skips) vs ``extract_text`` over the same pages already decoded in memory: one process vs
  ``use_ray=False``, and ``workers`` processes (multiprocessing) vs ``workers`` Ray tasks.
- classify: documents/s of ``classify_documents`` (reading documents, scoring, writing attribute files) vs
  fastText's own ``predict(list, k=-1)`` on the same texts already on one line in memory, and vs a plain
  script that reads each file, predicts on its list and writes the scores; likewise on one and N cores.

Ray is started before any timing. Prints one JSON object; docs/data_quality.md records the numbers.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import tempfile
import time

from marin.corpus import CorpusConfig, generate_corpus
from marin.extract import ExtractConfig, ExtractorConfig, decode_html, extract_pages, extract_text
from marin.extract.measure import word_counts
from marin.quality import ClassifyConfig, FastTextConfig, TrainClassifierConfig, classify_documents, train_classifier
from marin.quality.model import fasttext_line, load_model
from marin.storage.records import find_record_files, read_documents, read_records, write_records
from marin.storage.shards import list_shards
from marin.storage.warc import read_warc

EXTRACTOR = ExtractorConfig()


def _extract_chunk(htmls: list[str]) -> int:
    return sum(len(extract_text(h, EXTRACTOR)) for h in htmls)


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


def bench_extract(root: str, work: str, workers: int) -> dict:
    shards = list_shards(os.path.join(root, "web"), suffixes=(".warc.gz",), field="web")
    htmls = []
    for s in shards:
        for page in read_warc(s.url):
            html, _ = decode_html(page.payload, page.content_type)
            if html is not None:
                htmls.append(html)
    pages = sum(1 for s in shards for _ in read_warc(s.url))
    t = time.perf_counter()
    _extract_chunk(htmls)
    loop_1 = time.perf_counter() - t
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        pool.map(_extract_chunk, [htmls[:workers]] * workers)  # warm the workers' imports
        t = time.perf_counter()
        pool.map(_extract_chunk, _split(htmls, workers))
        loop_n = time.perf_counter() - t
    t = time.perf_counter()
    extract_pages(ExtractConfig(input_path=os.path.join(root, "web"), output_path=f"{work}/x1", use_ray=False))
    step_1 = time.perf_counter() - t
    # Warm Ray's workers (imports) as the pool above was warmed: time the second run.
    extract_pages(ExtractConfig(input_path=os.path.join(root, "web"), output_path=f"{work}/xw", max_workers=workers))
    t = time.perf_counter()
    extract_pages(ExtractConfig(input_path=os.path.join(root, "web"), output_path=f"{work}/xn", max_workers=workers))
    step_n = time.perf_counter() - t
    return {
        "pages": pages,
        "files": len(shards),
        "one_core": {
            "plain_loop_pages_per_s": round(len(htmls) / loop_1, 1),
            "step_pages_per_s": round(pages / step_1, 1),
            "ratio": round(loop_1 / step_1, 3),
        },
        f"{workers}_workers": {
            "plain_loop_pages_per_s": round(len(htmls) / loop_n, 1),
            "step_pages_per_s": round(pages / step_n, 1),
            "ratio": round(loop_n / step_n, 3),
        },
    }


def bench_classify(root: str, work: str, workers: int, repeat: int) -> dict:
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
    docs = [d for f in find_record_files(f"{work}/x1/documents") for d in read_documents(f)]
    # More documents than the corpus has, as several shards, so that workers have something to share.
    files = max(2 * workers, 8)
    per = len(docs) * repeat // files
    everything = [{**d, "id": f"{d['id']}-{r}"} for r in range(repeat) for d in docs]
    for i in range(files):
        write_records(f"{work}/docs/shard-{i:05d}.jsonl.gz", everything[i * per : (i + 1) * per])
    texts = [d["text"] for d in everything[: files * per]]
    lines = [fasttext_line(t, 5_000) for t in texts]
    model = f"{model_dir}/model.bin"
    t = time.perf_counter()
    _predict_chunk((model, lines))
    loop_1 = time.perf_counter() - t
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        pool.map(_predict_chunk, [(model, lines[:10])] * workers)
        t = time.perf_counter()
        pool.map(_predict_chunk, [(model, chunk) for chunk in _split(lines, workers)])
        loop_n = time.perf_counter() - t
    shard_files = sorted(find_record_files(f"{work}/docs"))
    t = time.perf_counter()
    _plain_script((model, shard_files, f"{work}/plain1"))
    script_1 = time.perf_counter() - t
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        pool.map(_predict_chunk, [(model, lines[:10])] * workers)
        t = time.perf_counter()
        pool.map(_plain_script, [(model, chunk, f"{work}/plainn") for chunk in _split(shard_files, workers)])
        script_n = time.perf_counter() - t
    t = time.perf_counter()
    classify_documents(
        ClassifyConfig(input_path=f"{work}/docs", model_path=model_dir, output_path=f"{work}/c1", use_ray=False)
    )
    step_1 = time.perf_counter() - t
    classify_documents(
        ClassifyConfig(input_path=f"{work}/docs", model_path=model_dir, output_path=f"{work}/cw", max_workers=workers)
    )
    t = time.perf_counter()
    classify_documents(
        ClassifyConfig(input_path=f"{work}/docs", model_path=model_dir, output_path=f"{work}/cn", max_workers=workers)
    )
    step_n = time.perf_counter() - t
    n = len(lines)
    return {
        "documents": n,
        "files": files,
        "one_core": {
            "predict_docs_per_s": round(n / loop_1, 1),
            "plain_script_docs_per_s": round(n / script_1, 1),
            "step_docs_per_s": round(n / step_1, 1),
            "ratio_to_predict": round(loop_1 / step_1, 3),
            "ratio_to_plain_script": round(script_1 / step_1, 3),
        },
        f"{workers}_workers": {
            "predict_docs_per_s": round(n / loop_n, 1),
            "plain_script_docs_per_s": round(n / script_n, 1),
            "step_docs_per_s": round(n / step_n, 1),
            "ratio_to_predict": round(loop_n / step_n, 3),
            "ratio_to_plain_script": round(script_n / step_n, 3),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages_per_domain", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat_docs", type=int, default=10)
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
            "extract": bench_extract(root, work, args.workers),
        }
        result["classify"] = bench_classify(root, work, args.workers, args.repeat_docs)
        print(json.dumps(result, indent=2))
    finally:
        shutil.rmtree(work, ignore_errors=True)
        ray.shutdown()


if __name__ == "__main__":
    main()
