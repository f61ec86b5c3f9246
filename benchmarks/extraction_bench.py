"""Main-content extraction on real, human-annotated pages: the extract step's extractors and the other
maintained libraries installable here, scored with each benchmark's own metric, per page type, with pages/s
beside them (issue 25).

    git clone https://github.com/Murrough-Foley/web-content-extraction-benchmark benchmarks/data/wcxb
    git clone https://github.com/AndyTheFactory/article-extraction-dataset benchmarks/data/news424
    .venv/bin/pip install readability-lxml boilerpy3          # the peers that are not extract-step options
    .venv/bin/python benchmarks/extraction_bench.py                          # WCXB dev split, every extractor
    .venv/bin/python benchmarks/extraction_bench.py --benchmark news424      # the 424 news pages
    .venv/bin/python benchmarks/extraction_bench.py --split test --limit 200
    .venv/bin/python benchmarks/extraction_bench.py --wcxb tests/data/wcxb_slice   # the bundled slice

WCXB (Foley 2026, CC-BY-4.0): 2,008 real pages from 1,613 domains, seven page types (article, forum,
product, collection, listing, documentation, service), each with the human-reviewed main content. Its
metric (``evaluate.py`` there, reimplemented here and checked against it in the tests): word-level
precision, recall and F1 of lowercase ``\\w+`` tokens as bags, averaged over pages; plus the share of the
page's ``with`` snippets found and of its ``without`` (boilerplate) snippets leaked.

news424 (Andrei Paraschiv 2024, newspaper4k's evaluation set, Apache-2.0): 424 news and blog articles
from 212 sites, published in 2023, main text cleaned by hand, in the layout of Zyte's (Scrapinghub's)
article-extraction benchmark; its metric is that benchmark's ``evaluate.py`` (reimplemented here): 4-word
shingles as bags, each page's TP/FP/FN normalized to sum 1, precision and recall averaged over pages, F1 of
the two averages. One page type (``article``).

``step`` is the extract step itself with its defaults, end to end in one process: the pages' bytes as
``.html`` files in, its documents out (charset detection, ``min_chars``; a skipped page scores as empty).
Every step extractor runs through ``marin.extract.extract_text`` exactly as the extract step calls it, one page
at a time in this process (so pages/s is per core), and its output is also checked for markup the page did
not contain: Markdown escapes (``\\_``, ``\\[``, ``\\*``), emphasis markers (``**``, ``__``) and Markdown
blocks (``# `` headings, ``- `` bullets, ``| ... |`` table rows, code fences). The peers
(``readability``: readability-lxml's article HTML as text; ``boilerpy3``: boilerpipe's ArticleExtractor;
``justext``: its non-boilerplate paragraphs with the English stoplist) run the same way when installed.
Results: ``benchmarks/results/extraction_bench[_<benchmark>].json``.
"""

from __future__ import annotations

import argparse
import gzip
import html as html_lib
import json
import re
import statistics
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

from marin.extract.config import ExtractorConfig
from marin.extract.extractors import extract_text

HERE = Path(__file__).resolve().parent
DEFAULT_ROOTS = {"wcxb": HERE / "data" / "wcxb", "news424": HERE / "data" / "news424"}
RESULTS = HERE / "results" / "extraction_bench.json"
PAGE_TYPES = ("article", "forum", "product", "collection", "listing", "documentation", "service")

EXTRACTORS = {
    "resiliparse": ExtractorConfig(name="resiliparse"),
    "resiliparse_markdown": ExtractorConfig(name="resiliparse", markdown=True),
    "trafilatura": ExtractorConfig(name="trafilatura"),
    "trafilatura_markdown": ExtractorConfig(name="trafilatura", markdown=True),
    "trafilatura_fast": ExtractorConfig(name="trafilatura", fast=True),
}
"""Names to the configs the extract step would be given."""

MARKUP = {
    "markdown_escapes": re.compile(r"\\[_\[\]*#`>!-]"),
    "emphasis_markers": re.compile(r"\*\*|(?<!\w)__|__(?!\w)"),
    "markdown_blocks": re.compile(r"(?m)^(#{1,6} |[-*+] |\|.*\|[ \t]*$|```)"),
}


def _readability(html: str) -> str:
    import lxml.html
    from readability import Document

    summary = Document(html).summary(html_partial=True)
    return _block_text(lxml.html.fromstring(summary)) if summary.strip() else ""


def _block_text(tree) -> str:
    """An element's text with a line break after every block element (as a browser lays it out)."""
    blocks = {"p", "div", "li", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "blockquote", "tr", "br", "td", "th"}
    for el in tree.iter():
        if isinstance(el.tag, str) and el.tag.lower() in blocks:
            el.tail = "\n" + (el.tail or "")
    return "\n".join(line.strip() for line in tree.text_content().splitlines() if line.strip())


