"""W&B offline logging: a run writes an offline W&B run directory holding the logged keys and values, on
disk by the time the tracker's ``finish()`` returns."""

import glob
import threading
import time

import pytest

from marin.trainer.tracking import Tracker, TrackerConfig
from marin.trainer.wandb_file import history_rows, read_records, wait_until_complete


@pytest.mark.timeout(300)
def test_offline_wandb_run_holds_the_logged_metrics(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    out = tmp_path / "train-1a2b3c"
    notes = "".join(chr(ord("a") + i % 26) for i in range(80_000))  # a config record spanning three blocks
    tracker = Tracker(TrackerConfig(progress_bar=False), str(out), {"learning_rate": 0.1, "notes": notes}, 0, 3)
    for step in range(3):
        tracker.log(step, {"loss": 3.0 - step, "grad_norm": 0.5})
    tracker.finish()

    [run_file] = glob.glob(str(out / "wandb" / "offline-run-*" / "run-train-1a2b3c.wandb"))
    rows = history_rows(run_file)  # at once: finish() returns only when the log is on disk
    assert [(r["step"], float(r["loss"]), float(r["grad_norm"])) for r in rows] == [
        ("0", 3.0, 0.5),
        ("1", 2.0, 0.5),
        ("2", 1.0, 0.5),
    ]
    config = {
        item.key: item.value_json
        for record in read_records(run_file)
        if record.WhichOneof("record_type") == "run"
        for item in record.run.config.update
    }
    assert notes in config["notes"] and "0.1" in config["learning_rate"]
    assert (out / "tracker.json").exists() and (out / "metrics.jsonl").read_text().count("\n") == 3


def test_waiting_for_a_run_log_returns_once_its_exit_record_is_on_disk(tmp_path, monkeypatch):
    """The W&B service flushes a run's log after ``finish()`` returns; the wait covers that window."""
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    out = tmp_path / "train-4d5e6f"
    tracker = Tracker(TrackerConfig(progress_bar=False), str(out), {}, 0, 1)
    tracker.log(0, {"loss": 1.0})
    tracker.finish()
    [run_file] = glob.glob(str(out / "wandb" / "offline-run-*" / "run-train-4d5e6f.wandb"))
    complete = open(run_file, "rb").read()

    late = tmp_path / "late.wandb"
    late.write_bytes(complete[:7])  # what the file holds right after finish() when the service is slow
    flush = threading.Timer(0.5, late.write_bytes, [complete])
    start = time.monotonic()
    flush.start()
    assert wait_until_complete(str(late), timeout_s=30)
    assert time.monotonic() - start >= 0.5 and [r["loss"] for r in history_rows(str(late))] == ["1"]

    torn = tmp_path / "torn.wandb"
    torn.write_bytes(complete[:-10])  # the exit record cut short: never complete
    assert not wait_until_complete(str(torn), timeout_s=0.3)
