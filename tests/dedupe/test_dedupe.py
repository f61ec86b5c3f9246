"""The dedupe step against the corpus ground truth: exact, fuzzy, paragraph and decontamination; output
layout; resumption; malformed input. Runs in-process (``use_ray=False``); test_ray.py covers Ray."""

import json
import os
from collections import defaultdict

import pytest

from marin.dedupe import (
    DecontaminationConfig,
    DedupeConfig,
    ExactDedupeConfig,
    MinHashConfig,
    ParagraphDedupeConfig,
    dedupe_documents,
    pipeline,
)
from marin.dedupe.text import jaccard, normalize_exact, normalize_paragraph, split_paragraphs
from marin.parallel import TaskFailed
from marin.storage.records import find_record_files, read_documents, write_records
from tests.dedupe.conftest import attributes, output_files


def run(corpus, tmp_path, name, **kw):
    config = DedupeConfig(input_path=corpus["train"], output_path=str(tmp_path / name), use_ray=False, **kw)
    return config, dedupe_documents(config)


def representative(attrs, doc_id):
    row = attrs[doc_id]
    return doc_id if row["kept"] else row.get("duplicate_of")


def test_exact_dedupe_finds_every_exact_duplicate(corpus, tmp_path):
    config, summary = run(corpus, tmp_path, "exact", exact=ExactDedupeConfig(num_partitions=4), fuzzy=None)
    attrs = attributes(config.output_path)
    groups = defaultdict(set)
    for d in corpus["duplicates"]:
        if d["kind"] == "exact":
            groups[d["original"]].update((d["original"], d["copy"]))
    for members in groups.values():
        kept = [m for m in members if attrs[m]["kept"]]
        assert len(kept) == 1, members
        assert all(attrs[m]["reason"] == "exact" and attrs[m]["duplicate_of"] == kept[0] for m in members - {kept[0]})
    removed = [i for i, a in attrs.items() if not a["kept"]]
    assert len(removed) == sum(len(m) - 1 for m in groups.values()) == summary["removed"]["exact"]
    docs = corpus["docs"]
    assert all(normalize_exact(docs[i]) == normalize_exact(docs[attrs[i]["duplicate_of"]]) for i in removed)
    assert summary["documents_out"] == summary["documents_in"] - len(removed) == len(corpus["docs"]) - len(removed)


def test_fuzzy_dedupe_recall_and_precision(corpus, tmp_path):
    config, summary = run(corpus, tmp_path, "fuzzy", exact=None, fuzzy=MinHashConfig(threshold=0.8))
    attrs = attributes(config.output_path)
    docs = corpus["docs"]
    positives = [d for d in corpus["duplicates"] if d["jaccard"] >= 0.8]
    assert len(positives) > 800
    caught = sum(representative(attrs, d["original"]) == representative(attrs, d["copy"]) for d in positives)
    recall = caught / len(positives)
    clusters = defaultdict(list)
    for doc_id in attrs:
        clusters[representative(attrs, doc_id)].append(doc_id)
    removed = [i for i, a in attrs.items() if not a["kept"]]
    true_pos = sum(
        any(jaccard(docs[i], docs[m]) >= 0.8 for m in clusters[attrs[i]["duplicate_of"]] if m != i) for i in removed
    )
    precision = true_pos / len(removed)
    assert recall >= 0.95, recall
    assert precision >= 0.99, precision
    assert all(attrs[i]["reason"] == "fuzzy" for i in removed)
    # Planted near-duplicates well below the threshold are kept.
    low = [d for d in corpus["duplicates"] if d["jaccard"] < 0.6]
    assert sum(attrs[d["copy"]]["kept"] and attrs[d["original"]]["kept"] for d in low) >= 0.95 * len(low)
    assert summary["fuzzy"]["candidate_pairs"] > summary["fuzzy"]["verified_pairs"] > 800


