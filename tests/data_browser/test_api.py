"""Every view of the browser, and every refusal, through the HTTP API."""

from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from data_browser.app import create_app
from data_browser.config import BrowserConfig


@pytest.fixture(scope="module")
def client(lab):
    return TestClient(
        create_app(
            BrowserConfig(
                roots=[lab["prefix"]],
                records_per_page=100,
                max_line_bytes=100_000,
                github_repo_url="https://github.com/lab/marin",
            )
        )
    )


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


@pytest.mark.parametrize(
    "name, total", [("docs.jsonl", 250), ("docs.jsonl.gz", 30), ("docs.jsonl.zst", 30), ("docs.parquet", 130)]
)
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
    assert "record number 1 " in html and "aligned by id" in html
    data = get(client, "/api/compare", left=f"{lab['raw']}/docs.jsonl", right=f"{lab['raw']}/deduped.jsonl").json()
    assert data["align"] == "id" and data["more"] and not data["scan_cut"]  # both files have ids: the default
    assert all(r is None or r["data"]["id"] == lrec["data"]["id"] for lrec, r in data["pairs"])
    assert [r["index"] for lrec, r in data["pairs"][1:3]] == [0, 1]  # doc-1, doc-2 lead the deduped file


def test_side_by_side_aligns_by_index(client, lab):
    left, right = f"{lab['raw']}/docs.jsonl", f"{lab['raw']}/deduped.jsonl"
    data = get(client, "/api/compare", left=left, right=right, align="index", offset=100).json()
    assert data["align"] == "index"
    assert [(lrec["index"], r["index"]) for lrec, r in data["pairs"][:2]] == [(100, 100), (101, 101)]
    assert [r["data"]["id"] for lrec, r in data["pairs"][:2]] == ["doc-151", "doc-152"]  # record #100 of deduped
    html = get(client, "/compare", left=left, right=right, align="index").text
    assert "aligned by record index" in html and "align=id" in html and "align=index" in html  # toggle, next
    no_ids = get(client, "/api/compare", left=left, right=f"{lab['raw']}/texts.jsonl").json()
    assert no_ids["align"] == "index" and no_ids["more"]  # the right file has no ids: index is the default
    assert [r["data"]["text"] for _, r in no_ids["pairs"][:5]] == [f"no id {i}" for i in range(5)]
    assert all(r is None for _, r in no_ids["pairs"][5:]) and len(no_ids["pairs"]) == 100
    assert get(client, "/compare", left=left, right=right, align="bogus").status_code == 422


def test_side_by_side_says_when_the_id_scan_stopped(lab):
    bounded = TestClient(create_app(BrowserConfig(roots=[lab["prefix"]], max_search_records=50)))
    html = get(
        bounded, "/compare", left=f"{lab['raw']}/docs.jsonl", right=f"{lab['raw']}/deduped.jsonl", offset=100
    ).text
    assert "not in the first 50 records of the right file" in html and "not in right file" not in html


def test_records_page_links_to_side_by_side(client, lab):
    html = get(client, "/records", path=f"{lab['raw']}/docs.jsonl", offset=100).text
    link = (
        f'href="/compare?left={quote(lab["raw"] + "/docs.jsonl", safe="")}'
        f'&right={quote(lab["raw"] + "/deduped.jsonl", safe="")}&offset=100"'
    )
    assert link in html and 'class="compare-with"' in html and 'id="compare-right"' in html
    assert quote(lab["raw"] + "/corrupt.parquet", safe="") in html  # every record file is offered
    assert quote(lab["raw"] + "/result.json", safe="") not in html  # .json metadata in a step is not data


def test_experiment_page_has_dag_states_configs_and_links(client, lab):
    data = get(client, "/api/experiment", path=lab["record"]).json()
    assert [s["state"] for s in data["steps"]] == ["SUCCESS", "SUCCESS"]
    assert all(s["duration"] is not None and s["duration"] >= 0 for s in data["steps"])
    assert data["steps"][1]["config"]["inputs"][0].startswith(lab["raw"])
    html = get(client, "/experiment", path=lab["record"]).text
    assert html.count('class="node" data-state="SUCCESS"') == 2 and "<svg" in html
    assert "https://wandb.ai/lab/tiny/runs/abc" in html
    assert data["record"]["git_commit"] is None and 'id="github"' not in html  # run outside any git checkout


