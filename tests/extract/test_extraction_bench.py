"""``benchmarks/extraction_bench.py`` on the bundled WCXB slice (21 real pages, 7 page types): it scores
exactly as the benchmark's own ``evaluate.py`` does, per page type, with pages/s and markup leaks."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SLICE = ROOT / "tests" / "data" / "wcxb_slice"
sys.path.insert(0, str(ROOT / "benchmarks"))

import extraction_bench  # noqa: E402

from marin.extract import ExtractorConfig, extract_text  # noqa: E402


def wcxb_evaluate():
    spec = importlib.util.spec_from_file_location("wcxb_evaluate", SLICE / "evaluate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_slice_has_every_page_type_with_its_ground_truth():
    pages = extraction_bench.load_pages(SLICE, "dev")
    assert len(pages) == 21
    assert {p["page_type"] for p in pages} == set(extraction_bench.PAGE_TYPES)
    assert all(p["html"].lstrip().startswith("<") and len(extraction_bench.words(p["main"])) > 20 for p in pages)


def test_scores_equal_the_benchmarks_own_metric():
    evaluate = wcxb_evaluate()
    pages = extraction_bench.load_pages(SLICE, "dev")
    predictions, seconds = extraction_bench.extract_texts(pages, extraction_bench.extractor_fn("resiliparse"))
    result = extraction_bench.score(pages, predictions, seconds)
    gt = {
        p["id"]: {
            "main_content": p["main"],
            "with": p["with"],
            "without": p["without"],
            "title": "",
            "page_type": p["page_type"],
        }
        for p in pages
    }
    theirs = {r["file_id"]: r for r in evaluate.evaluate_results(gt, predictions)}
    for row in result["rows"]:
        for key in ("precision", "recall", "f1"):
            assert row[key] == theirs[row["id"]][key], (row["id"], key)
    assert 0.3 < result["overall"]["f1"] < 1.0  # real pages: neither nothing nor everything


def test_bench_command_reports_every_extractor_per_page_type(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [
            sys.executable,
            "benchmarks/extraction_bench.py",
            "--wcxb",
            str(SLICE),
            "--out",
            str(out),
            "--extractors",
            "step",
            "resiliparse",
            "trafilatura",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    for name in ("step", "resiliparse", "trafilatura"):
        r = report["extractors"][name]
        assert r["pages"] == 21 and set(r["by_type"]) == set(extraction_bench.PAGE_TYPES)
        assert r["pages_per_cpu_s"] > 0 and 0 < r["overall"]["f1"] < 1
    assert "| trafilatura |" in proc.stdout


def test_the_default_extractor_is_within_3_percent_of_the_best_library_on_real_pages():
    """Issue 25's bar, on the bundled slice of real pages: the extract step with its defaults, end to end,
    scores at least 0.97x the F1 of the best extractor installed here (every step option and every peer
    library found)."""
    pages = extraction_bench.load_pages(SLICE, "dev")

    def f1_of(texts, seconds):
        return extraction_bench.score(pages, texts, seconds)["overall"]["f1"]

    default = f1_of(*extraction_bench.step_texts(pages))
    names = [*extraction_bench.EXTRACTORS, *extraction_bench.available_peers()]
    f1 = {name: f1_of(*extraction_bench.extract_texts(pages, extraction_bench.extractor_fn(name))) for name in names}
    best = max(f1, key=f1.get)
    assert default >= 0.97 * f1[best], (default, f1)
    # The bar separates: resiliparse, the old default, is below it on these pages (0.818 vs 0.868).
    assert f1["resiliparse"] < 0.97 * f1[best], f1


def test_the_default_writes_no_markup_the_page_did_not_contain():
    """Plain text: no Markdown escapes, emphasis markers, heading marks, bullets, table rules or fences in any
    extracted document of the slice unless the page itself has them (trafilatura's own Markdown has them)."""
    pages = extraction_bench.load_pages(SLICE, "dev")
    for page in pages:
        text = extract_text(page["html"], ExtractorConfig())
        assert text and not extraction_bench.added_markup(text, page), (page["id"], text[:300])
    markdown = ExtractorConfig(name="trafilatura", markdown=True)
    assert sum(bool(extraction_bench.added_markup(extract_text(p["html"], markdown), p)) for p in pages) >= 5
