"""Damaged experiment records, step files and results, and metrics logs larger than the browser reads:
each shows a message naming the file (never a 500), and every cut is said on the page."""

import json
from html import unescape
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from data_browser.app import create_app
from data_browser.config import BrowserConfig


def get(client, route, **params):
    return client.get(f"{route}?" + "&".join(f"{k}={quote(str(v), safe='')}" for k, v in params.items()))


def step_entry(out, name="documents/a", identity="documents/a-1", deps=()):
    return {"name": name, "identity": identity, "output_path": str(out), "dependencies": list(deps)}


@pytest.fixture
def root(tmp_path):
    (tmp_path / "root" / "experiments").mkdir(parents=True)
    return tmp_path / "root"


def client_for(root, **kwargs):
    return TestClient(create_app(BrowserConfig(roots=[str(root)], **kwargs)))


@pytest.mark.parametrize(
    "name, content, problem",
    [
        ("not_json.json", '{"steps": [', "not valid JSON"),
        ("binary.json", b"\xff\xfe\x00garbage", "not valid JSON"),
        ("a_list.json", "[]", "expected a JSON object, got list"),
        ("no_steps.json", '{"script": "x"}', "'steps' must be a list"),
        ("bad_step.json", json.dumps({"steps": [{"name": 1}]}), "steps[0] must be an object with string"),
        ("bad_deps.json", json.dumps({"steps": [{**step_entry("/x"), "dependencies": "a"}]}), "steps[0].dependencies"),
        ("bad_commit.json", json.dumps({"git_commit": 5, "steps": []}), "'git_commit' must be a string"),
    ],
)
def test_corrupt_experiment_record_is_an_error_page_naming_the_file(root, name, content, problem):
    path = root / "experiments" / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    client = client_for(root)
    page = get(client, "/experiment", path=path)
    assert page.status_code == 422 and 'id="error"' in page.text
    assert str(path) in page.text and problem in unescape(page.text)
    api = get(client, "/api/experiment", path=path)
    assert api.status_code == 422 and str(path) in api.json()["error"] and problem in api.json()["error"]
    assert client.get("/").status_code == 200 and name in client.get("/").text  # still listed


def test_experiment_record_larger_than_the_limit_is_refused_with_a_message(root):
    path = root / "experiments" / "big.json"
    path.write_text(json.dumps({"steps": [], "description": "x" * 5000}))
    r = get(client_for(root, max_json_bytes=1000), "/experiment", path=path)
    assert r.status_code == 422 and "larger than the browser's limit of 1,000 bytes" in unescape(r.text)


def test_damaged_step_files_mark_only_their_step(root):
    good, bad = root / "documents" / "a-1", root / "documents" / "b-2"
    for d in (good, bad):
        d.mkdir(parents=True)
    (good / ".executor_status").write_text(json.dumps({"state": "SUCCESS", "time": 5.0}) + "\n")
    (good / ".executor_info").write_text(json.dumps({"config": {"n": 3}}))
    (bad / ".executor_status").write_text(json.dumps({"state": "RUNNING"}) + "\n")  # no "time"
    (bad / ".executor_info").write_text("{not json")
    (bad / "tracker.json").write_text(json.dumps({"wandb_url": "javascript:alert(1)"}))
    record = root / "experiments" / "exp-1.json"
    record.write_text(
        json.dumps(
            {
                "script": "exp",
                "steps": [step_entry(good), step_entry(bad, "documents/b", "documents/b-2", ["documents/a-1"])],
            }
        )
    )
    client = client_for(root)
    steps = get(client, "/api/experiment", path=record).json()["steps"]
    assert [s["state"] for s in steps] == ["SUCCESS", "UNREADABLE"] and steps[0]["config"] == {"n": 3}
    assert ".executor_status" in steps[1]["message"] and "unreadable .executor_info" in steps[1]["config"]
    html = get(client, "/experiment", path=record).text
    assert "UNREADABLE" in html and "javascript:" not in html  # a tracker link must be http(s)
    assert get(client, "/api/list", path=root / "documents").json()["entries"][1]["state"] == "UNREADABLE"


def test_steps_outside_the_roots_are_not_read(root, tmp_path):
    outside = tmp_path / "elsewhere" / "documents" / "c-3"
    outside.mkdir(parents=True)
    (outside / ".executor_status").write_text(json.dumps({"state": "SUCCESS", "time": 1.0}) + "\n")
    (outside / ".executor_info").write_text(json.dumps({"config": {"token": "SECRET-CONFIG"}}))
    (outside / "tracker.json").write_text(json.dumps({"wandb_url": "https://wandb.ai/secret"}))
    record = root / "experiments" / "exp-2.json"
    record.write_text(json.dumps({"steps": [step_entry(outside), step_entry("gs://other-bucket/x", "b", "b-1")]}))
    client = client_for(root)
    steps = get(client, "/api/experiment", path=record).json()["steps"]
    assert [(s["state"], s["config"], s["browsable"]) for s in steps] == [(None, None, False)] * 2
    html = get(client, "/experiment", path=record).text
    assert "SECRET-CONFIG" not in html and "wandb.ai/secret" not in html and "/training?path=" not in html