def _boilerpy3(html: str) -> str:
    from boilerpy3 import extractors

    return extractors.ArticleExtractor(raise_on_failure=False).get_content(html) or ""


def _justext(html: str) -> str:
    import justext

    paragraphs = justext.justext(html.encode("utf-8", errors="replace"), justext.get_stoplist("English"))
    return "\n".join(p.text for p in paragraphs if not p.is_boilerplate)


PEERS: dict[str, Callable[[str], str]] = {"readability": _readability, "boilerpy3": _boilerpy3, "justext": _justext}
"""Maintained libraries that are not extract-step options, measured beside them when installed."""


def extractor_fn(name: str) -> Callable[[str], str]:
    if name in EXTRACTORS:
        config = EXTRACTORS[name]
        return lambda html: extract_text(html, config)
    return PEERS[name]


def available_peers() -> list[str]:
    """The peers whose library is installed (each peer is named after its module)."""
    import importlib.util

    return [name for name in PEERS if importlib.util.find_spec(name)]


def words(text: str) -> list[str]:
    """WCXB's tokenization: lowercase ``\\w+`` runs."""
    return re.findall(r"\w+", text.lower()) if text else []


def word_prf(predicted: str, reference: str) -> tuple[float, float, float]:
    """WCXB's word-level precision, recall and F1 (bags of words)."""
    pred, ref = words(predicted), words(reference)
    if not ref:
        return (1.0, 1.0, 1.0) if not pred else (0.0, 0.0, 0.0)
    if not pred:
        return 0.0, 0.0, 0.0
    overlap = sum((Counter(pred) & Counter(ref)).values())
    p, r = overlap / len(pred), overlap / len(ref)
    return p, r, (2 * p * r / (p + r) if p + r else 0.0)


def shingles(text: str, n: int = 4) -> Counter:
    """The article-extraction benchmark's shingles: runs of ``n`` ``\\w+`` tokens (case kept)."""
    tokens = re.findall(r"\w+", text or "")
    return Counter(tuple(tokens[i : i + n]) for i in range(max(1, len(tokens) - n + 1)) if tokens[i : i + n])


def shingle_tp_fp_fn(predicted: str, reference: str) -> tuple[float, float, float]:
    """One page's shingle TP/FP/FN, normalized to sum 1 so that long pages weigh no more than short ones."""
    pred, true = shingles(predicted), shingles(reference)
    tp = sum((pred & true).values())
    fp, fn = sum((pred - true).values()), sum((true - pred).values())
    total = tp + fp + fn
    return (tp / total, fp / total, fn / total) if total else (0.0, 0.0, 0.0)


def shingle_prf(tp: float, fp: float, fn: float) -> tuple[float | None, float | None, float]:
    """Per-page precision and recall by the benchmark's rules (None: left out of that mean), and F1."""
    if fp == fn == 0:
        return 1.0, 1.0, 1.0
    p = 0.0 if tp == fp == 0 else tp / (tp + fp) if tp + fp > 0 else None
    r = 0.0 if tp == fn == 0 else tp / (tp + fn) if tp + fn > 0 else None
    f1 = 2 * p * r / (p + r) if p and r else 0.0
    return p, r, f1


def added_markup(text: str, page: dict) -> list[str]:
    """The kinds of markup in ``text`` that the page did not contain: a match counts unless the page's main
    text has that kind too, or the matched line is the page's own text (code quoting ``__init__``, a line
    that starts with ``- ``)."""
    found, page_texts = [], None
    for name, pattern in MARKUP.items():
        if pattern.search(page["main"]):
            continue
        for match in pattern.finditer(text):
            if page_texts is None:  # the page's text with tags dropped, and with tags as spaces
                page_texts = [
                    " ".join(html_lib.unescape(re.sub(r"<[^>]*>", sep, page["html"])).split()) for sep in ("", " ")
                ]
            line_start = text.rfind("\n", 0, match.start()) + 1
            before = text[max(line_start, match.start() - 12) : match.start()]
            context = " ".join((before + text[match.start() : match.end() + 12].split("\n")[0]).split())
            if not any(context in page_text for page_text in page_texts):
                found.append(name)
                break
    return found


