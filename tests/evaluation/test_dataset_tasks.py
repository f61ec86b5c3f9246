"""Multiple-choice tasks from Hugging Face ``datasets`` data sets, through the real ``load_dataset``.

The hub itself is never contacted: the data sets are files these tests write (Parquet through the
``parquet`` builder, a local directory of JSONL files), read by the same code path a hub task takes, with
the hub client switched to offline mode so that any attempt to reach it fails loudly instead of hanging.
"""

import json
import string

import datasets
import huggingface_hub.constants
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from marin.evaluation import MultipleChoiceTask, Scorer, load_items, load_task_yaml, score_task
from tests.evaluation.test_scoring import EOS, _successor_model, encode, planted_task

ARC_STYLE_YAML = """\
name: planted_arc
dataset: parquet
data_files: {{train: data/train.parquet, test: data/test.parquet}}
split: test
fewshot_split: train
num_fewshot: {k}
doc_to_text: "the letter {{question}}"
doc_to_choice: choices.text
doc_to_target: answerKey
target_labels: choices.label
target_delimiter: " "
"""


@pytest.fixture(autouse=True)
def offline_hub(monkeypatch, tmp_path):
    """No hub access, and datasets' Arrow cache in the test's own directory (not ~/.cache)."""
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-datasets-cache")


def arc_rows(items):
    """Our planted items in ARC's shape: a question, {text, label} choices and an answer letter."""
    rows = []
    for item in items:
        labels = list(string.ascii_uppercase[: len(item["choices"])])
        rows.append(
            {
                "question": item["context"].removeprefix("the letter "),
                "choices": {"text": [c.strip() for c in item["choices"]], "label": labels},
                "answerKey": labels[item["gold"]],
            }
        )
    return rows


@pytest.fixture
def planted(tmp_path):
    """The planted successor task as a JSONL file and as ARC-style Parquet train/test splits."""
    path, successor = planted_task(tmp_path, n=120)
    items = [json.loads(line) for line in path.read_text().splitlines()]
    (tmp_path / "data").mkdir()
    rows = arc_rows(items)
    pq.write_table(pa.Table.from_pylist(rows[:40]), tmp_path / "data" / "train.parquet")
    pq.write_table(pa.Table.from_pylist(rows[40:]), tmp_path / "data" / "test.parquet")
    return {"jsonl": path, "items": items, "successor": successor}


def test_parquet_dataset_task_maps_fields_and_scores_like_the_jsonl_task(tmp_path, planted):
    (tmp_path / "arc.yaml").write_text(ARC_STYLE_YAML.format(k=0))
    task = load_task_yaml(str(tmp_path / "arc.yaml"))
    assert task.data_files == {
        "train": [str(tmp_path / "data" / "train.parquet")],
        "test": [str(tmp_path / "data" / "test.parquet")],
    }
    expected = [{**item, "choices": [c.strip() for c in item["choices"]]} for item in planted["items"]]
    assert load_items(task) == expected[40:]
    assert load_items(task, "train") == expected[:40]

    scorer = Scorer(_successor_model(planted["successor"]), batch_size=32, max_len=64)
    from_dataset = score_task(task, scorer, encode, EOS)
    assert from_dataset["items"] == 80 and from_dataset["acc"]["value"] == 1.0
    # The same items as our own JSONL (choices carrying their space, no delimiter) score identically.
    jsonl_rows = planted["items"][40:]
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in jsonl_rows))
    from_jsonl = score_task(MultipleChoiceTask(name="j", path=str(tmp_path / "test.jsonl")), scorer, encode, EOS)
    assert from_jsonl["acc"] == from_dataset["acc"] and from_jsonl["acc_norm"] == from_dataset["acc_norm"]


class RecordingScorer:
    def __init__(self, scorer):
        self.scorer, self.requests = scorer, []

    def loglikelihood(self, requests):
        self.requests += requests
        return self.scorer.loglikelihood(requests)


