"""Quality and language classifiers on the bundled web pages: training reports held-out precision/recall,
scores separate the planted high- and low-quality pages, attribute files line up with their shards (also
after a kill and resume), the filter keeps exactly what an independent recomputation keeps, a rerun does
nothing, and no worker count changes any output."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from marin.quality import AttributeRule, ClassifyConfig, FilterConfig, classify_documents, filter_documents
from marin.storage.records import write_records
from tests.extract.conftest import tree_bytes
from tests.quality.conftest import rows_by_file


def scores_by_id(attr_dir, attribute):
    return {
        row["id"]: row[attribute]
        for rows in rows_by_file(os.path.join(attr_dir, "attributes")).values()
        for row in rows
    }


def test_training_reports_held_out_precision_and_recall(quality_model, lid_model):
    _, metrics = quality_model
    assert metrics["labels"] == ["hq", "web"] and metrics["documents"]["hq"]["holdout"] == 60
    for label in ("hq", "web"):
        assert set(metrics["held_out"]["labels"][label]) == {"precision", "recall", "f1", "support"}
    # Reference text vs random web text: the "web" side is 60% ordinary articles, so the held-out task itself
    # is noisy; what must hold is that reference documents are recognised (measured recall 0.93-0.97).
    assert metrics["held_out"]["labels"]["hq"]["recall"] >= 0.85
    _, lid = lid_model
    # Five languages with their own spelling and function words: measured 1.0 on held-out samples.
    assert lid["held_out"]["accuracy"] >= 0.97
    assert all(m["precision"] >= 0.95 and m["recall"] >= 0.95 for m in lid["held_out"]["labels"].values())


def test_scores_separate_planted_high_and_low_quality_pages(web_corpus, extracted, quality_model, lid_model, tmp_path):
    # The classifier never saw these pages (it trained on quality/reference and quality/web_sample).
    quality = classify_documents(
        ClassifyConfig(
            input_path=extracted, model_path=quality_model[0], output_path=str(tmp_path / "q"), use_ray=False
        )
    )
    lang = classify_documents(
        ClassifyConfig(
            input_path=extracted,
            model_path=lid_model[0],
            attribute="lang",
            output_path=str(tmp_path / "l"),
            use_ray=False,
        )
    )
    assert quality["labels"] == ["hq", "web"] and lang["labels"] == ["de", "en", "es", "fr", "it"]
    truth = web_corpus["truth"]
    hq = scores_by_id(tmp_path / "q", "quality")
    english = [pid for pid in hq if truth[pid]["lang"] == "en"]
    predicted = {pid for pid in english if hq[pid]["hq"] >= 0.3}
    planted = {pid for pid in english if truth[pid]["quality"] == "high"}
    precision, recall = len(predicted & planted) / len(predicted), len(predicted & planted) / len(planted)
    # Measured 1.0 / 1.0 here (0.99 / 0.99 on the default 1,000-page corpus): low-quality pages score under
    # 0.3 because nothing like them is in the reference set, articles ~0.55 because they are in both sets.
    assert precision >= 0.95 and recall >= 0.95, (precision, recall)
    high = np.array([hq[pid]["hq"] for pid in planted])
    low = np.array([hq[pid]["hq"] for pid in english if truth[pid]["quality"] == "low"])
    assert (high[:, None] > low[None, :]).mean() >= 0.99  # ROC AUC: the ranking, whatever the threshold
    langs = scores_by_id(tmp_path / "l", "lang")
    wrong = [
        (truth[pid]["kind"], truth[pid]["lang"], max(s, key=s.get))
        for pid, s in langs.items()
        if max(s, key=s.get) != truth[pid]["lang"]
    ]
    assert len(wrong) <= 0.02 * len(langs), wrong


def test_filter_keeps_exactly_what_the_attributes_say(extracted, quality_model, lid_model, tmp_path):
    q, lang = str(tmp_path / "q"), str(tmp_path / "l")
    classify_documents(ClassifyConfig(input_path=extracted, model_path=quality_model[0], output_path=q, use_ray=False))
    classify_documents(
        ClassifyConfig(input_path=extracted, model_path=lid_model[0], attribute="lang", output_path=lang, use_ray=False)
    )
    rules = (
        AttributeRule(attribute="lang", label="en", min_score=0.5),
        AttributeRule(attribute="quality", label="hq", top_percent=40),
    )
    out = str(tmp_path / "f")
    summary = filter_documents(
        FilterConfig(input_path=extracted, attribute_paths=(q, lang), output_path=out, rules=rules, use_ray=False)
    )
    # Independent recomputation from the attribute files.
    hq, en = scores_by_id(q, "quality"), scores_by_id(lang, "lang")
    ranked = np.sort([s["hq"] for s in hq.values()])[::-1]
    cut = ranked[int(np.ceil(len(ranked) * 0.4)) - 1]
    expected, reasons = set(), {}
    for pid in hq:
        if en[pid]["en"] < 0.5:
            reasons["lang.en<0.5"] = reasons.get("lang.en<0.5", 0) + 1
        elif hq[pid]["hq"] < cut:
            reasons["quality.hq:top40%"] = reasons.get("quality.hq:top40%", 0) + 1
        else:
            expected.add(pid)
    kept = {d["id"] for rows in rows_by_file(os.path.join(out, "documents")).values() for d in rows}
    assert kept == expected and summary["documents_out"] == len(expected)
    assert summary["dropped"] == reasons and summary["rules"][1]["threshold"] == pytest.approx(cut)
    decisions = [r for rows in rows_by_file(os.path.join(out, "decisions")).values() for r in rows]
    assert {r["id"] for r in decisions if r["kept"]} == expected and len(decisions) == len(hq)


def test_worker_count_changes_nothing_and_rerun_is_a_no_op(extracted, quality_model, tmp_path, ray_address):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    classify_documents(
        ClassifyConfig(input_path=extracted, model_path=quality_model[0], output_path=a, use_ray=False, batch_docs=7)
    )
    classify_documents(ClassifyConfig(input_path=extracted, model_path=quality_model[0], output_path=b, max_workers=3))
    assert tree_bytes(a, "attributes") == tree_bytes(b, "attributes")
    rules = (AttributeRule(attribute="quality", label="hq", min_score=0.3),)
    fa, fb = str(tmp_path / "fa"), str(tmp_path / "fb")
    filter_documents(
        FilterConfig(input_path=extracted, attribute_paths=(a,), output_path=fa, rules=rules, use_ray=False)
    )
    filter_documents(
        FilterConfig(input_path=extracted, attribute_paths=(b,), output_path=fb, rules=rules, max_workers=2)
    )
    assert tree_bytes(fa, "documents", "decisions") == tree_bytes(fb, "documents", "decisions")
    stamps = {p: os.stat(os.path.join(a, p)).st_mtime_ns for p in [*tree_bytes(a, "attributes"), "summary.json"]}
    classify_documents(ClassifyConfig(input_path=extracted, model_path=quality_model[0], output_path=a, use_ray=False))
    assert {p: os.stat(os.path.join(a, p)).st_mtime_ns for p in stamps} == stamps


KILL_AFTER_TWO_SHARDS = textwrap.dedent("""
    import os, signal, sys
    import marin.quality.classify as classify
    original, calls = classify.classify_shard, []
    def dying(*args):
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        calls.append(1)
        return original(*args)
    classify.classify_shard = dying
    classify.classify_documents(classify.ClassifyConfig(input_path=sys.argv[1], model_path=sys.argv[2],
                                                        output_path=sys.argv[3], use_ray=False))
