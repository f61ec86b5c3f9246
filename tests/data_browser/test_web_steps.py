"""The extract and filter step pages: counts by reason, and one document before and after (raw HTML beside
the extracted text; the filter's scores against its thresholds and the verdict), on steps the executor ran."""

import json
import os

import pytest
from fastapi.testclient import TestClient

from data_browser.app import create_app
from data_browser.config import BrowserConfig
from experiments.defaults import default_classify, default_extract, default_filter, default_train_classifier
from marin.corpus import CorpusConfig, generate_corpus
from marin.execution import Executor, ExecutorStep, this_output_path, versioned
from marin.quality import AttributeRule, FastTextConfig
from marin.storage.records import read_records


@pytest.fixture(scope="module")
def web_lab(tmp_path_factory, ray_address):
    prefix = str(tmp_path_factory.mktemp("web-lab") / "store")
    corpus = ExecutorStep(
        name="corpus/web",
        fn=generate_corpus,
        config=CorpusConfig(
            output_path=this_output_path(),
            train_docs_per_domain=versioned(20),
            validation_docs_per_domain=versioned(5),
            eval_items_per_task=versioned(10),
            contaminated_docs_per_task=versioned(1),
            web_pages_per_domain=versioned(60),
            web_shards_per_domain=versioned(1),
            reference_docs_per_domain=versioned(60),
            langid_docs_per_language=versioned(10),
        ),
    )
    extracted = default_extract("web", corpus / "web")
    model = default_train_classifier(
        "web-quality",
        {"hq": [corpus / "quality/reference"], "web": [corpus / "quality/web_sample"]},
        fasttext=FastTextConfig(epoch=10, dim=8, bucket=5000, word_ngrams=1),
    )
    scores = default_classify("web-quality", extracted / "documents", model, attribute="quality")
    rule = AttributeRule(attribute="quality", label="hq", top_percent=50)
    filtered = default_filter("web", extracted / "documents", [scores], [rule])
    result = Executor(prefix=prefix).run([filtered])
    paths = {p.name.split("/")[0]: p.output_path for p in result.plan.steps}
    client = TestClient(create_app(BrowserConfig(roots=[prefix], records_per_page=50)))
    return {
        "client": client,
        "paths": paths,
        "truth": {
            r["id"]: r for r in read_records(os.path.join(paths["corpus"], "ground_truth", "web_pages.jsonl.gz"))
        },
    }


def test_extract_step_page_counts_and_raw_html_beside_text(web_lab):
    client, path = web_lab["client"], web_lab["paths"]["extracted"]
    summary = json.load(open(os.path.join(path, "summary.json")))  # noqa: SIM115
    listing = client.get("/browse", params={"path": path})
    assert "extract step: counts and documents before/after" in listing.text
    page = client.get("/api/webstep", params={"path": path}).json()
    assert page["kind"] == "extract" and page["summary"]["skipped"] == summary["skipped"] != {}
    html = client.get("/webstep", params={"path": path}).text
    assert f"skipped: binary</th><td>{summary['skipped']['binary']}" in html
    doc_id = page["rows"][0]["id"]
    doc = client.get("/api/webstep/doc", params={"path": path, "id": doc_id}).json()
    truth = web_lab["truth"][doc_id]
    assert doc["kept"] and "<html" in doc["html"] and truth["url"] in doc["row"]["url"]
    assert doc["text"].split("\n")[0].lstrip("# ") in doc["html"]
    skipped_id = page["skipped"][0]["id"]
    skipped = client.get("/webstep/doc", params={"path": path, "id": skipped_id})
    assert skipped.status_code == 200 and f"skipped: {page['skipped'][0]['reason']}" in skipped.text


def test_filter_step_page_shows_scores_thresholds_and_verdicts(web_lab):
    client, path = web_lab["client"], web_lab["paths"]["filtered"]
    page = client.get("/api/webstep", params={"path": path}).json()
    assert page["kind"] == "filter" and page["summary"]["dropped"] and page["summary"]["documents_out"] > 0
    rows = page["rows"]
    kept = next(r for r in rows if r["kept"])
    dropped = next(r for r in rows if not r["kept"])
    for row in (kept, dropped):
        doc = client.get("/api/webstep/doc", params={"path": path, "id": row["id"]}).json()
        (rule,) = doc["rules"]
        cut = page["summary"]["rules"][0]["threshold"]
        assert rule["cut"] == cut and rule["passed"] == row["kept"] == doc["kept"]
        assert (rule["score"] >= cut) == row["kept"] and doc["text"]
    html = client.get("/webstep/doc", params={"path": path, "id": dropped["id"]}).text
    assert "dropped: quality.hq:top50%" in html and "fail" in html
    assert client.get("/webstep", params={"path": web_lab["paths"]["corpus"]}).status_code == 422