def test_fewshot_examples_come_from_the_fewshot_split(tmp_path, planted):
    # Train questions carry a marker, so a shot taken from the test split cannot pass for a train one.
    train_rows = [{**row, "question": row["question"] + " (train)"} for row in arc_rows(planted["items"][:40])]
    pq.write_table(pa.Table.from_pylist(train_rows), tmp_path / "data" / "train.parquet")
    (tmp_path / "arc.yaml").write_text(ARC_STYLE_YAML.format(k=2))
    task = load_task_yaml(str(tmp_path / "arc.yaml"))
    scorer = RecordingScorer(Scorer(_successor_model(planted["successor"]), batch_size=32, max_len=64))
    result = score_task(task, scorer, encode, EOS)
    assert result["num_fewshot"] == 2 and result["acc"]["value"] == 1.0
    train_shots = {
        f"the letter {r['question']} {r['choices']['text'][string.ascii_uppercase.index(r['answerKey'])]}"
        for r in train_rows
    }
    test_contexts = [i["context"] for i in planted["items"][40:]]
    assert len(scorer.requests) == 4 * 80  # four choices per test item, in item order
    prompts = [bytes(context[1:]).decode() for context, _ in scorer.requests[::4]]
    for prompt, context in zip(prompts, test_contexts):
        *shots, last = prompt.split("\n\n")
        assert len(shots) == 2 and all(shot in train_shots for shot in shots), prompt
        assert last == context


def test_local_dataset_directory_relative_to_the_yaml(tmp_path, planted):
    """``dataset: ./dir``: load_dataset infers the builder and the splits from the files' names."""
    local = tmp_path / "tasks" / "arc_local"
    local.mkdir(parents=True)
    rows = arc_rows(planted["items"])
    for split, part in (("train", rows[:40]), ("test", rows[40:])):
        (local / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in part))
    (tmp_path / "tasks" / "arc.yaml").write_text(
        "name: arc_local\ndataset: ./arc_local\nsplit: test\ndoc_to_text: 'the letter {question}'\n"
        "doc_to_choice: choices.text\ndoc_to_target: answerKey\ntarget_labels: choices.label\n"
    )
    task = load_task_yaml(str(tmp_path / "tasks" / "arc.yaml"))
    assert task.dataset == str(local)
    items = load_items(task)
    assert [i["gold"] for i in items] == [i["gold"] for i in planted["items"][40:]]
    assert items[0]["context"] == planted["items"][40]["context"]


def test_literal_choices_and_digit_string_targets(tmp_path):
    pq.write_table(
        pa.Table.from_pylist(
            [
                {"passage": "Sky is blue.", "q": "is the sky blue", "label": "1"},
                {"passage": "Fire is cold.", "q": "is fire cold", "label": "0"},
            ]
        ),
        tmp_path / "boolq.parquet",
    )
    task = MultipleChoiceTask(
        name="yesno",
        dataset="parquet",
        data_files=str(tmp_path / "boolq.parquet"),
        split="train",
        doc_to_text="{passage}\nQuestion: {q}?\nAnswer:",
        doc_to_choice=["no", "yes"],
        doc_to_target="label",
        target_delimiter=" ",
    )
    assert load_items(task) == [
        {"context": "Sky is blue.\nQuestion: is the sky blue?\nAnswer:", "choices": ["no", "yes"], "gold": 1},
        {"context": "Fire is cold.\nQuestion: is fire cold?\nAnswer:", "choices": ["no", "yes"], "gold": 0},
    ]


def test_hub_specs_reach_load_dataset_with_subset_split_and_revision(monkeypatch):
    calls = []

    def fake_load_dataset(path, name=None, **kwargs):
        calls.append((path, name, kwargs))
        return datasets.Dataset.from_list([{"q": "2+2=", "options": ["3", "4"], "answer": "4"}])

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    task = MultipleChoiceTask(
        name="t",
        dataset="hf://datasets/someone/math_mc",
        subset="easy",
        split="dev",
        revision="0123abc",
        doc_to_text="{q}",
        doc_to_choice="options",
        doc_to_target="answer",
    )
    assert load_items(task) == [{"context": "2+2=", "choices": ["3", "4"], "gold": 1}]
    assert calls == [("someone/math_mc", "easy", {"split": "dev", "revision": "0123abc", "data_files": None})]


def test_unreachable_hub_dataset_and_bad_mappings_name_the_task():
    task = MultipleChoiceTask(name="arc", dataset="nobody-xyz/no-such-task", split="test")
    with pytest.raises(OSError, match=r"task arc: could not load dataset 'nobody-xyz/no-such-task'"):
        load_items(task)
    with pytest.raises(ValueError, match="exactly one of path"):
        MultipleChoiceTask(name="both", path="a.jsonl", dataset="b")


def test_missing_field_is_reported_with_the_item(tmp_path):
    pq.write_table(
        pa.Table.from_pylist([{"question": "q", "choices": ["a", "b"], "answer": 0}]), tmp_path / "t.parquet"
    )
    task = MultipleChoiceTask(
        name="t",
        dataset="parquet",
        data_files=str(tmp_path / "t.parquet"),
        split="train",
        doc_to_text="{question}",
        doc_to_target="label",
    )
    with pytest.raises(ValueError, match=r"task t: .*item 0 has no field 'label'"):
        load_items(task)
