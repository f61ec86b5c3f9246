"""Main-content extraction on real, human-annotated pages: the extract step's extractors scored with the
benchmark's own metric, per page type, with pages/s beside them (issue 25).

    git clone https://github.com/Murrough-Foley/web-content-extraction-benchmark benchmarks/data/wcxb
    .venv/bin/python benchmarks/extraction_bench.py                          # WCXB dev split, every extractor
    .venv/bin/python benchmarks/extraction_bench.py --split test --limit 200
    .venv/bin/python benchmarks/extraction_bench.py --wcxb tests/data/wcxb_slice   # the bundled slice

WCXB (Foley 2026, CC-BY-4.0): 2,008 real pages from 1,613 domains, seven page types (article, forum,
product, collection, listing, documentation, service), each with the human-reviewed main content. Its
metric (``evaluate.py`` there, reimplemented here and checked against it in the tests): word-level
precision, recall and F1 of lowercase ``\\w+`` tokens as bags, averaged over pages; plus the share of the
page's ``with`` snippets found and of its ``without`` (boilerplate) snippets leaked.

Every extractor runs through ``marin.extract.extract_text`` exactly as the extract step calls it, one page
at a time in this process (so pages/s is per core), and its output is also checked for markup the page did
not contain: Markdown escapes (``\\_``, ``\\[``, ``\\*``) and emphasis markers (``**``, ``__``).
Results: ``benchmarks/results/extraction_bench.json``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import statistics
import time
from collections import Counter, defaultdict
from pathlib import Path

from marin.extract.config import ExtractorConfig
from marin.extract.extractors import extract_text

HERE = Path(__file__).resolve().parent
DEFAULT_WCXB = HERE / "data" / "wcxb"
RESULTS = HERE / "results" / "extraction_bench.json"
PAGE_TYPES = ("article", "forum", "product", "collection", "listing", "documentation", "service")

EXTRACTORS = {
    "resiliparse": ExtractorConfig(name="resiliparse"),
    "resiliparse_plain": ExtractorConfig(name="resiliparse", markdown=False),
    "trafilatura": ExtractorConfig(name="trafilatura"),
    "trafilatura_plain": ExtractorConfig(name="trafilatura", markdown=False),
    "trafilatura_fast": ExtractorConfig(name="trafilatura", markdown=False, fast=True),
}
"""Names to the configs the extract step would be given (``resiliparse``: the step's default)."""

MARKUP = {
    "markdown_escapes": re.compile(r"\\[_\[\]*#`>!-]"),
    "emphasis_markers": re.compile(r"\*\*|(?<!\w)__|__(?!\w)"),
}


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
                "html": gzip.decompress(html_file.read_bytes()).decode("utf-8", errors="replace"),
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


def score(pages: list[dict], config: ExtractorConfig) -> dict:
    """Per-page scores of one extractor, their means overall and per page type, markup leaks, pages/s."""
    rows, seconds = [], 0.0
    leaks = Counter()
    for page in pages:
        t0 = time.process_time()
        text = extract_text(page["html"], config)
        seconds += time.process_time() - t0
        p, r, f1 = word_prf(text, page["main"])
        for name, pattern in MARKUP.items():
            if pattern.search(text) and not pattern.search(page["main"]):
                leaks[name] += 1
        rows.append(
            {
                "id": page["id"],
                "page_type": page["page_type"],
                "precision": p,
                "recall": r,
                "f1": f1,
                "with": snippet_rate(text, page["with"]),
                "without": snippet_rate(text, page["without"]) if page["without"] else 0.0,
            }
        )

    def means(subset: list[dict]) -> dict:
        return {k: statistics.fmean(r[k] for r in subset) for k in ("precision", "recall", "f1", "with", "without")}

    by_type = defaultdict(list)
    for row in rows:
        by_type[row["page_type"]].append(row)
    return {
        "pages": len(rows),
        "overall": means(rows),
        "by_type": {t: {"pages": len(by_type[t]), **means(by_type[t])} for t in PAGE_TYPES if by_type[t]},
        "pages_with_markup": dict(leaks),
        "pages_per_cpu_s": len(rows) / seconds if seconds else float("inf"),
        "rows": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wcxb", type=Path, default=DEFAULT_WCXB, help="a checkout of the WCXB repository")
    parser.add_argument("--split", default="dev", choices=["dev", "test"])
    parser.add_argument("--limit", type=int, default=None, help="the first N pages only")
    parser.add_argument("--extractors", nargs="+", default=list(EXTRACTORS), choices=list(EXTRACTORS))
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--rows", action="store_true", help="also write every page's scores")
    args = parser.parse_args()
    pages = load_pages(args.wcxb, args.split, args.limit)
    print(f"WCXB {args.split}: {len(pages)} pages, {Counter(p['page_type'] for p in pages)}")
    report = {"benchmark": "WCXB", "split": args.split, "time": time.strftime("%F %T"), "extractors": {}}
    for name in args.extractors:
        report["extractors"][name] = result = score(pages, EXTRACTORS[name])
        print(f"[{name}] F1 {result['overall']['f1']:.4f}  {result['pages_per_cpu_s']:.1f} pages/cpu-s", flush=True)
    header = "| extractor | pages/cpu-s | P | R | F1 | " + " | ".join(PAGE_TYPES) + " | markup leaks |"
    print("\n" + header + "\n|" + "---|" * (header.count("|") - 1))
    for name, r in report["extractors"].items():
        o, types = r["overall"], r["by_type"]
        cells = [f"{types[t]['f1']:.3f}" if t in types else "" for t in PAGE_TYPES]
        print(
            f"| {name} | {r['pages_per_cpu_s']:.1f} | {o['precision']:.3f} | {o['recall']:.3f} | **{o['f1']:.3f}** | "
            + " | ".join(cells)
            + f" | {sum(r['pages_with_markup'].values())} |"
        )
    if not args.rows:  # per-page rows: 1.4 MB for the dev split, kept only on request
        for result in report["extractors"].values():
            result.pop("rows")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
