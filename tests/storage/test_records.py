"""Record I/O: round trips in every format and on local and memory:// URLs, errors naming file and line,
skip-and-count, atomic writes, deterministic compressed bytes."""

import gzip
import json
import os

import pytest
import zstandard

from marin.storage.records import (
    ReadStats,
    RecordError,
    RecordWriter,
    encode_record,
    find_record_files,
    read_documents,
    read_records,
    write_records,
)

DOCS = [{"id": f"d{i}", "text": f"document number {i} ünïcode ✓", "source": "t", "n": i} for i in range(5000)]
FORMATS = ["jsonl", "jsonl.gz", "jsonl.zst", "parquet"]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("where", ["local", "memory"])
def test_round_trip(tmp_path, fmt, where):
    base = str(tmp_path) if where == "local" else f"memory://records-{fmt}"
    url = f"{base}/sub/shard.{fmt}"
    assert write_records(url, DOCS) == len(DOCS)
    assert list(read_documents(url)) == DOCS
    assert find_record_files(base) == [url]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("store", ["gcs", "s3"])
def test_round_trip_and_failed_write_on_object_stores(request, fmt, store):
    """The same streaming reader and writer on the GCS and S3 servers: a crash mid-write leaves no object."""
    base = request.getfixturevalue(f"{store}_prefix")
    url = f"{base}/sub/shard.{fmt}"
    assert write_records(url, DOCS) == len(DOCS)
    assert list(read_documents(url)) == DOCS
    assert find_record_files(base) == [url]
    with pytest.raises(RuntimeError):
        with RecordWriter(f"{base}/other/crashed.{fmt}") as w:
            w.write(DOCS[0])
            raise RuntimeError("crash mid-write")
    assert find_record_files(base) == [url]


def test_compressed_output_is_deterministic(tmp_path):
    for name in ("a", "b"):
        write_records(str(tmp_path / f"{name}.jsonl.gz"), DOCS[:100])
        write_records(str(tmp_path / f"{name}.jsonl.zst"), DOCS[:100])
    assert (tmp_path / "a.jsonl.gz").read_bytes() == (tmp_path / "b.jsonl.gz").read_bytes()
    assert (tmp_path / "a.jsonl.zst").read_bytes() == (tmp_path / "b.jsonl.zst").read_bytes()


BAD_LINES = [
    (b'{"id": 1, "text": "fine"}\n{"id": 2, "text": "broken\n', "invalid JSON"),
    (b'{"id": 1, "text": "fine"}\n{"id": 2, "body": "no text"}\n', "missing required field 'text'"),
    (b'{"id": 1, "text": "fine"}\n{"id": 2, "text": "\xff\xfe"}\n', "not valid UTF-8"),
    (b'{"id": 1, "text": "fine"}\n{"id": 2, "text": 7}\n', "field 'text' must be a string"),
    (b'{"id": 1, "text": "fine"}\n[1, 2]\n', "expected a JSON object"),
]


@pytest.mark.parametrize("payload,reason", BAD_LINES)
@pytest.mark.parametrize("suffix", ["jsonl", "jsonl.gz", "jsonl.zst"])
def test_malformed_line_names_file_and_line(tmp_path, payload, reason, suffix):
    path = tmp_path / f"bad.{suffix}"
    compress = {"jsonl": bytes, "jsonl.gz": gzip.compress, "jsonl.zst": zstandard.ZstdCompressor().compress}
    path.write_bytes(compress[suffix](payload))
    with pytest.raises(RecordError) as err:
        list(read_documents(str(path)))
    assert str(err.value).startswith(f"{path}:2: ") and reason in str(err.value)
    assert err.value.line == 2

    stats = ReadStats()
    docs = list(read_documents(str(path), on_error="skip", stats=stats))
    assert [d["text"] for d in docs] == ["fine"]
    assert stats.records == 1 and stats.skipped == 1 and reason in stats.first_errors[0]


def test_skip_counts_add_up_across_files_and_blank_lines_are_ignored(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"text": "x"}\n\nnot json\n{"text": "y"}\n\n')
    (tmp_path / "b.jsonl").write_text('{"nope": 1}\n{"text": "z"}\n')
    stats = ReadStats()
    texts = [
        d["text"] for f in find_record_files(str(tmp_path)) for d in read_documents(f, on_error="skip", stats=stats)
    ]
    assert texts == ["x", "y", "z"] and stats.skipped == 2 and stats.records == 3
    assert f"{tmp_path}/a.jsonl:3:" in stats.first_errors[0]