""")


def test_attribute_files_line_up_after_a_kill_and_resume(extracted, quality_model, tmp_path):
    out = str(tmp_path / "killed")
    proc = subprocess.run(
        [sys.executable, "-c", KILL_AFTER_TWO_SHARDS, extracted, quality_model[0], out],
        check=False,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == -9, proc.stderr
    finished = tree_bytes(out, "attributes")
    assert len(finished) == 2 and not os.path.exists(os.path.join(out, "summary.json"))
    stamps = {p: os.stat(os.path.join(out, p)).st_mtime_ns for p in finished}
    summary = classify_documents(
        ClassifyConfig(input_path=extracted, model_path=quality_model[0], output_path=out, use_ray=False)
    )
    assert {p: os.stat(os.path.join(out, p)).st_mtime_ns for p in stamps} == stamps  # not redone
    docs = rows_by_file(extracted)
    attrs = rows_by_file(os.path.join(out, "attributes"))
    assert docs.keys() == attrs.keys() and summary["files"] == len(docs)
    for rel, rows in docs.items():
        assert [d["id"] for d in rows] == [a["id"] for a in attrs[rel]], rel
    fresh = str(tmp_path / "fresh")
    classify_documents(
        ClassifyConfig(input_path=extracted, model_path=quality_model[0], output_path=fresh, use_ray=False)
    )
    assert tree_bytes(out, "attributes") == tree_bytes(fresh, "attributes")


def test_misaligned_attributes_are_an_error_naming_the_file(tmp_path):
    write_records(str(tmp_path / "docs" / "a.jsonl.gz"), [{"id": "x", "text": "one"}, {"id": "y", "text": "two"}])
    write_records(
        str(tmp_path / "attrs" / "attributes" / "a.jsonl.gz"),
        [{"id": "x", "quality": {"hq": 0.9}}, {"id": "z", "quality": {"hq": 0.1}}],
    )
    with pytest.raises(Exception, match=r"a\.jsonl\.gz:2: attribute rows do not line up .* 'y', attribute id 'z'"):
        filter_documents(
            FilterConfig(
                input_path=str(tmp_path / "docs"),
                attribute_paths=(str(tmp_path / "attrs"),),
                output_path=str(tmp_path / "out"),
                use_ray=False,
                rules=(AttributeRule(attribute="quality", label="hq", min_score=0.5),),
            )
        )
    with pytest.raises(ValueError, match="set min_score, max_score or top_percent"):
        AttributeRule(attribute="quality", label="hq")
