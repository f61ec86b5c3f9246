"""The chat data step: every common shape to one schema; malformed rows named by file, line and field."""

import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from marin.chat import ChatDataConfig, MalformedConversation, normalize_chat, normalize_record
from marin.parallel import TaskFailed
from marin.storage.records import RecordError, read_records

QA = [{"role": "user", "content": "Q?"}, {"role": "assistant", "content": "A."}]


@pytest.mark.parametrize(
    "record, expected",
    [
        ({"messages": QA}, QA),
        ({"messages": QA, "system": "Be brief."}, [{"role": "system", "content": "Be brief."}, *QA]),
        (
            {
                "conversations": [
                    {"from": "system", "value": "S"},
                    {"from": "human", "value": "Q?"},
                    {"from": "gpt", "value": "A."},
                ]
            },
            [{"role": "system", "content": "S"}, *QA],
        ),
        ({"instruction": "Q?", "output": "A."}, QA),
        (
            {"instruction": "Add.", "input": "2 3", "output": "5", "system": ""},
            [{"role": "user", "content": "Add.\n\n2 3"}, {"role": "assistant", "content": "5"}],
        ),
        ({"instruction": "Q?", "input": "", "response": "A."}, QA),
    ],
)
def test_shapes_normalize_to_messages(record, expected):
    assert normalize_record(record) == expected


SHAREGPT_QA = [{"from": "human", "value": "Q?"}, {"from": "gpt", "value": "A."}]


@pytest.mark.parametrize(
    "record, message",
    [
        (
            {"text": "hello"},
            "no conversation: expected one of the fields ['messages', 'conversations', 'instruction', 'prompt']",
        ),
        ({"messages": "hi"}, "messages: expected a list of turns, got str"),
        ({"prompt": "Q", "completion": "A"}, "prompt: a string (a prompt/completion row?)"),
        (
            {"prompt": {"role": "prompter", "text": "Q", "replies": [{"role": "assistant", "text": "", "rank": 0}]}},
            "prompt.replies[0].text: empty",
        ),
        ({"messages": [QA[0], {"role": "bot", "content": "A."}]}, "messages[1].role: expected one of"),
        ({"messages": [QA[0], {"role": "assistant", "content": 7}]}, "messages[1].content: expected a string, got int"),
        (
            {"conversations": [{"from": "human", "value": "Q"}, {"from": "robot", "value": "A"}]},
            "conversations[1].from",
        ),
        ({"messages": [QA[1], QA[0]]}, "messages[0].role: expected 'user'"),
        ({"messages": QA[:1]}, "messages[0].role: the conversation must end with an assistant turn"),
        ({"messages": [QA[0], {"role": "assistant", "content": "  "}]}, "messages[1].content: empty"),
        ({"instruction": "Q?", "output": ""}, "output: expected a non-empty answer"),
        ({"messages": QA, "system": 3}, "system: expected a string, got int"),
        ({"messages": [QA[0], {"role": "assistant", "content": None}]}, "messages[1].content: expected a string"),
        # errors name the record's own field, at the record's own index (issue 25) ...
        (
            {"conversations": [*SHAREGPT_QA, *SHAREGPT_QA[:1], {"from": "gpt", "value": " "}]},
            "conversations[3].value: empty",
        ),
        ({"conversations": SHAREGPT_QA[::-1]}, "conversations[0].from: expected 'user'"),
        # ... also when a top-level system prompt comes first in the normalized conversation
        (
            {"system": "Be brief.", "conversations": [SHAREGPT_QA[0], {"from": "gpt", "value": ""}]},
            "conversations[1].value: empty",
        ),
        ({"system": "Be brief.", "messages": [QA[1], QA[0]]}, "messages[0].role: expected 'user'"),
        ({"instruction": " ", "output": "A."}, "instruction: empty"),
        ({"instruction": "Q?", "response": "  "}, "output: expected a non-empty answer"),
    ],
)
def test_malformed_records_name_the_field(record, message):
    with pytest.raises(MalformedConversation) as info:
        normalize_record(record)
    assert str(info.value).startswith(message)


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_malformed_row_stops_the_step_naming_file_line_and_field(tmp_path):
    src = write_jsonl(
        tmp_path / "chat.jsonl",
        [{"messages": QA}, {"messages": QA}, {"messages": [QA[0], {"role": "bot", "content": "x"}]}],
    )
    with pytest.raises(TaskFailed) as info:
        normalize_chat(ChatDataConfig(input_paths=[src], output_path=str(tmp_path / "out")))
    assert isinstance(info.value.__cause__, RecordError)
    assert str(info.value.__cause__).startswith(
        f"{src}:3: messages[1].role: expected one of ['assistant', 'system', 'user'], got 'bot'"
    )
    assert not (tmp_path / "out" / "summary.json").exists()
    assert not list((tmp_path / "out").rglob("*.jsonl.gz"))  # no half-written output under a final name


def test_skips_are_counted_by_field_and_splits_are_stable(tmp_path):
    rows = [
        {"messages": [{"role": "user", "content": f"Q{i}?"}, {"role": "assistant", "content": f"A{i}."}]}
        for i in range(200)
    ]
    rows[5] = {"messages": [QA[0], {"role": "bot", "content": "x"}]}
    rows[9] = {"instruction": "Q", "output": ""}
    rows[11] = {"messages": [QA[0], {"role": "robot", "content": "x"}, QA[0], QA[1]]}
    src = write_jsonl(tmp_path / "a.jsonl", rows)
    table = pa.Table.from_pylist(
        [{"instruction": "Add.", "input": "2 3", "output": "5"}, {"instruction": "Sub.", "input": "5 3", "output": "2"}]
    )
    pq.write_table(table, tmp_path / "held.parquet")
    out = tmp_path / "out"
    normalize_chat(
        ChatDataConfig(
            input_paths=[src],
            validation_paths=[str(tmp_path / "held.parquet")],
            output_path=str(out),
            validation_fraction=0.1,
            on_error="skip",
        )
    )
    summary = json.loads((out / "summary.json").read_text())
    assert summary["skipped"] == 3
    assert summary["skip_reasons"] == {"messages[].role": 2, "output": 1}
    train = list(read_records(str(out / "train" / "00000.jsonl.gz")))
    held = list(read_records(str(out / "validation" / "00000.jsonl.gz")))
    assert len(train) + len(held) == 197 and 5 <= len(held) <= 40  # ~10% held out by content hash
    assert summary["conversations"] == {"train": len(train), "validation": len(held) + 2}
    assert next(read_records(str(out / "validation" / "00001.jsonl.gz")))["messages"][0]["content"] == "Add.\n\n2 3"
    # deterministic: a second run writes the same bytes
    normalize_chat(
        ChatDataConfig(
            input_paths=[src],
            validation_paths=[str(tmp_path / "held.parquet")],
            output_path=str(tmp_path / "again"),
            validation_fraction=0.1,
            on_error="skip",
        )
    )
    for split in ("train", "validation"):
        first = gzip.decompress((out / split / "00000.jsonl.gz").read_bytes())
        assert first == gzip.decompress((tmp_path / "again" / split / "00000.jsonl.gz").read_bytes())
