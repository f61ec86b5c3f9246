"""The contract a new page family relies on: one data function registered by ``page`` serves its HTML page and
its /api twin, with one serializer and one error table."""

import pytest
from fastapi import APIRouter, Query
from fastapi.testclient import TestClient

from data_browser.access import Forbidden
from data_browser.app import create_app
from data_browser.config import BrowserConfig
from data_browser.readers import ReadFailure, Record
from data_browser.web import ERRORS, State, page

FAILURES = {
    "forbidden": Forbidden("/x: outside the configured roots"),
    "corrupt": ReadFailure("/x: not gzip"),
    "io": IsADirectoryError(21, "Is a directory"),
    "missing": FileNotFoundError("/x/y.jsonl"),
}


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    router = APIRouter()

    @page(router, html="/toy", template="error.html", api="/api/toy")
    def toy_data(state: State, n: int = Query(0, ge=0), fail: str | None = None) -> dict:
        if fail:
            raise FAILURES[fail]
        return {
            "title": f"toy {n}",
            "message": f"roots {state.roots}",
            "score": float("nan"),
            "records": [(Record(n, {"id": "a"}), None)],
        }

    app = create_app(BrowserConfig(roots=[str(tmp_path_factory.mktemp("root"))]))
    app.include_router(router)
    return TestClient(app)


def test_one_data_function_serves_the_page_and_its_api(client):
    html = client.get("/toy?n=3")
    assert html.status_code == 200 and html.headers["content-type"].startswith("text/html")
    assert "<h2>toy 3</h2>" in html.text and "roots [" in html.text and "/static/browser.css" in html.text
    api = client.get("/api/toy?n=3")
    assert api.json() == {
        "title": "toy 3",
        "message": api.json()["message"],
        "score": "NaN",
        "records": [[{"index": 3, "data": {"id": "a"}, "truncated": False, "error": None}, None]],
    }
    assert client.get("/toy?n=-1").status_code == 422 and client.get("/api/toy?n=-1").status_code == 422


@pytest.mark.parametrize(
    "fail, status, title, message",
    [
        ("forbidden", 403, "Forbidden", "/x: outside the configured roots"),
        ("corrupt", 422, "Cannot read this file", "/x: not gzip"),
        ("io", 422, "Cannot read this file", "IsADirectoryError: [Errno 21] Is a directory"),
        ("missing", 404, "Not found", "not found: /x/y.jsonl"),  # an OSError, but the nearer entry wins
    ],
)
def test_one_error_table_answers_html_or_json(client, fail, status, title, message):
    api = client.get(f"/api/toy?fail={fail}")
    assert api.status_code == status and api.json() == {"error": message}
    html = client.get(f"/toy?fail={fail}")
    assert html.status_code == status and f"<h2>{title}</h2>" in html.text and f'id="error">{message}<' in html.text


def test_every_error_kind_is_exercised_and_page_refuses_a_page_without_template():
    assert set(ERRORS) == {Forbidden, ReadFailure, OSError, FileNotFoundError}  # a new kind needs a case above
    with pytest.raises(ValueError, match="an HTML route needs a template"):
        page(APIRouter(), html="/x")
    with pytest.raises(ValueError, match="give html"):
        page(APIRouter())
