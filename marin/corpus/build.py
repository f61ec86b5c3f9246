"""Write the bundled corpus: a seeded, self-checking stand-in for web data, generated in seconds.

    python -m marin.corpus --output /tmp/corpus          # ~10 MB of text, ~3 MB on disk

Layout under the output directory (every record is ``{"id", "text", "source"}``)::

    train/stories/shard-0000{0..7}.jsonl.gz      training documents, per domain
    train/arithmetic/shard-0000{0..7}.jsonl.gz
    validation/stories/shard-00000.jsonl.gz      held out: generated from a separate random stream
    validation/arithmetic/shard-00000.jsonl.gz
    eval/<task>.jsonl                            multiple-choice tasks (``marin.corpus.tasks``)
    ground_truth/duplicates.jsonl                planted duplicates: {"kind", "original", "copy", "jaccard"}
    ground_truth/contaminated.jsonl              training docs holding eval items: {"id", "eval_id", "task"}
    web/<domain>/shard-0000{0,1}.warc.gz         raw HTML pages with boilerplate, low-quality and broken ones
    quality/reference/<domain>.jsonl.gz          high-quality reference text (a quality classifier's positives)
    quality/web_sample/<domain>.jsonl.gz         random web text, already extracted (its negatives)
    langid/<lang>.jsonl.gz                       labelled samples in five languages
    ground_truth/web_pages.jsonl.gz              per page: kind, quality, language, main text, boilerplate
    manifest.json                                config, counts and bytes per file

The web part (``marin.corpus.web``, ``marin.corpus.web_sets``) is what extraction and quality filtering
are measured on: every page's main text and boilerplate are known.

What is planted in the training split, so that dedupe can be measured against a known answer:

- exact duplicates: copies of a document, some re-cased or with changed whitespace (equal after
  ``normalize_exact``), some in groups of three;
- near duplicates: copies with 1-6 word edits (substitutions, deletions, insertions), with their exact
  word-5-gram Jaccard to the original recorded, so that about half are above 0.8 and half below;
- contaminated documents: an eval item (context plus correct answer) embedded in otherwise ordinary text.

Documents of a domain (originals and plants) are shuffled together before sharding, so copies usually
sit in other shards than their originals. Same seed, same bytes.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import re

from marin.corpus.domains import DOMAINS, NAMES, THINGS
from marin.corpus.tasks import TASK_DOMAIN, TASKS, item_text, make_task
from marin.dedupe.text import jaccard
from marin.storage import join, write_atomic
from marin.storage.records import write_records
from marin.validation import check, concrete

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CorpusConfig:
    output_path: str
    seed: int = 0
    train_docs_per_domain: int = 12_000
    """Original training documents per domain, before planting copies."""
    validation_docs_per_domain: int = 500
    train_shards_per_domain: int = 8
    eval_items_per_task: int = 200
    exact_duplicate_fraction: float = 0.02
    """Exact copies planted, as a fraction of the originals."""
    near_duplicate_fraction: float = 0.04
    contaminated_docs_per_task: int = 10
    web_pages_per_domain: int = 1000
    """Raw HTML pages per domain under ``web/`` (``marin.corpus.web``); 0 writes no web part."""
    web_shards_per_domain: int = 2
    reference_docs_per_domain: int = 500
    """High-quality reference documents per domain (a quality classifier's positives), and as many documents
    of random web text (its negatives)."""
    langid_docs_per_language: int = 300
    """Labelled samples per language for a language classifier."""

    def __post_init__(self):
        for field in (
            "train_docs_per_domain",
            "validation_docs_per_domain",
            "train_shards_per_domain",
            "eval_items_per_task",
        ):
            check("CorpusConfig", field, getattr(self, field), lambda v: v >= 1, ">= 1")
        for field in ("web_pages_per_domain", "reference_docs_per_domain", "langid_docs_per_language"):
            check("CorpusConfig", field, getattr(self, field), lambda v: v >= 0, ">= 0")
        check("CorpusConfig", "web_shards_per_domain", self.web_shards_per_domain, lambda v: v >= 1, ">= 1")
        for field in ("exact_duplicate_fraction", "near_duplicate_fraction"):
            check("CorpusConfig", field, getattr(self, field), lambda v: 0 <= v < 1, "in [0, 1)")
        _, items = concrete(self.eval_items_per_task)
        check(
            "CorpusConfig",
            "contaminated_docs_per_task",
            self.contaminated_docs_per_task,
            lambda v: items is None or 0 <= v <= items,
            f"in [0, eval_items_per_task={items}]",
        )


_WORD = re.compile(r"[A-Za-z]+")
_FILLER = [
    "maybe",
    "really",
    "also",
    "still",
    "very",
    "quite",
    "then",
    "soon",
    "later",
    "often",
    "green",
    "wooden",
    "round",
    "bright",
    "quickly",
    "slowly",
]


def near_copy(text: str, rng: random.Random, edits: int) -> str:
    """``text`` with ``edits`` random word substitutions, deletions or insertions (formatting kept)."""
    spans = [m.span() for m in _WORD.finditer(text)]
    chosen = sorted(rng.sample(range(len(spans)), min(edits, len(spans))), reverse=True)
    for i in chosen:
        s, e = spans[i]
        op = rng.random()
        if op < 0.5:
            text = text[:s] + rng.choice(_FILLER) + text[e:]
        elif op < 0.75:
            text = text[:s] + text[e:].lstrip(" ")
        else:
            text = text[:s] + rng.choice(_FILLER) + " " + text[s:]
    return text


def exact_variant(text: str, rng: random.Random) -> str:
    """A copy that exact dedupe must still catch: identical, upper-cased, or with doubled spaces."""
    kind = rng.random()
    if kind < 0.5:
        return text
    if kind < 0.75:
        return text.upper()
    return text.replace(" ", "  ", 3) + "  \n"


def _leak(item: dict, rng: random.Random) -> str:
    """An ordinary-looking document that quotes one eval item verbatim (with its correct answer)."""
    intro = f"{rng.choice(NAMES)} wrote down a question about {rng.choice(THINGS)} for the class quiz."
    outro = f"The teacher said the answer was right, and everyone clapped {rng.randint(2, 9)} times."
    return f"{intro}\n\n{item_text(item)}\n\n{outro}"


def _plant(cfg: CorpusConfig, domain: str, originals: list[dict], rng: random.Random, leaks: list[tuple]):
    """Copies and leaks for one domain, plus their ground-truth rows."""
    n = len(originals)
    docs, truth = [], []
    for src in rng.sample(originals, int(n * cfg.exact_duplicate_fraction)):
        for _ in range(2 if rng.random() < 0.2 else 1):
            docs.append({"text": exact_variant(src["text"], rng), "source": domain})
            truth.append({"kind": "exact", "original": src["id"], "copy_index": len(docs) - 1, "jaccard": 1.0})
    for src in rng.sample(originals, int(n * cfg.near_duplicate_fraction)):
        text = near_copy(src["text"], rng, rng.randint(1, 6))
        docs.append({"text": text, "source": domain})
        truth.append(
            {
                "kind": "near",
                "original": src["id"],
                "copy_index": len(docs) - 1,
                "jaccard": round(jaccard(src["text"], text), 6),
            }
        )
    contaminated = []
    for item in leaks:
        docs.append({"text": _leak(item, rng), "source": domain})
        contaminated.append({"copy_index": len(docs) - 1, "eval_id": item["id"], "task": item["task"]})
    return docs, truth, contaminated


def generate_corpus(cfg: CorpusConfig) -> dict:
    """Write the corpus under ``cfg.output_path``; returns the manifest (also written as manifest.json)."""
    config = {k: v for k, v in dataclasses.asdict(cfg).items() if k != "output_path"}  # what, not where
    manifest: dict = {"config": config, "files": {}}
    eval_items = {}
    for task in sorted(TASKS):
        items = make_task(task, random.Random(f"{cfg.seed}-eval-{task}"), cfg.eval_items_per_task)
        eval_items[task] = items
        url = join(cfg.output_path, "eval", f"{task}.jsonl")
        write_records(url, items)
        manifest["files"][f"eval/{task}.jsonl"] = len(items)
    duplicates, contaminated = [], []
    for domain, make in sorted(DOMAINS.items()):
        drng = random.Random(f"{cfg.seed}-train-{domain}")
        originals = [{"id": "", "text": make(drng), "source": domain} for _ in range(cfg.train_docs_per_domain)]
        leaks = [
            item
            for task in sorted(TASKS)
            if TASK_DOMAIN[task] == domain
            for item in drng.sample(eval_items[task], cfg.contaminated_docs_per_task)
        ]
        # Ids are assigned after shuffling, so they say nothing about which documents are copies.
        for i, doc in enumerate(originals):
            doc["id"] = f"tmp-{i}"
        planted, truth, leaked = _plant(cfg, domain, originals, drng, leaks)
        every = originals + planted
        order = list(range(len(every)))
        drng.shuffle(order)
        final_id = {}
        for pos, idx in enumerate(order):
            final_id[idx] = f"{domain}-{pos:07d}"
        by_tmp = {f"tmp-{i}": final_id[i] for i in range(len(originals))}
        for row in truth:
            duplicates.append(
                {
                    "kind": row["kind"],
                    "original": by_tmp[row["original"]],
                    "copy": final_id[len(originals) + row["copy_index"]],
                    "jaccard": row["jaccard"],
                }
            )
        for row in leaked:
            contaminated.append(
                {"id": final_id[len(originals) + row["copy_index"]], "eval_id": row["eval_id"], "task": row["task"]}
            )
        shuffled = [{"id": final_id[idx], "text": every[idx]["text"], "source": domain} for idx in order]
        manifest["files"].update(
            _write_shards(cfg.output_path, f"train/{domain}", shuffled, cfg.train_shards_per_domain)
        )
        vrng = random.Random(f"{cfg.seed}-validation-{domain}")
        val = [
            {"id": f"{domain}-val-{i:06d}", "text": make(vrng), "source": domain}
            for i in range(cfg.validation_docs_per_domain)
        ]
        manifest["files"].update(_write_shards(cfg.output_path, f"validation/{domain}", val, 1))
    _write_web(cfg, manifest)
    write_records(join(cfg.output_path, "ground_truth", "duplicates.jsonl"), duplicates)
    write_records(join(cfg.output_path, "ground_truth", "contaminated.jsonl"), contaminated)
    manifest["planted"] = {
        "exact_duplicates": sum(d["kind"] == "exact" for d in duplicates),
        "near_duplicates": sum(d["kind"] == "near" for d in duplicates),
        "near_duplicates_jaccard_ge_0.8": sum(d["kind"] == "near" and d["jaccard"] >= 0.8 for d in duplicates),
        "contaminated": len(contaminated),
    }
    write_atomic(join(cfg.output_path, "manifest.json"), json.dumps(manifest, indent=2))
    logger.info("wrote corpus to %s: %s", cfg.output_path, manifest["planted"])
    return manifest


def _write_web(cfg: CorpusConfig, manifest: dict) -> None:
    """Raw web pages, reference text and language samples (``marin.corpus.web_sets``)."""
    from marin.corpus.web_sets import write_langid, write_reference, write_web_pages, write_web_sample

    truth = []
    for domain, make in sorted(DOMAINS.items()):
        if cfg.web_pages_per_domain:
            files, rows = write_web_pages(
                cfg.output_path, cfg.seed, domain, make, cfg.web_pages_per_domain, cfg.web_shards_per_domain
            )
            manifest["files"].update(files)
            truth += rows
        if cfg.reference_docs_per_domain:
            manifest["files"].update(
                write_reference(cfg.output_path, cfg.seed, domain, make, cfg.reference_docs_per_domain)
            )
            manifest["files"].update(
                write_web_sample(cfg.output_path, cfg.seed, domain, make, cfg.reference_docs_per_domain)
            )
    if cfg.langid_docs_per_language:
        manifest["files"].update(
            write_langid(
                cfg.output_path,
                cfg.seed,
                cfg.langid_docs_per_language,
                lambda rng: DOMAINS[rng.choice(sorted(DOMAINS))](rng),
            )
        )
    if truth:
        write_records(join(cfg.output_path, "ground_truth", "web_pages.jsonl.gz"), truth)
        kinds: dict[str, int] = {}
        for row in truth:
            kinds[row["kind"]] = kinds.get(row["kind"], 0) + 1
        manifest["web_pages"] = dict(sorted(kinds.items()))


def _write_shards(root: str, rel_dir: str, docs: list[dict], num_shards: int) -> dict[str, int]:
    out = {}
    per = -(-len(docs) // num_shards)
    for s in range(num_shards):
        rel = f"{rel_dir}/shard-{s:05d}.jsonl.gz"
        out[rel] = write_records(join(root, rel), docs[s * per : (s + 1) * per])
    return out


def load_ground_truth(corpus_path: str) -> tuple[list[dict], list[dict]]:
    """(duplicates, contaminated) rows of a generated corpus."""
    from marin.storage.records import read_records

    return (
        list(read_records(join(corpus_path, "ground_truth", "duplicates.jsonl"))),
        list(read_records(join(corpus_path, "ground_truth", "contaminated.jsonl"))),
    )