def test_paragraph_dedupe_against_exact_paragraph_ground_truth(corpus, tmp_path):
    rate = 0.01
    config, summary = run(
        corpus,
        tmp_path,
        "para",
        exact=None,
        fuzzy=None,
        paragraph=ParagraphDedupeConfig(
            separator="\n\n", false_positive_rate=rate, batch_size=256, num_partitions=4, expected_items=88_000
        ),
    )
    attrs = attributes(config.output_path)
    seen, truly_repeated, false_pos, unique = set(), 0, 0, 0
    for f in find_record_files(corpus["train"]):
        for doc in read_documents(f):
            removed = set(attrs[doc["id"]].get("removed_paragraphs", []))
            if attrs[doc["id"]].get("reason") == "paragraph":
                removed = set(range(len(split_paragraphs(doc["text"], "\n\n"))))
            for i, (s, e) in enumerate(split_paragraphs(doc["text"], "\n\n")):
                key = normalize_paragraph(doc["text"][s:e])
                if key in seen:
                    truly_repeated += 1
                    assert i in removed, (doc["id"], i)  # a Bloom filter has no false negatives
                else:
                    unique += 1
                    false_pos += i in removed
                    seen.add(key)
    assert truly_repeated > 10_000
    # Sized for the ~88k distinct paragraphs, the filter ends near the configured rate; the rate measured
    # over the whole fill is lower but not zero.
    assert 80_000 < unique < 96_000
    assert 0 < false_pos / unique <= 2 * rate, false_pos / unique
    assert summary["paragraphs"]["removed"] == truly_repeated + false_pos
    # The kept text is the original minus exactly the removed paragraphs.
    out = {
        d["id"]: d["text"]
        for f in find_record_files(os.path.join(config.output_path, "documents"))
        for d in read_documents(f)
    }
    some = next(i for i, a in attrs.items() if a["kept"] and a.get("removed_paragraphs"))
    original = split_paragraphs(corpus["docs"][some], "\n\n")
    kept_paras = [
        corpus["docs"][some][s:e] for k, (s, e) in enumerate(original) if k not in attrs[some]["removed_paragraphs"]
    ]
    assert out[some] == "\n\n".join(kept_paras)


def test_decontamination_removes_every_planted_document(corpus, tmp_path):
    config, summary = run(
        corpus,
        tmp_path,
        "decon",
        exact=None,
        fuzzy=None,
        decontaminate=DecontaminationConfig(eval_paths=(corpus["eval"],)),
    )
    attrs = attributes(config.output_path)
    planted = {c["id"]: c["eval_id"] for c in corpus["contaminated"]}
    flagged = {i: a["eval_item"] for i, a in attrs.items() if a.get("reason") == "contaminated"}
    assert flagged == planted  # all planted documents, each tied to its eval item, and nothing else
    assert all(attrs[i]["eval_ngrams"] >= 1 for i in planted)
    assert summary["decontaminate"]["eval_items"] == 800 and summary["removed"]["contaminated"] == 40


def test_output_mirrors_input_and_summary_counts(corpus, tmp_path):
    inp = tmp_path / "in"
    write_records(
        str(inp / "a" / "x.parquet"),
        [{"id": "1", "text": "same text here", "meta": 1}, {"id": "2", "text": "Same  text here", "meta": 2}],
    )
    write_records(str(inp / "b.jsonl.zst"), [{"id": "3", "text": "other"}, {"id": "4", "text": "same text here"}])
    config = DedupeConfig(input_path=str(inp), output_path=str(tmp_path / "out"), use_ray=False)
    summary = dedupe_documents(config)
    out = tmp_path / "out"
    assert sorted(os.listdir(out)) == ["attributes", "documents", "summary.json"]  # _work is cleaned up
    assert list(read_documents(str(out / "documents/a/x.parquet"))) == [
        {"id": "1", "text": "same text here", "meta": 1}
    ]
    assert list(read_documents(str(out / "documents/b.jsonl.zst"))) == [{"id": "3", "text": "other"}]
    assert json.loads((out / "summary.json").read_text())["removed"]["exact"] == 2 == summary["removed"]["exact"]
    assert attributes(str(out))["4"] == {"id": "4", "kept": False, "reason": "exact", "duplicate_of": "1"}


