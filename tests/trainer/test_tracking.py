"""W&B offline logging: a run writes an offline W&B run directory holding the logged keys and values."""

import glob
import struct

import pytest

from marin.trainer.tracking import Tracker, TrackerConfig
from tests.requirements import require_module

_BLOCK = 32768  # the .wandb file is a LevelDB-style log: 32 KiB blocks of (crc, length, type) records
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def wandb_history(run_file: str) -> list[dict[str, str]]:
    """The history rows ({key: JSON value}) of an offline ``run-<id>.wandb`` file."""
    pb = require_module("wandb.proto.wandb_internal_pb2", "wandb's protobuf records (a base dependency)")
    with open(run_file, "rb") as f:
        raw = f.read()
    assert raw[:4] == b":W&B", f"{run_file}: not a W&B run file"
    pos, records, pending = 7, [], b""
    while pos + 7 <= len(raw):
        if _BLOCK - pos % _BLOCK < 7:  # a record header never straddles a block: the tail is padding
            pos += _BLOCK - pos % _BLOCK
            continue
        _, length, kind = struct.unpack("<IHB", raw[pos : pos + 7])
        data, pos = raw[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind == _FULL:
            records.append(data)
        elif kind in (_FIRST, _MIDDLE):
            pending = data if kind == _FIRST else pending + data
        elif kind == _LAST:
            records.append(pending + data)
    rows = []
    for data in records:
        record = pb.Record()
        record.ParseFromString(data)
        if record.WhichOneof("record_type") == "history":
            rows.append({item.key or "/".join(item.nested_key): item.value_json for item in record.history.item})
    return rows


@pytest.mark.timeout(300)
def test_offline_wandb_run_holds_the_logged_metrics(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    out = tmp_path / "train-1a2b3c"
    tracker = Tracker(TrackerConfig(progress_bar=False), str(out), {"learning_rate": 0.1}, 0, 3)
    for step in range(3):
        tracker.log(step, {"loss": 3.0 - step, "grad_norm": 0.5})
    tracker.finish()

    [run_file] = glob.glob(str(out / "wandb" / "offline-run-*" / "run-train-1a2b3c.wandb"))
    rows = wandb_history(run_file)
    assert [(r["step"], float(r["loss"]), float(r["grad_norm"])) for r in rows] == [
        ("0", 3.0, 0.5),
        ("1", 2.0, 0.5),
        ("2", 1.0, 0.5),
    ]
    assert (out / "tracker.json").exists() and (out / "metrics.jsonl").read_text().count("\n") == 3
