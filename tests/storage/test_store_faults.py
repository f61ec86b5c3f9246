"""Object-store backends under network faults and against a store that ignores preconditions.

A loopback proxy (``FaultyProxy``) sits between marin and the real GCS/S3 server: it can throw away the
response to a write the server has applied, or strip the precondition from every request.
"""

from __future__ import annotations

import uuid

import pytest

from marin.storage import (
    backend_name,
    check_prefix,
    conditional,
    create_only,
    object_stores,
    preflight,
    read_versioned,
    replace_if_version,
)
from tests.object_store_servers import GCS_BUCKET, S3_BUCKET, FaultyProxy

BUCKETS = {"gcs": ("gs", GCS_BUCKET), "s3": ("s3", S3_BUCKET)}


@pytest.fixture
def bind(monkeypatch, object_stores):
    """Point marin's conditional gs:// or s3:// backend (and the preflight) at another endpoint for one
    test; the fsspec filesystems are left alone."""

    def bind(store: str, endpoint: str):
        if store == "gcs":
            if object_stores.gcs_url is None:
                pytest.skip(object_stores.gcs_missing)
            monkeypatch.setenv("STORAGE_EMULATOR_HOST", endpoint)
            monkeypatch.setattr(object_stores_module(), "GCS", object_stores_module().GcsBackend())
        else:
            if object_stores.s3_url is None:
                pytest.skip(object_stores.s3_missing)
            backend = object_stores_module().S3Backend(
                {"endpoint_url": endpoint, "key": "testing", "secret": "testing"}
            )
            monkeypatch.setattr(object_stores_module(), "S3", backend)
        monkeypatch.setattr(conditional, "_UNCONDITIONAL", {})
        monkeypatch.setattr(preflight, "_checked", set())

    return bind


def object_stores_module():
    return object_stores


def server_url(servers, store):
    return servers.gcs_url if store == "gcs" else servers.s3_url


@pytest.mark.parametrize("store", ["gcs", "s3"])
def test_lost_response_to_an_applied_write_is_recognized_by_reading_back(store, bind, object_stores):
    proxy = FaultyProxy(server_url(object_stores, store))
    bind(store, proxy.url)
    scheme, bucket = BUCKETS[store]
    url = f"{scheme}://{bucket}/faults-{uuid.uuid4().hex[:8]}/lease"

    proxy.drop_write_responses = 1
    mine = create_only(url, b"owner mine 1")
    assert proxy.dropped == 1  # the write landed, its answer did not: the retry saw our own object
    assert mine is not None and read_versioned(url) == mine

    proxy.drop_write_responses = 1
    again = replace_if_version(url, b"owner mine 2", mine.version)
    assert proxy.dropped == 2
    assert again is not None and read_versioned(url) == again

    other = url + "-raced"
    assert create_only(other, b"owner theirs") is not None
    proxy.drop_write_responses = 1
    assert create_only(other, b"owner mine") is None  # a real loss stays a loss after a lost response
    assert proxy.dropped == 3
    assert read_versioned(other).data == b"owner theirs"
    proxy.close()


@pytest.mark.parametrize("store", ["gcs", "s3"])
def test_store_that_ignores_preconditions_is_detected_and_falls_back_with_a_warning(store, bind, object_stores, caplog):
    proxy = FaultyProxy(server_url(object_stores, store))
    proxy.strip_preconditions = True
    bind(store, proxy.url)
    scheme, bucket = BUCKETS[store]
    prefix = f"{scheme}://{bucket}/ignoring-{uuid.uuid4().hex[:8]}"

    backend = object_stores_module().GCS if store == "gcs" else object_stores_module().S3
    assert backend.create_only(f"{prefix}/x", b"1") is not None
    assert backend.create_only(f"{prefix}/x", b"2") is not None  # what the store does: both "win"

    assert backend_name(prefix) == store
    check_prefix(prefix, write=True)
    assert backend_name(prefix) == "process-local"
    assert f"{scheme}://{bucket} does not honour conditional writes" in caplog.text
    assert "Do not run several executors on this bucket" in caplog.text
    assert create_only(f"{prefix}/lease", b"a") is not None  # the fallback still refuses within the process
    assert create_only(f"{prefix}/lease", b"b") is None
    proxy.close()