@pytest.mark.parametrize("suffix", ["jsonl.gz", "jsonl.zst"])
def test_truncated_compressed_file_is_an_error_even_when_skipping(tmp_path, suffix):
    path = tmp_path / f"cut.{suffix}"
    write_records(str(path), DOCS)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(RecordError, match="corrupt or truncated"):
        list(read_documents(str(path), on_error="skip"))


def test_parquet_missing_text_names_row(tmp_path):
    url = str(tmp_path / "p.parquet")
    write_records(url, [{"id": "a", "text": "t"}, {"id": "b", "text": None}])
    with pytest.raises(RecordError, match=r"p\.parquet:2: missing required field 'text'"):
        list(read_documents(url))
    assert [r["id"] for r in read_records(url)] == ["a", "b"]


def test_failed_write_leaves_nothing(tmp_path):
    url = str(tmp_path / "out.jsonl.gz")
    with pytest.raises(RuntimeError):
        with RecordWriter(url) as w:
            w.write(DOCS[0])
            raise RuntimeError("crash mid-write")
    assert os.listdir(tmp_path) == []
    # A previous complete file survives a failed rewrite untouched.
    write_records(url, DOCS[:3])
    with pytest.raises(RuntimeError):
        with RecordWriter(url) as w:
            w.write(DOCS[4])
            raise RuntimeError("crash")
    assert list(read_documents(url)) == DOCS[:3] and os.listdir(tmp_path) == ["out.jsonl.gz"]


def test_unknown_format_and_missing_input(tmp_path):
    with pytest.raises(ValueError, match=r"data\.csv: unknown record format"):
        list(read_records(str(tmp_path / "data.csv")))
    with pytest.raises(FileNotFoundError, match="no such file"):
        find_record_files(str(tmp_path / "nothing-here"))
    with pytest.raises(ValueError, match="on_error must be"):
        list(read_records(str(tmp_path / "x.jsonl"), on_error="ignore"))


def test_find_record_files_skips_metadata_and_work_dirs(tmp_path):
    for rel in ["b/2.jsonl.gz", "a/1.jsonl", "_work/x.jsonl", ".hidden.jsonl", "notes.txt", "c.parquet"]:
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("")
    assert [os.path.relpath(f, tmp_path) for f in find_record_files(str(tmp_path))] == [
        "a/1.jsonl",
        "b/2.jsonl.gz",
        "c.parquet",
    ]
    assert find_record_files(f"{tmp_path}/*/*.jsonl*") == [f"{tmp_path}/a/1.jsonl", f"{tmp_path}/b/2.jsonl.gz"]


def test_lines_the_fast_parser_refuses_read_as_the_stdlib_reads_them(tmp_path):
    """orjson parses lines; what it refuses but Python's json accepts (NaN/Infinity, integers beyond 64 bits,
    lone surrogate escapes) must still read, with the stdlib's values."""
    import json
    import math

    lines = [
        '{"id": "nan", "text": "t", "score": NaN, "inf": -Infinity}',
        '{"id": "big", "text": "t", "n": 123456789012345678901234567890}',
        '{"id": "surrogate", "text": "\\ud800 alone"}',
        '{"id": "plain", "text": "ünïcode ✓", "x": 1.5e-7}',
    ]
    path = tmp_path / "odd.jsonl.gz"
    path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    got = list(read_documents(str(path)))
    want = [json.loads(line) for line in lines]
    assert [d["id"] for d in got] == ["nan", "big", "surrogate", "plain"]
    assert math.isnan(got[0]["score"]) and got[0]["inf"] == -math.inf
    assert got[1:] == want[1:]


