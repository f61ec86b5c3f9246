"""Bad storage input fails before any step runs, in one line naming the URL and what failed.

Unreachable endpoints are closed loopback ports; missing buckets are asked of the real GCS/S3 servers;
permission errors come from a loopback server that answers 403 the way GCS (JSON) and S3 (XML) do.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from marin.execution import Executor
from marin.storage import StoreUnavailable, check_prefix
from tests.object_store_servers import ForbiddenStore, free_port
from tests.storage.test_store_faults import bind  # noqa: F401 - fixture

ROOT = Path(__file__).resolve().parents[2]
SCHEMES = {"gcs": "gs", "s3": "s3"}
DENIED = {"gcs": "GCS: 403 caller does not have", "s3": "S3: AccessDenied: Access Denied"}


def one_line(message: str) -> str:
    assert "\n" not in message, message
    return message


@pytest.mark.parametrize("store", ["gcs", "s3"])
def test_unreachable_endpoint_names_url_and_endpoint(store, bind):
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    bind(store, endpoint)
    prefix = f"{SCHEMES[store]}://some-bucket/lab"
    with pytest.raises(StoreUnavailable) as err:
        check_prefix(prefix, write=True)
    assert one_line(str(err.value)).startswith(f"{prefix}: cannot reach the store at {endpoint} (connection refused)")


@pytest.mark.parametrize("store", ["gcs", "s3"])
@pytest.mark.parametrize("write", [True, False], ids=["run", "dry-run"])
def test_missing_bucket_is_named(store, write, object_stores):
    if (object_stores.gcs_url if store == "gcs" else object_stores.s3_url) is None:
        pytest.skip(object_stores.gcs_missing if store == "gcs" else object_stores.s3_missing)
    bucket = f"marin-missing-{uuid.uuid4().hex[:8]}"
    prefix = f"{SCHEMES[store]}://{bucket}/lab"
    with pytest.raises(StoreUnavailable) as err:
        check_prefix(prefix, write=write)
    assert one_line(str(err.value)) == f"{prefix}: bucket {SCHEMES[store]}://{bucket} does not exist"


@pytest.mark.parametrize("store", ["gcs", "s3"])
def test_permission_denied_listing(store, bind):
    forbidden = ForbiddenStore()
    bind(store, forbidden.url)
    prefix = f"{SCHEMES[store]}://locked-bucket/lab"
    with pytest.raises(StoreUnavailable) as err:
        check_prefix(prefix, write=False)
    assert one_line(str(err.value)).startswith(f"{prefix}: permission denied listing the prefix ({DENIED[store]}")
    forbidden.close()


@pytest.mark.parametrize("store", ["gcs", "s3"])
def test_permission_denied_writing_with_a_read_only_role(store, bind):
    read_only = ForbiddenStore(allow_reads=True)
    bind(store, read_only.url)
    prefix = f"{SCHEMES[store]}://read-only-bucket/lab"
    check_prefix(prefix, write=False)  # a dry run only reads: fine
    with pytest.raises(StoreUnavailable) as err:
        check_prefix(prefix, write=True)
    assert one_line(str(err.value)).startswith(f"{prefix}: permission denied writing objects here ({DENIED[store]}")
    read_only.close()


def test_local_prefix_below_a_file_is_named(tmp_path):
    (tmp_path / "file").write_text("x")
    prefix = str(tmp_path / "file" / "lab")
    with pytest.raises(StoreUnavailable, match=rf"^{prefix}: {tmp_path / 'file'} is a file, expected a directory"):
        Executor(prefix=prefix).run([])


EXPERIMENT = """
import dataclasses, os
from marin.execution import ExecutorStep, executor_main, this_output_path

@dataclasses.dataclass(frozen=True)
class C:
    output_path: str

def touch(c):
    open(os.environ["CALLS_FILE"], "a").write(c.output_path + "\\n")

executor_main(steps=[ExecutorStep(name="x/touch", fn=touch, config=C(this_output_path()))])
"""


@pytest.mark.parametrize(
    "case",
    ["gcs-unreachable", "s3-missing-bucket"],
)
def test_command_line_reports_bad_store_in_one_line_and_runs_nothing(tmp_path, case, object_stores):
    script = tmp_path / "exp.py"
    script.write_text(EXPERIMENT)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(PYTHONPATH=str(ROOT), CALLS_FILE=str(tmp_path / "calls"))
    if case == "gcs-unreachable":
        endpoint = f"http://127.0.0.1:{free_port()}"
        env["STORAGE_EMULATOR_HOST"] = endpoint
        prefix = "gs://any-bucket/lab"
        expected = f"error: {prefix}: cannot reach the store at {endpoint} (connection refused)"
    else:
        if object_stores.s3_url is None:
            pytest.skip(object_stores.s3_missing)
        prefix = "s3://no-such-bucket-here/lab"
        expected = f"error: {prefix}: bucket s3://no-such-bucket-here does not exist"
    proc = subprocess.run(
        [sys.executable, str(script), "--prefix", prefix],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1
    [line] = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert line.startswith(expected), proc.stderr
    assert "Traceback" not in proc.stderr and "starting a local Ray" not in proc.stderr
    assert not (tmp_path / "calls").exists()