def test_damaged_or_oversized_results_are_a_message_on_the_training_page(root):
    step = root / "evals" / "e-1"
    step.mkdir(parents=True)
    (step / "results.json").write_text('{"tasks": ')
    client = client_for(root, max_json_bytes=1000)
    r = get(client, "/training", path=step)
    assert r.status_code == 200 and 'id="results-error"' in r.text and f"{step}/results.json: not valid JSON" in r.text
    (step / "results.json").write_text(json.dumps({"tasks": {"t": {"acc": 0.5, "pad": "x" * 2000}}}))
    r = get(client, "/api/metrics", path=step).json()
    assert r["results"] is None and "larger than the browser's limit" in r["results_error"]
    (step / "results.json").write_text("[1, 2]")  # not the eval step's shape: shown as written
    assert '<pre id="results-raw">' in get(client, "/training", path=step).text


def test_metrics_larger_than_the_limit_are_sampled_and_thinned_and_the_page_says_so(root):
    step = root / "checkpoints" / "big-1"
    step.mkdir(parents=True)
    with open(step / "metrics.jsonl", "w") as f:
        for s in range(1, 5001):
            f.write(json.dumps({"step": s, "train/loss": 10 / s, "lr": 0.001}) + "\n")  # ~50 bytes a line
            if s % 500 == 0:
                f.write(json.dumps({"step": s, "eval/bpb": 1 + 1 / s}) + "\n")
        f.write('{"step": "last", "loss": 1}\n[1, 2]\nnot json\n')  # a non-numeric step, not an object, not JSON
    size = (step / "metrics.jsonl").stat().st_size
    sampled = get(client_for(root, max_metrics_bytes=20_000), "/api/metrics", path=step).json()
    steps = sampled["metrics"]["step"]
    assert len(steps) < 20_000 / 45 and steps[0] == 1 and steps[-1] >= 4990  # the whole run, coarsely
    assert steps == sorted(steps) and all(isinstance(v, float) for v in sampled["metrics"]["train/loss"] if v)
    assert (
        f"is {size / 1e6:.1f} MB" in sampled["metrics_notes"][0]
        and "evenly spaced slices" in sampled["metrics_notes"][0]
    )

    thin = client_for(root, max_metric_points=100)
    data = get(thin, "/api/metrics", path=step).json()
    loss = [v for v in data["metrics"]["train/loss"] if v is not None]
    assert 90 <= len(loss) <= 101 and data["metrics"]["step"][0] == 1
    assert len([v for v in data["metrics"]["eval/bpb"] if v is not None]) == 10  # sparse metrics keep every point
    assert data["metrics_notes"] == [
        "3 line(s) without a JSON object holding a numeric step were skipped.",
        "Metrics with more than 100 points are thinned to about that many (max_metric_points): lr, train/loss.",
    ]
    html = get(thin, "/training", path=step).text
    assert 'class="warn note">3 line(s)' in html and "thinned to about that many" in html


def test_metrics_symlinked_outside_the_root_are_refused(root, tmp_path):
    step = root / "checkpoints" / "linked-1"
    step.mkdir(parents=True)
    (tmp_path / "private.jsonl").write_text(json.dumps({"step": 1, "secret_metric": 1.0}) + "\n")
    (step / "metrics.jsonl").symlink_to(tmp_path / "private.jsonl")
    r = get(client_for(root), "/api/metrics", path=step)
    assert r.status_code == 403 and "secret_metric" not in r.text


def test_directories_named_like_the_files_a_page_reads_are_messages(root):
    (root / "experiments" / "dir.json").mkdir()
    step = root / "checkpoints" / "odd-1"
    (step / "metrics.jsonl").mkdir(parents=True)
    (step / "results.json").mkdir()
    client = client_for(root)
    r = get(client, "/experiment", path=root / "experiments" / "dir.json")
    assert r.status_code == 422 and "dir.json: a directory, not a JSON file" in r.text
    data = get(client, "/api/metrics", path=step).json()
    assert "metrics.jsonl: cannot be read (IsADirectoryError" in data["metrics_notes"][0]
    assert "results.json: a directory" in data["results_error"]