def test_resume_redoes_only_unfinished_tasks(corpus, tmp_path, monkeypatch):
    kw = dict(paragraph=ParagraphDedupeConfig(), decontaminate=DecontaminationConfig(eval_paths=(corpus["eval"],)))
    reference, _ = run(corpus, tmp_path, "clean", **kw)
    real_write, real_map = pipeline.write_shard, pipeline.map_shard

    def crash_on_shard_5(config, shard, work, eval_ids):
        if shard.index == 5:
            raise OSError("disk full")
        return real_write(config, shard, work, eval_ids)

    monkeypatch.setattr(pipeline, "write_shard", crash_on_shard_5)
    with pytest.raises(TaskFailed, match="dedupe/write task 5 of 16 failed: OSError: disk full"):
        run(corpus, tmp_path, "resumed", **kw)
    work = tmp_path / "resumed" / "_work"
    assert sorted(os.listdir(work / "written")) == [f"{i:05d}.json" for i in range(5)]

    mapped, written = [], []

    def spy_map(config, shard, work_dir):
        if not os.path.exists(os.path.join(work_dir, "map", f"{shard.index:05d}", "meta.json")):
            mapped.append(shard.index)
        return real_map(config, shard, work_dir)

    def spy_write(config, shard, work_dir, eval_ids):
        if not os.path.exists(os.path.join(work_dir, "written", f"{shard.index:05d}.json")):
            written.append(shard.index)
        return real_write(config, shard, work_dir, eval_ids)

    monkeypatch.setattr(pipeline, "map_shard", spy_map)
    monkeypatch.setattr(pipeline, "write_shard", spy_write)
    run(corpus, tmp_path, "resumed", **kw)
    assert mapped == [] and written == list(range(5, 16))  # only the unfinished tasks ran again
    assert not work.exists()
    assert output_files(tmp_path / "resumed") == output_files(reference.output_path)


def test_malformed_input_errors_name_file_and_line_or_are_skipped(tmp_path):
    inp = tmp_path / "in"
    inp.mkdir()
    (inp / "s.jsonl").write_text(
        '{"id": "a", "text": "fine text"}\n{"id": "b", "txt": "oops"}\n{"id": "c", "text": "more text"}\n'
    )
    config = DedupeConfig(input_path=str(inp), output_path=str(tmp_path / "out"), use_ray=False)
    with pytest.raises(TaskFailed, match=r"s\.jsonl:2: missing required field 'text'"):
        dedupe_documents(config)
    summary = dedupe_documents(
        DedupeConfig(input_path=str(inp), output_path=str(tmp_path / "out2"), use_ray=False, on_error="skip")
    )
    assert summary["skipped_malformed"] == 1 and summary["documents_out"] == 2
    with pytest.raises(FileNotFoundError, match="nothing: no such file or directory"):
        dedupe_documents(
            DedupeConfig(input_path=str(tmp_path / "nothing"), output_path=str(tmp_path / "o3"), use_ray=False)
        )
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no record files"):
        dedupe_documents(
            DedupeConfig(input_path=str(tmp_path / "empty"), output_path=str(tmp_path / "o4"), use_ray=False)
        )


def test_config_errors_name_field_and_value():
    with pytest.raises(ValueError, match=r"MinHashConfig.bands must be >= 1, got 0"):
        MinHashConfig(bands=0)
    with pytest.raises(ValueError, match=r"MinHashConfig.threshold must be in \(0, 1\], got 1.5"):
        MinHashConfig(threshold=1.5)
    with pytest.raises(ValueError, match="false_positive_rate must be in"):
        ParagraphDedupeConfig(false_positive_rate=0)
    with pytest.raises(ValueError, match=r"eval_paths must be a non-empty tuple of paths, got .evals/."):
        DecontaminationConfig(eval_paths="evals/")
    with pytest.raises(ValueError, match="enable at least one"):
        DedupeConfig(input_path="x", output_path="y", exact=None, fuzzy=None)
    with pytest.raises(ValueError, match="on_error must be 'raise' or 'skip', got 'ignore'"):
        DedupeConfig(input_path="x", output_path="y", on_error="ignore")
