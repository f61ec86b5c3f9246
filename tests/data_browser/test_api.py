"""Every view of the browser, and every refusal, through the HTTP API."""

from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from data_browser.app import create_app
from data_browser.config import BrowserConfig


@pytest.fixture(scope="module")
def client(lab):
    return TestClient(create_app(BrowserConfig(roots=[lab["prefix"]], records_per_page=100, max_line_bytes=100_000,
                                               github_repo_url="https://github.com/lab/marin")))


def get(client, route, **params):
    query = "&".join(f"{k}={quote(str(v), safe='')}" for k, v in params.items())
    return client.get(f"{route}?{query}" if query else route, follow_redirects=False)


def test_index_lists_roots_and_experiments(client, lab):
    r = client.get("/")
    assert r.status_code == 200 and lab["prefix"] in r.text and "exp_browser-" in r.text


def test_directory_listing_shows_step_states(client, lab):
    r = get(client, "/api/list", path=lab["prefix"] + "/documents")
    [entry] = r.json()["entries"]
    assert entry["name"].startswith("raw-") and entry["state"] == "SUCCESS"
    html = get(client, "/browse", path=lab["raw"]).text
    assert "SUCCESS" in html and "docs.jsonl.gz" in html


@pytest.mark.parametrize("name, total", [("docs.jsonl", 250), ("docs.jsonl.gz", 30), ("docs.jsonl.zst", 30),
                                         ("docs.parquet", 130)])
def test_record_pages_for_every_format(client, lab, name, total):
    path = f"{lab['raw']}/{name}"
    first = get(client, "/api/records", path=path).json()
    assert [r["index"] for r in first["records"]] == list(range(min(100, total)))
    assert first["records"][0]["data"]["id"] == "doc-0" and first["more"] == (total > 100)
    if total > 100:
        second = get(client, "/api/records", path=path, offset=100).json()
        assert second["records"][0]["data"]["id"] == "doc-100"
    jump = get(client, "/api/records", path=path, offset=total - 1).json()
    assert [r["data"]["id"] for r in jump["records"]] == [f"doc-{total - 1}"] and not jump["more"]


def test_record_file_redirects_to_viewer_with_permalinks(client, lab):
    r = get(client, "/browse", path=f"{lab['raw']}/docs.jsonl")
    assert r.status_code == 302 and r.headers["location"].startswith("/records?path=")
    html = get(client, "/records", path=f"{lab['raw']}/docs.jsonl", offset=100).text
    assert 'id="rec-100"' in html and "#rec-100" in html and 'id="next"' in html and 'id="prev"' in html


def test_search_is_streaming_and_bounded(client, lab):
    data = get(client, "/api/records", path=f"{lab['raw']}/docs.jsonl", q="record number 17 ").json()
    assert [r["data"]["id"] for r in data["records"]] == ["doc-17"] and data["scanned"] == 250
    bounded = TestClient(create_app(BrowserConfig(roots=[lab["prefix"]], max_search_records=50)))
    data = get(bounded, "/api/records", path=f"{lab['raw']}/docs.jsonl", q="record number 170").json()
    assert data["records"] == [] and data["scanned"] == 50 and data["stopped_early"]


def test_long_text_is_collapsed_and_huge_lines_are_cut(client, lab):
    html = get(client, "/records", path=f"{lab['raw']}/docs.jsonl", offset=6).text
    assert "show all" not in html  # short records render inline
    long_client = TestClient(create_app(BrowserConfig(roots=[lab["prefix"]], collapse_chars=40)))
    html = get(long_client, "/records", path=f"{lab['raw']}/docs.jsonl", offset=6).text
    assert "show all" in html
    data = get(client, "/api/records", path=f"{lab['raw']}/huge_line.jsonl").json()
    big, small = data["records"]
    assert big["truncated"] and len(big["data"]) == 100_000 and "cut" in big["error"]
    assert small["data"] == {"id": "small", "text": "after the big one"}


def test_side_by_side_aligns_by_id(client, lab):
    html = get(client, "/compare", left=f"{lab['raw']}/docs.jsonl", right=f"{lab['raw']}/deduped.jsonl").text
    assert html.count("not in right file") == 34  # ids 0, 3, ..., 99 were removed
    assert "record number 1 " in html


def test_experiment_page_has_dag_states_configs_and_links(client, lab):
    data = get(client, "/api/experiment", path=lab["record"]).json()
    assert [s["state"] for s in data["steps"]] == ["SUCCESS", "SUCCESS"]
    assert all(s["duration"] is not None and s["duration"] >= 0 for s in data["steps"])
    assert data["steps"][1]["config"]["inputs"][0].startswith(lab["raw"])
    html = get(client, "/experiment", path=lab["record"]).text
    assert html.count('class="node" data-state="SUCCESS"') == 2 and "<svg" in html
    assert "https://wandb.ai/lab/tiny/runs/abc" in html
    commit = data["record"]["git_commit"]
    if commit:  # the test checkout is a git repo with a commit
        assert f"https://github.com/lab/marin/blob/{commit}/" in html


def test_training_page_has_metrics_and_results(client, lab):
    data = get(client, "/api/metrics", path=lab["train"]).json()
    assert data["metrics"]["step"][:3] == [1, 2, 3] and data["metrics"]["loss"][1] == 2.5
    assert data["metrics"]["eval/stories/bpb"][-1] == 1.7 and data["results"]["tasks"]["arith_mc"]["acc"] == 0.81
    html = get(client, "/training", path=lab["train"]).text
    assert "uPlot.iife.min.js" in html and 'id="metrics"' in html and "arith_mc" in html
    assert client.get("/static/vendor/uPlot.iife.min.js").status_code == 200


@pytest.mark.parametrize("bad", [
    "{prefix}/../secret.txt",
    "{prefix}/documents/../../secret.txt",
    "{secret}",
    "/etc/passwd",
    "{prefix}/link_outside",
    "{prefix}%2F..%2F..%2Fsecret.txt",
    "{prefix}%252F..%252F..%252Fsecret.txt",
    "file://{secret}",
    "gs://other-bucket/prefix",
    "relative/path",
])
def test_paths_outside_roots_are_refused(client, lab, bad):
    path = bad.format(prefix=lab["prefix"], secret=lab["secret"])
    for route in ("/browse", "/api/list", "/api/records", "/api/metrics"):
        r = client.get(f"{route}?path={quote(path, safe='%')}")
        assert r.status_code == 403, (route, path, r.status_code)
        assert "outside the root" not in r.text  # never the secret's content


def test_only_gs_root_refuses_local_files(lab):
    only_gs = TestClient(create_app(BrowserConfig(roots=["gs://bucket/lab"])))
    assert get(only_gs, "/browse", path=f"file://{lab['raw']}").status_code == 403
    assert get(only_gs, "/browse", path=lab["raw"]).status_code == 403


def test_corrupt_files_show_an_error_not_a_500(client, lab):
    for name in ("corrupt.jsonl.gz", "corrupt.parquet"):
        r = get(client, "/records", path=f"{lab['raw']}/{name}")
        assert r.status_code == 422 and "cannot be read" in r.text and name in r.text
    assert get(client, "/browse", path=f"{lab['raw']}/missing.txt").status_code == 404


def test_no_write_endpoints(client, lab):
    for method in ("post", "put", "delete", "patch"):
        r = getattr(client, method)(f"/browse?path={quote(lab['raw'], safe='')}")
        assert r.status_code == 405
