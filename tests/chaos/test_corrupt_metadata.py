"""Corrupt or truncated ``.executor_status`` / ``.executor_lease`` files, on local disk, GCS and S3.

The rule: a clear error naming the file, or a safe recovery -- never a silent rerun over good outputs.

- A finished step whose status file is damaged (cut mid-line, emptied, not JSON) is an error naming the
  file; nothing runs, its outputs stay as they were.
- A lease that cannot be parsed has no heartbeat to judge; the executor watches that same garbage for a
  full stale period and then takes it over, so the step runs exactly once.
- A damaged lease beside a SUCCESS status is irrelevant: the step is skipped.

Not detectable, and so not tested: a status file cut exactly at a line boundary reads as an earlier,
valid history (say, RUNNING). Writes are whole-object PUTs or rename-into-place, so that needs the store
itself to lose data.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from marin.execution import Executor, ExecutorStep, LeaseConfig, this_output_path
from marin.execution.status import StatusFileError, read_events
from marin.storage import join, read_bytes, write_atomic
from tests.execution.steps_lib import TraceConfig, call_counts, trace_step

pytestmark = pytest.mark.usefixtures("ray_address")
ROOT = Path(__file__).resolve().parents[2]
FAST = LeaseConfig(heartbeat_s=0.1, stale_after_s=1.0)


def dag(calls):
    a = ExecutorStep(
        name="c/a", fn=trace_step, config=TraceConfig(calls_dir=str(calls), label="a", output_path=this_output_path())
    )
    b = ExecutorStep(
        name="c/b",
        fn=trace_step,
        config=TraceConfig(
            calls_dir=str(calls), label="b", output_path=this_output_path(), inputs=(a / "result.json",)
        ),
    )
    return a, b


def finished(tmp_path, prefix):
    calls = tmp_path / "calls"
    a, b = dag(calls)
    result = Executor(prefix=prefix, poll_s=0.05).run([b])
    out_b = result.plan.steps[1].output_path
    return calls, b, out_b


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda text: text[: text.rindex("SUCCESS") + 3], id="cut-mid-line"),
        pytest.param(lambda text: "", id="emptied"),
        pytest.param(lambda text: "\x00" * len(text), id="zeroed"),
    ],
)
def test_damaged_status_of_a_finished_step_is_an_error_and_reruns_nothing(tmp_path, store_prefix, damage):
    calls, b, out_b = finished(tmp_path, store_prefix)
    status_url = join(out_b, ".executor_status")
    outputs_before = read_bytes(join(out_b, "result.json"))
    write_atomic(status_url, damage(read_bytes(status_url).decode()))
    with pytest.raises(StatusFileError, match=rf"{status_url}.*(not a status event|no status events)"):
        Executor(prefix=store_prefix, poll_s=0.05).run([b])
    assert call_counts(calls) == {"a": 1, "b": 1}
    assert read_bytes(join(out_b, "result.json")) == outputs_before


def test_damaged_status_is_one_line_on_the_command_line(tmp_path):
    script = tmp_path / "exp.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from marin.execution import executor_main\n"
        "from tests.chaos.test_corrupt_metadata import dag\n"
        f"executor_main(steps=[dag({str(tmp_path / 'calls')!r})[1]])\n"
    )
    prefix = str(tmp_path / "store")
    calls, b, out_b = finished(tmp_path, prefix)
    Path(out_b, ".executor_status").write_text('{"state": "RUNNING", "time": 1}\n{"state": "SUCC')
    proc = subprocess.run([sys.executable, str(script), "--prefix", prefix], capture_output=True, text=True)
    assert proc.returncode == 1
    [line] = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert f"{out_b}/.executor_status, line 2: not a status event" in line
    assert "Traceback" not in proc.stderr
    assert call_counts(calls) == {"a": 1, "b": 1}


GARBAGE_LEASES = [
    pytest.param(b'{"owner": "gone:1:x", "acquired": 1, "heartb', id="truncated"),
    pytest.param(b"", id="empty"),
    pytest.param(b'{"owner": "gone:1:x", "heartbeat": "yesterday"}', id="heartbeat-not-a-number"),
    pytest.param(b'{"owner": "gone:1:x", "heartbeat": "1763780000"}', id="heartbeat-a-string"),
    pytest.param(b'["gone:1:x", 1763780000]', id="not-an-object"),
]


@pytest.mark.parametrize("garbage", GARBAGE_LEASES)
def test_unreadable_lease_of_an_unfinished_step_is_taken_over_after_a_stale_period(
    tmp_path, gcs_prefix, garbage, caplog
):
    calls = tmp_path / "calls"
    a, b = dag(calls)
    ex = Executor(prefix=gcs_prefix, poll_s=0.05, lease=FAST)
    out_a = ex.plan([a]).steps[0].output_path
    write_atomic(join(out_a, ".executor_lease"), garbage)  # as if its holder died mid-write
    ex.run([b])
    assert call_counts(calls) == {"a": 1, "b": 1}
    assert "took over stale lease" in caplog.text and "an unreadable lease" in caplog.text
    assert [e["state"] for e in read_events(out_a)][-2:] == ["RUNNING", "SUCCESS"]


def test_unreadable_lease_beside_success_is_ignored(tmp_path, store_prefix):
    calls, b, out_b = finished(tmp_path, store_prefix)
    write_atomic(join(out_b, ".executor_lease"), b'{"owner": "x", "hea')
    result = Executor(prefix=store_prefix, poll_s=0.05, lease=FAST).run([b])
    assert result.ran == [] and len(result.skipped) == 2
    assert call_counts(calls) == {"a": 1, "b": 1}
    assert json.loads(read_bytes(join(out_b, "result.json")))["label"] == "b"