def test_experiment_file_links_to_github_at_its_commit(tmp_path, ray_address):
    """A real checkout: the executor records commit, remote and repo-relative file; the page links there."""
    import subprocess

    from marin.execution import Executor, ExecutorStep, this_output_path
    from tests.execution.steps_lib import TraceConfig, trace_step

    repo = tmp_path / "repo"
    (repo / "experiments").mkdir(parents=True)
    script = repo / "experiments" / "exp_linked.py"
    script.write_text("# an experiment file\n")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    for args in (
        ["init", "-q"],
        ["add", "experiments/exp_linked.py"],
        ["commit", "-q", "-m", "exp"],
        ["remote", "add", "origin", "https://github.com/org/repo.git"],
    ):
        subprocess.run(git + args, check=True, capture_output=True)
    commit = subprocess.run(git + ["rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    step = ExecutorStep(
        name="documents/linked",
        fn=trace_step,
        config=TraceConfig(calls_dir=str(tmp_path / "calls"), label="linked", output_path=this_output_path()),
    )
    Executor(prefix=str(tmp_path / "store"), caller_file=str(script)).run([step])
    [record] = (tmp_path / "store" / "experiments").glob("exp_linked-*.json")

    client = TestClient(create_app(BrowserConfig(roots=[str(tmp_path / "store")])))  # no github_repo_url
    html = get(client, "/experiment", path=record).text
    link = f"https://github.com/org/repo/blob/{commit}/experiments/exp_linked.py"
    assert f'<a id="github" href="{link}">experiments/exp_linked.py at {commit[:10]}</a>' in html.replace("<wbr>", "")
    assert "uncommitted changes" not in html
    configured = TestClient(
        create_app(BrowserConfig(roots=[str(tmp_path / "store")], github_repo_url="https://github.com/lab/marin"))
    )
    assert (
        f"https://github.com/lab/marin/blob/{commit}/experiments/exp_linked.py"
        in get(configured, "/experiment", path=record).text
    )


@pytest.mark.parametrize(
    "remote",
    [
        "https://github.com/org/repo.git",
        "git@github.com:org/repo.git",
        "ssh://git@github.com/org/repo.git",
        "https://github.com/org/repo",
    ],
)
def test_every_github_remote_form_links_to_the_same_page(remote):
    from data_browser.experiments import github_url

    record = {"git_remote": remote, "git_commit": "abc123", "caller_file": "experiments/e.py"}
    assert github_url(record, None) == "https://github.com/org/repo/blob/abc123/experiments/e.py"
    assert github_url({**record, "git_remote": "/local/bare.git"}, None) is None  # no web page to link


def test_training_page_has_metrics_and_results(client, lab):
    data = get(client, "/api/metrics", path=lab["train"]).json()
    assert data["metrics"]["step"][:3] == [1, 2, 3] and data["metrics"]["loss"][1] == 2.5
    assert data["metrics"]["eval/stories/bpb"][20] == 1.7
    assert data["results"]["tasks"]["arith_mc"]["acc"]["value"] == 0.81
    assert data["metrics"]["step"][-1] == 21 and data["metrics"]["loss"][-1] is None  # NaN: a gap, not a 500
    assert "grad_norm" not in data["metrics"]  # no finite value at all
    assert data["metrics_notes"] == []  # nothing skipped or cut
    rows = {(r["name"], r["metric"]): r for r in data["results_table"]}
    assert rows["arith_mc", "acc"]["value"] == 0.81 and rows["arith_mc", "acc"]["ci95"] == [0.7222, 0.8749]
    assert rows["stories", "bits_per_byte"]["section"] == "validation" and ("model", "num_layers") not in rows
    html = get(client, "/training", path=lab["train"]).text
    assert "uPlot.iife.min.js" in html and 'id="metrics"' in html and "NaN" not in html
    assert client.get("/static/vendor/uPlot.iife.min.js").status_code == 200
    assert 'class="warn note"' not in html


def test_eval_results_are_a_table(client, lab):
    import re

    html = get(client, "/training", path=lab["train"]).text
    table = html[html.index('<table id="results">') : html.index("</table>", html.index('<table id="results">'))]
    cells = lambda name, metric: re.findall(
        r"<td[^>]*>(.*?)</td>",
        table.split(  # noqa: E731
            f'data-name="{name}" data-metric="{metric}">'
        )[1].split("</tr>")[0],
        re.S,
    )
    assert cells("arith_mc", "acc")[-4:] == ["acc", "0.8100", "0.0394", "[0.7222, 0.8749]"]
    assert cells("arith_mc", "items")[-4:-2] == ["items", "100"]
    assert cells("stories", "bits_per_byte")[-4:-2] == ["bits_per_byte", "0.8115"]
    assert "<b>stories</b><br><small>validation</small>" in table and table.count("<b>arith_mc</b>") == 1
    info = html.split('id="results-info">')[1].split("</p>")[0]
    assert "checkpoint_step: <code>200</code>" in info and "tokenizer: <code>/lab/tokenizer.json</code>" in info
    assert "<summary>model</summary>" in html and "<summary>config</summary>" in html  # configs, collapsed
    task_config = cells("arith_mc", "config")[-3]
    assert task_config.startswith("<details><summary>4 fields</summary>") and "fewshot_seed" in task_config


def test_nan_and_infinity_in_records_are_served_as_strings(client, lab):
    r = get(client, "/api/records", path=f"{lab['raw']}/special_floats.jsonl")
    assert r.status_code == 200 and [rec["data"]["score"] for rec in r.json()["records"]] == ["NaN", "-Infinity"]


REFUSED = [
    "{prefix}/../secret.txt",
    "{prefix}/documents/../../secret.txt",
    "{prefix}/documents/../documents",  # '..' is refused even where it would stay inside the root
    "{prefix}/%2e%2e/secret.txt",
    "{prefix}/documents/%252e%252e/%252E%252E/secret.txt",
    "{prefix}%2F..%2F..%2Fsecret.txt",
    "{prefix}%252F..%252F..%252Fsecret.txt",
    "{secret}",
    "/etc/passwd",
    "{prefix}/link_outside",
    "file://{secret}",
    "gs://other-bucket/prefix",
    "s3://bucket/prefix",
    "http://127.0.0.1:1/secret",
    "relative/path",
]
ENDPOINTS = [
    ("/browse", "path"),
    ("/api/list", "path"),
    ("/records", "path"),
    ("/api/records", "path"),
    ("/compare", "left"),
    ("/compare", "right"),
    ("/api/compare", "left"),
    ("/api/compare", "right"),
    ("/experiment", "path"),
    ("/api/experiment", "path"),
    ("/training", "path"),
    ("/api/metrics", "path"),
]


@pytest.mark.parametrize("route, param", ENDPOINTS)
def test_paths_outside_roots_are_refused(client, lab, route, param):
    ok = {"left": f"{lab['raw']}/docs.jsonl", "right": f"{lab['raw']}/deduped.jsonl"}
    for bad in REFUSED:
        path = bad.format(prefix=lab["prefix"], secret=lab["secret"])
        query = "&".join(
            f"{k}={quote(path, safe='%') if k == param else quote(v, safe='')}"
            for k, v in ({param: path} if param == "path" else ok).items()
        )
        r = client.get(f"{route}?{query}", follow_redirects=False)
        assert r.status_code == 403, (route, param, path, r.status_code)
        assert "outside the root" not in r.text  # never the secret's content
        if route.startswith("/api/"):
            assert "error" in r.json()
        else:
            assert 'id="error"' in r.text


def test_dot_dot_inside_the_root_is_refused_though_the_plain_path_is_served(client, lab):
    assert get(client, "/api/list", path=f"{lab['prefix']}/documents").status_code == 200
    r = get(client, "/api/list", path=f"{lab['prefix']}/documents/../documents")
    assert r.status_code == 403 and "'..' is not allowed" in r.json()["error"]


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
