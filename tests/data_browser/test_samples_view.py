"""Samples in the browser: a run's ``/training`` page shows the text its samples steps drew from it, and a
samples step's own page shows its records; other runs' samples stay off the page, a damaged file says so."""

import json
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from data_browser.app import create_app
from data_browser.config import BrowserConfig

RECORDS = [
    {"prompt": "ROMEO:", "text": "\nO <b>only</b> you lord", "seed": 0, "tokens": 20, "finish_reason": "length"},
    {"prompt": "\n", "text": "KING RICHARD II:\nMy lord", "seed": 1, "tokens": 24, "finish_reason": "length"},
]


def samples_step(root, name, run, records):
    step = root / "samples" / name
    step.mkdir(parents=True)
    (step / ".executor_info").write_text(json.dumps({"name": "samples/x", "dependencies": [str(run), "tok"]}))
    (step / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return step


@pytest.fixture
def lab(tmp_path):
    run, other = tmp_path / "checkpoints" / "run-1a2b", tmp_path / "checkpoints" / "other-3c4d"
    for r in (run, other):
        r.mkdir(parents=True)
        (r / "metrics.jsonl").write_text(json.dumps({"step": 1, "train/loss": 4.2}) + "\n")
    mine = samples_step(tmp_path, "run-9f9f", run, RECORDS)
    samples_step(tmp_path, "other-8e8e", other, [{**RECORDS[0], "text": "not this run's"}])
    return tmp_path, run, mine, TestClient(create_app(BrowserConfig(roots=[str(tmp_path)])))


def get(client, route, **params):
    return client.get(f"{route}?" + "&".join(f"{k}={quote(str(v), safe='')}" for k, v in params.items()))


def test_a_runs_page_shows_the_samples_drawn_from_it_and_only_those(lab):
    root, run, mine, client = lab
    data = get(client, "/api/metrics", path=run).json()
    assert [s["step"] for s in data["samples"]] == [str(mine)]
    assert data["samples"][0]["records"] == RECORDS
    page = get(client, "/training", path=run).text
    assert "&lt;b&gt;only&lt;/b&gt;" in page and "<b>only</b>" not in page  # sampled text is text, never markup
    assert "not this run" not in page and "seed 1 · 24 tokens · length" in page


def test_a_samples_steps_own_page_and_a_damaged_file(lab):
    root, run, mine, client = lab
    assert [s["step"] for s in get(client, "/api/metrics", path=mine).json()["samples"]] == [str(mine)]
    assert 'id="training-link" href="/training?path=' in get(client, "/browse", path=mine).text
    assert ">samples</a>" in get(client, "/browse", path=mine).text  # the listing names the view it links
    (mine / "samples.jsonl").write_bytes(b'{"prompt": "a", "text": "b"}\n\x1f\x8b broken\n')
    shown = get(client, "/api/metrics", path=run).json()["samples"][0]
    assert [r["text"] for r in shown["records"]] == ["b"]
    assert shown["error"].endswith("samples.jsonl: line 2: not valid JSON: Expecting value: line 1 column 1 (char 0)")
    assert "line 2: not valid JSON" in get(client, "/training", path=run).text
