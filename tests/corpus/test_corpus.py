"""The bundled corpus: deterministic, the documented layout and size, ground truth that matches the text,
and eval tasks whose answers follow regularities that are frequent in the training text."""

import json
import os
import re
import subprocess
import sys
from collections import Counter

import pytest

from marin.corpus import CorpusConfig, generate_corpus, item_text, load_ground_truth
from marin.corpus.domains import ANIMAL_SOUNDS, NUMBER_WORDS, OPPOSITE_OF
from marin.dedupe.text import jaccard, normalize_exact
from marin.storage.records import find_record_files, read_documents, read_records

SMALL = dict(
    train_docs_per_domain=600,
    validation_docs_per_domain=50,
    train_shards_per_domain=3,
    eval_items_per_task=40,
    contaminated_docs_per_task=4,
)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("corpus"))
    manifest = generate_corpus(CorpusConfig(output_path=root))
    return root, manifest


def all_files(root):
    out = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            out[os.path.relpath(path, root)] = open(path, "rb").read()
    return out


def test_same_seed_same_bytes_other_seed_other_text(tmp_path):
    generate_corpus(CorpusConfig(output_path=str(tmp_path / "a"), **SMALL))
    generate_corpus(CorpusConfig(output_path=str(tmp_path / "b"), **SMALL))
    generate_corpus(CorpusConfig(output_path=str(tmp_path / "c"), seed=1, **SMALL))
    a, b, c = (all_files(tmp_path / x) for x in "abc")
    assert a == b
    assert a.keys() == c.keys() and a["train/stories/shard-00000.jsonl.gz"] != c["train/stories/shard-00000.jsonl.gz"]


def test_layout_size_and_schema(corpus):
    root, manifest = corpus
    train = find_record_files(os.path.join(root, "train"))
    assert [os.path.relpath(f, root) for f in train] == [
        f"train/{d}/shard-{i:05d}.jsonl.gz" for d in ("arithmetic", "stories") for i in range(8)
    ]
    assert len(find_record_files(os.path.join(root, "validation"))) == 2
    docs = [d for f in train for d in read_documents(f)]
    assert all(set(d) == {"id", "text", "source"} for d in docs)
    assert Counter(d["source"] for d in docs).keys() == {"stories", "arithmetic"}
    assert len({d["id"] for d in docs}) == len(docs)
    text_mb = sum(len(d["text"].encode()) for d in docs) / 1e6
    assert 5 <= text_mb <= 20, text_mb
    val = [d for f in find_record_files(os.path.join(root, "validation")) for d in read_documents(f)]
    train_texts = {d["text"] for d in docs}
    assert len(val) == 1000 and sum(v["text"] in train_texts for v in val) <= 5  # held out, not copied
    assert manifest["files"]["train/stories/shard-00000.jsonl.gz"] > 1000


def test_ground_truth_matches_the_text(corpus):
    root, manifest = corpus
    docs = {d["id"]: d["text"] for f in find_record_files(os.path.join(root, "train")) for d in read_documents(f)}
    duplicates, contaminated = load_ground_truth(root)
    exact = [d for d in duplicates if d["kind"] == "exact"]
    near = [d for d in duplicates if d["kind"] == "near"]
    assert len(exact) == manifest["planted"]["exact_duplicates"] > 400
    assert all(normalize_exact(docs[d["original"]]) == normalize_exact(docs[d["copy"]]) for d in exact)
    assert sum(docs[d["original"]] != docs[d["copy"]] for d in exact) > 50  # some differ in case/space
    for d in near[:200]:
        assert jaccard(docs[d["original"]], docs[d["copy"]]) == pytest.approx(d["jaccard"], abs=1e-6)
    high = sum(d["jaccard"] >= 0.8 for d in near)
    assert high >= 200 and len(near) - high >= 200  # both sides of the 0.8 threshold are well covered
    items = {r["id"]: r for f in find_record_files(os.path.join(root, "eval")) for r in read_records(f)}
    assert len(contaminated) == 40
    for row in contaminated:
        assert item_text(items[row["eval_id"]]) in docs[row["id"]]


def test_eval_tasks_follow_frequent_training_patterns(corpus):
    root, _ = corpus
    stories = " ".join(
        d["text"] for f in find_record_files(os.path.join(root, "train/stories")) for d in read_documents(f)
    )
    arithmetic = " ".join(
        d["text"] for f in find_record_files(os.path.join(root, "train/arithmetic")) for d in read_documents(f)
    )
    for task in ("animal_sounds", "opposites", "addition", "counting"):
        items = list(read_records(os.path.join(root, "eval", f"{task}.jsonl")))
        assert len(items) == 200 and len({i["context"] for i in items}) == 200
        for item in items:
            assert len(item["choices"]) == 4 and len(set(item["choices"])) == 4 and 0 <= item["gold"] < 4
            gold = item["choices"][item["gold"]].strip()
            ctx = item["context"]
            if task == "animal_sounds":
                animal = ctx.rsplit(" ", 2)[-2]
                assert gold == ANIMAL_SOUNDS[animal]
                assert stories.count(f"the {animal} said {gold}") >= 50
            elif task == "opposites":
                word = re.search(r"was (\w+), and the other", ctx).group(1)
                assert gold == OPPOSITE_OF[word] and stories.count(f"was {word}, and the other") >= 20
            elif task == "addition":
                x, y = map(int, re.findall(r"\b(\d+)\b", ctx)[:2])
                assert int(gold) == x + y
            else:
                last = ctx.rstrip(",").rsplit(" ", 1)[-1]
                assert gold == NUMBER_WORDS[NUMBER_WORDS.index(last) + 1]
                assert arithmetic.count(f"{last}, {gold}") >= 20
    assert len(re.findall(r"Now \w+ has \d+ \w+\.", arithmetic)) >= 1000


def test_cli_writes_a_corpus(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "marin.corpus",
            "--output",
            str(tmp_path / "c"),
            "--train_docs_per_domain",
            "300",
            "--eval_items_per_task",
            "20",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(out.stdout.strip().splitlines()[-1])["contaminated"] == 40
    manifest = json.loads((tmp_path / "c" / "manifest.json").read_text())
    assert manifest["config"]["train_docs_per_domain"] == 300


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match=r"CorpusConfig.train_docs_per_domain must be >= 1, got 0"):
        CorpusConfig(output_path="x", train_docs_per_domain=0)
    with pytest.raises(ValueError, match="contaminated_docs_per_task"):
        CorpusConfig(output_path="x", eval_items_per_task=3, contaminated_docs_per_task=5)
