"""Reading a W&B run's local transaction log (``run-<id>.wandb``), and waiting until it is complete.

``wandb.Run.finish()`` returns once the W&B service has *handled* the run's exit, but the service writes
the log through a buffer that it flushes only when it closes the run's stream, which happens after
``finish()`` has returned (measured with wandb 0.31: right after ``finish()`` the file can still be its
7-byte header). An offline run's log is the only copy of its metrics until ``wandb sync``, so the tracker
waits for the exit record to be on disk before it calls the run finished.

The file is a LevelDB-style log (the format ``wandb sync`` reads): a 7-byte header (``:W&B``, magic,
version), then 32 KiB blocks of records, each ``(crc32 u32, length u16, type u8)`` and its payload; a
protobuf ``Record`` larger than a block is split into FIRST/MIDDLE.../LAST pieces, and a block's tail too
short for a record header is zero padding.
"""

from __future__ import annotations

import logging
import struct
import time

logger = logging.getLogger(__name__)

_FILE_HEADER = 7
_BLOCK = 32768
_RECORD_HEADER = 7
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def read_records(run_file: str) -> list:
    """The protobuf ``Record``s of a run log, in order; a torn record at the end (still being written) is
    left out."""
    from wandb.proto import wandb_internal_pb2 as pb

    with open(run_file, "rb") as f:
        raw = f.read()
    if len(raw) < _FILE_HEADER or raw[:4] != b":W&B":
        raise ValueError(f"{run_file}: not a W&B run log (expected the ':W&B' header)")
    pos, payloads, pending = _FILE_HEADER, [], b""
    while pos + _RECORD_HEADER <= len(raw):
        if _BLOCK - pos % _BLOCK < _RECORD_HEADER:  # a record header never straddles a block
            pos += _BLOCK - pos % _BLOCK
            continue
        _, length, kind = struct.unpack("<IHB", raw[pos : pos + _RECORD_HEADER])
        start, pos = pos + _RECORD_HEADER, pos + _RECORD_HEADER + length
        if pos > len(raw):
            break
        data = raw[start:pos]
        if kind == _FULL:
            payloads.append(data)
        elif kind == _FIRST:
            pending = data
        elif kind == _MIDDLE:
            pending += data
        elif kind == _LAST:
            payloads.append(pending + data)
    records = []
    for data in payloads:
        record = pb.Record()
        record.ParseFromString(data)
        records.append(record)
    return records


def history_rows(run_file: str) -> list[dict[str, str]]:
    """The logged rows of a run log: one ``{key: JSON-encoded value}`` per history record."""
    return [
        {item.key or "/".join(item.nested_key): item.value_json for item in record.history.item}
        for record in read_records(run_file)
        if record.WhichOneof("record_type") == "history"
    ]


def wait_until_complete(run_file: str, timeout_s: float = 120.0) -> bool:
    """Wait until the run log holds its exit record (the service has flushed and closed it); False, with
    a warning naming the file, if that takes longer than ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    delay = 0.01
    while True:
        try:
            if any(r.WhichOneof("record_type") == "exit" for r in read_records(run_file)):
                return True
        except (FileNotFoundError, ValueError):
            pass  # not created, or not past its header yet
        if time.monotonic() > deadline:
            logger.warning(
                "%s: the W&B service has not written the run's exit record after %.0f s", run_file, timeout_s
            )
            return False
        time.sleep(delay)
        delay = min(delay * 2, 0.5)
