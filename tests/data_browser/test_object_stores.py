"""The browser over gs:// and s3:// roots (fake-gcs-server and moto on loopback), refusals included."""

from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from data_browser.app import create_app
from data_browser.config import BrowserConfig
from marin.execution.status import StepState, append_event
from marin.storage.records import write_records


@pytest.mark.parametrize("store", ["gcs", "s3"])
def test_listing_records_and_states_on_object_stores(request, store):
    prefix = request.getfixturevalue(f"{store}_prefix")
    step = f"{prefix}/documents/raw-0123abcd"
    write_records(f"{step}/docs.jsonl.gz", [{"id": f"d{i}", "text": f"text {i}"} for i in range(150)])
    append_event(step, StepState.RUNNING)
    append_event(step, StepState.SUCCESS)
    client = TestClient(create_app(BrowserConfig(roots=[prefix])))

    listing = client.get(f"/api/list?path={quote(prefix + '/documents', safe='')}").json()
    assert [(e["name"], e["state"]) for e in listing["entries"]] == [("raw-0123abcd", "SUCCESS")]
    page = client.get(f"/api/records?path={quote(step + '/docs.jsonl.gz', safe='')}&offset=100").json()
    assert [r["data"]["id"] for r in page["records"]][:2] == ["d100", "d101"] and not page["more"]
    scheme = prefix.split("://")[0]
    other = f"{scheme}://{prefix.split('://')[1].split('/')[0]}/elsewhere"
    assert client.get(f"/api/list?path={quote(other, safe='')}").status_code == 403
    assert client.get(f"/api/list?path={quote(prefix + '/documents/../..', safe='')}").status_code == 403