def bootstrap_f1_ci(rows: list[dict], metric: str, rounds: int = 1000, seed: int = 0) -> float:
    """Half-width of the 95% interval of the benchmark's F1 over pages resampled with replacement (as the
    article-extraction benchmark's ``evaluate.py`` reports it: 1.96 standard deviations)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(rows), size=(rounds, len(rows)))
    if metric == "shingles":
        p = np.array([np.nan if r["precision"] is None else r["precision"] for r in rows])
        r = np.array([np.nan if r["recall"] is None else r["recall"] for r in rows])
        mp, mr = np.nanmean(p[picks], axis=1), np.nanmean(r[picks], axis=1)
        f1 = 2 * mp * mr / (mp + mr)
    else:
        f1 = np.array([r["f1"] for r in rows])[picks].mean(axis=1)
    return float(1.96 * np.std(f1, ddof=1))


def snippet_rate(text: str, snippets: list[str]) -> float:
    if not snippets:
        return 1.0
    lower = text.lower()
    return sum(s.lower() in lower for s in snippets) / len(snippets)


def load_pages(root: Path, split: str, limit: int | None = None) -> list[dict]:
    """WCXB pages of ``split``: ``{"id", "page_type", "html", "main", "with", "without"}``."""
    pages = []
    for gt_file in sorted((root / split / "ground-truth").glob("*.json")):
        data = json.loads(gt_file.read_text())
        gt = data.get("ground_truth")
        html_file = root / split / "html" / f"{gt_file.stem}.html.gz"
        if not isinstance(gt, dict) or not html_file.exists():
            continue
        page_type = ((data.get("_internal") or {}).get("page_type") or {}).get("primary", "article")
        pages.append(
            {
                "id": gt_file.stem,
                "page_type": "collection" if page_type == "category" else page_type,
                "raw": (raw := gzip.decompress(html_file.read_bytes())),
                "html": raw.decode("utf-8", errors="replace"),
                "main": gt.get("main_content") or "",
                "with": gt.get("with") or [],
                "without": gt.get("without") or [],
            }
        )
        if limit and len(pages) >= limit:
            break
    if not pages:
        raise SystemExit(f"no WCXB pages under {root / split} (clone the benchmark there: see the docstring)")
    return pages


def load_news424(root: Path, limit: int | None = None) -> list[dict]:
    """news424 pages: ``articles.json`` maps each ``html/<id>.html`` to its hand-cleaned ``articleBody``."""
    truth_file = root / "articles.json"
    if not truth_file.exists():
        raise SystemExit(f"no {truth_file} (clone the benchmark there: see the docstring)")
    pages = []
    for page_id, record in sorted(json.loads(truth_file.read_text()).items()):
        html_file = root / "html" / f"{page_id}.html"
        if not html_file.exists():
            continue
        raw = html_file.read_bytes()
        html = raw.decode("utf-8", errors="replace")
        main = record.get("articleBody") or ""
        pages.append({"id": page_id, "page_type": "article", "raw": raw, "html": html, "main": main})
        if limit and len(pages) >= limit:
            break
    return pages


def step_texts(pages: list[dict]) -> tuple[dict[str, str], float]:
    """The extract step itself with its defaults, end to end in this process: each page's bytes as an
    ``.html`` file in, documents out (charset detection, ``min_chars``, skips: a skipped page's text is "").
    Returns each page's text and the step's CPU seconds."""
    import tempfile

    from marin.extract import ExtractConfig, extract_pages
    from marin.storage.records import read_records

    with tempfile.TemporaryDirectory() as tmp:
        pages_dir, out = Path(tmp) / "pages", Path(tmp) / "out"
        pages_dir.mkdir()
        for page in pages:
            (pages_dir / f"{page['id']}.html").write_bytes(page["raw"])
        t0 = time.process_time()
        extract_pages(ExtractConfig(input_path=str(pages_dir), output_path=str(out), use_ray=False))
        seconds = time.process_time() - t0
        docs = {r["id"]: r["text"] for f in sorted((out / "documents").rglob("*.gz")) for r in read_records(str(f))}
    return {page["id"]: docs.get(f"{page['id']}.html", "") for page in pages}, seconds


def extract_texts(pages: list[dict], extract: Callable[[str], str]) -> tuple[dict[str, str], float]:
    """Each page's text by ``extract`` (one page at a time, in this process) and the CPU seconds it took."""
    texts, seconds = {}, 0.0
    for page in pages:
        t0 = time.process_time()
        texts[page["id"]] = extract(page["html"])
        seconds += time.process_time() - t0
    return texts, seconds


def score(pages: list[dict], texts: dict[str, str], seconds: float, metric: str = "wcxb") -> dict:
    """Per-page scores of one extractor's ``texts`` (by page id, made in ``seconds``), their means overall and
    per page type, markup leaks, pages/s.

    ``metric``: ``wcxb`` (bag-of-words P/R/F1 averaged over pages) or ``shingles`` (the article-extraction
    benchmark's: P and R averaged over pages, F1 of the averages)."""
    rows = []
    leaks = Counter()
    for page in pages:
        text = texts[page["id"]]
        if metric == "shingles":
            p, r, f1 = shingle_prf(*shingle_tp_fp_fn(text, page["main"]))
        else:
            p, r, f1 = word_prf(text, page["main"])
        for name in added_markup(text, page):
            leaks[name] += 1
        row = {"id": page["id"], "page_type": page["page_type"], "precision": p, "recall": r, "f1": f1}
        if "with" in page:
            row["with"] = snippet_rate(text, page["with"])
            row["without"] = snippet_rate(text, page["without"]) if page["without"] else 0.0
        rows.append(row)

    def means(subset: list[dict]) -> dict:
        keys = [k for k in ("precision", "recall", "f1", "with", "without") if k in subset[0]]
        out = {k: statistics.fmean(r[k] for r in subset if r[k] is not None) for k in keys}
        if metric == "shingles":
            p, r = out["precision"], out["recall"]
            out["f1"] = 2 * p * r / (p + r) if p + r else 0.0
        return out

    by_type = defaultdict(list)
    for row in rows:
        by_type[row["page_type"]].append(row)
    return {
        "pages": len(rows),
        "overall": {**means(rows), "f1_ci": bootstrap_f1_ci(rows, metric)},
        "by_type": {
            t: {"pages": len(by_type[t]), **means(by_type[t]), "f1_ci": bootstrap_f1_ci(by_type[t], metric)}
            for t in PAGE_TYPES
            if by_type[t]
        },
        "pages_with_markup": dict(leaks),
        "pages_per_cpu_s": len(rows) / seconds if seconds else float("inf"),
        "rows": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--benchmark", default="wcxb", choices=list(DEFAULT_ROOTS))
    parser.add_argument("--root", type=Path, default=None, help="a checkout of the benchmark's repository")
    parser.add_argument("--wcxb", type=Path, default=None, help="same as --benchmark wcxb --root WCXB")
    parser.add_argument("--split", default="dev", choices=["dev", "test"], help="WCXB's split")
    parser.add_argument("--limit", type=int, default=None, help="the first N pages only")
    parser.add_argument("--extractors", nargs="+", default=None, choices=["step", *EXTRACTORS, *PEERS])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--rows", action="store_true", help="also write every page's scores")
    args = parser.parse_args()
    benchmark = "wcxb" if args.wcxb else args.benchmark
    root = args.wcxb or args.root or DEFAULT_ROOTS[benchmark]
    if benchmark == "wcxb":
        pages, metric, label = load_pages(root, args.split, args.limit), "wcxb", f"WCXB {args.split}"
    else:
        pages, metric, label = load_news424(root, args.limit), "shingles", "news424"
    out = args.out or (RESULTS if benchmark == "wcxb" else RESULTS.with_name(f"extraction_bench_{benchmark}.json"))
    names = args.extractors or ["step", *EXTRACTORS, *available_peers()]
    print(f"{label}: {len(pages)} pages, {Counter(p['page_type'] for p in pages)}")
    report = {"benchmark": label, "metric": metric, "time": time.strftime("%F %T"), "extractors": {}}
    for name in names:
        # "step": the extract step end to end, with its default extractor
        texts, seconds = step_texts(pages) if name == "step" else extract_texts(pages, extractor_fn(name))
        report["extractors"][name] = result = score(pages, texts, seconds, metric)
        o = result["overall"]
        print(f"[{name}] F1 {o['f1']:.4f} ± {o['f1_ci']:.4f}  {result['pages_per_cpu_s']:.1f} pages/cpu-s", flush=True)
    types = [t for t in PAGE_TYPES if any(t in r["by_type"] for r in report["extractors"].values())]
    header = "| extractor | pages/cpu-s | P | R | F1 | " + " | ".join(types) + " | markup leaks |"
    print("\n" + header + "\n|" + "---|" * (header.count("|") - 1))
    for name, r in report["extractors"].items():
        o, by_type = r["overall"], r["by_type"]
        cells = [f"{by_type[t]['f1']:.3f}" if t in by_type else "" for t in types]
        print(
            f"| {name} | {r['pages_per_cpu_s']:.1f} | {o['precision']:.3f} | {o['recall']:.3f} | "
            f"**{o['f1']:.3f}** ± {o['f1_ci']:.3f} | "
            + " | ".join(cells)
            + f" | {sum(r['pages_with_markup'].values())} |"
        )
    if not args.rows:  # per-page rows: 1.4 MB for the WCXB dev split, kept only on request
        for result in report["extractors"].values():
            result.pop("rows")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