def test_batched_writes_keep_one_line_per_record_across_batches(tmp_path):
    """Lines are buffered and handed to the compressor ~1 MiB at a time: the file must still hold exactly
    one line per record, in order, each parsing back to its record (NaN kept as NaN), across batches."""
    import json
    import math

    records = [*DOCS, {"id": "nan", "text": "t", "score": float("nan")}] * 60  # ~20 MB: many batches
    write_records(str(tmp_path / "out.jsonl.gz"), records)
    with gzip.open(tmp_path / "out.jsonl.gz", "rt", encoding="utf-8") as f:
        lines = f.read().split("\n")
    assert lines[-1] == "" and len(lines) == len(records) + 1
    assert [json.loads(line)["id"] for line in lines[:-1]] == [r["id"] for r in records]
    assert lines[:-1] == [encode_record(r).decode() for r in records]
    back = list(read_records(str(tmp_path / "out.jsonl.gz")))
    assert math.isnan(back[5000]["score"]) and [r["id"] for r in back] == [r["id"] for r in records]


def test_encoded_records_mean_what_the_stdlib_would_write():
    """orjson writes the common case; wherever it would write something else the stdlib's line is written."""
    import dataclasses
    import json

    import numpy as np

    plain = {"id": "a", "text": "ünïcode ✓ and the word null", "n": 3, "x": 1.5e-7, "tags": ["a", None]}
    line = encode_record(plain)
    assert json.loads(line) == plain and b"\n" not in line and "ünïcode ✓".encode() in line  # UTF-8, not \u escapes
    for record in (
        {"id": "nan", "score": float("nan"), "inf": [float("-inf")]},  # orjson would write null
        {"id": "big", "n": 2**70},  # orjson refuses
        {"id": "keys", "counts": {1: 2}},  # orjson refuses non-string keys; the stdlib writes "1"
        {"id": "numpy", "score": np.float64(0.25)},  # a float subclass
    ):
        assert encode_record(record) == json.dumps(record, ensure_ascii=False).encode(), record
    with pytest.raises(UnicodeEncodeError):  # as before: a lone surrogate cannot be written as UTF-8
        encode_record({"id": "s", "text": "\ud800"})

    @dataclasses.dataclass
    class Point:
        x: int

    with pytest.raises(TypeError):  # orjson would write it; the stdlib (and so the writer) refuses
        encode_record({"id": "d", "p": Point(1)})


def test_lines_longer_than_a_read_chunk_and_a_last_line_without_newline(tmp_path):
    records = [{"id": "long", "text": "word " * 500_000}, {"id": "after", "text": "x"}]  # 2.5 MB line
    for suffix in (".jsonl", ".jsonl.gz", ".jsonl.zst"):
        path = tmp_path / f"cut{suffix}"
        write_records(str(path), records)
        assert list(read_records(str(path))) == records
    path = tmp_path / "no-newline.jsonl"
    path.write_text('{"id": "a", "text": "x"}\n\n{"id": "b", "text": "y"}')
    assert [r["id"] for r in read_records(str(path))] == ["a", "b"]
    path.write_text('{"id": "a", "text": "x"}\n{"id": "b", "text": ')
    with pytest.raises(RecordError, match=r"no-newline.jsonl:2: invalid JSON"):
        list(read_records(str(path)))


ARRAY_ROWS = [{"instruction": "Add.", "output": "5"}, {"instruction": "Sub.", "output": "2"}]


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_a_json_array_file_is_read_as_its_records(tmp_path, suffix):
    text = json.dumps(ARRAY_ROWS, indent=2).encode()  # pretty-printed over many lines, as data sets ship it
    path = tmp_path / f"alpaca{suffix}"
    path.write_bytes(gzip.compress(text) if suffix.endswith(".gz") else text)
    assert find_record_files(str(path)) == [str(path)]  # named explicitly, a plain .json file is data
    assert list(read_records(str(path))) == ARRAY_ROWS


def test_a_json_array_names_its_bad_items_and_a_broken_array(tmp_path):
    path = tmp_path / "alpaca.json"
    path.write_text(json.dumps([ARRAY_ROWS[0], 7, ARRAY_ROWS[1]]))
    with pytest.raises(RecordError, match=r"alpaca\.json:2: array item 2: expected a JSON object, got int"):
        list(read_records(str(path)))
    stats = ReadStats()
    assert list(read_records(str(path), on_error="skip", stats=stats)) == ARRAY_ROWS and stats.skipped == 1
    path.write_text('[{"a": 1}, ')
    with pytest.raises(RecordError, match="not a JSON array of objects"):
        list(read_records(str(path)))
    assert find_record_files(str(tmp_path)) == []  # in a directory, plain .json stays metadata
