"""Dedupe on Ray: the result does not depend on the number of workers (or batch size), and the step runs
under the executor after the corpus step, with nested Ray tasks."""

import json
import os

import pytest

from marin.corpus import CorpusConfig, generate_corpus
from marin.dedupe import DecontaminationConfig, DedupeConfig, ParagraphDedupeConfig, dedupe_documents
from marin.execution import Executor, ExecutorStep, this_output_path, versioned
from tests.dedupe.conftest import attributes, output_files

pytestmark = pytest.mark.usefixtures("ray_address")


def all_methods(corpus, out, **kw):
    return DedupeConfig(
        input_path=corpus["train"] + "/stories",
        output_path=out,
        paragraph=ParagraphDedupeConfig(),
        decontaminate=DecontaminationConfig(eval_paths=(corpus["eval"],)),
        **kw,
    )


def test_result_does_not_depend_on_workers(corpus, tmp_path):
    local = dedupe_documents(all_methods(corpus, str(tmp_path / "local"), use_ray=False))
    on_ray = dedupe_documents(all_methods(corpus, str(tmp_path / "ray"), use_ray=True, max_workers=3, batch_docs=333))
    assert output_files(tmp_path / "local") == output_files(tmp_path / "ray")
    local.pop("seconds"), on_ray.pop("seconds")
    assert local == on_ray
    assert all(local["removed"][k] > 0 for k in ("exact", "fuzzy", "contaminated", "paragraph"))


def test_corpus_then_dedupe_under_the_executor(tmp_path):
    corpus = ExecutorStep(
        name="raw/corpus",
        fn=generate_corpus,
        config=CorpusConfig(
            output_path=this_output_path(), train_docs_per_domain=versioned(300), eval_items_per_task=versioned(40)
        ),
    )
    dedup = ExecutorStep(
        name="dedupe/corpus",
        fn=dedupe_documents,
        config=DedupeConfig(
            input_path=corpus / "train",
            output_path=this_output_path(),
            decontaminate=DecontaminationConfig(eval_paths=(corpus / "eval",), ngram=versioned(13)),
            max_workers=2,
        ),
    )
    result = Executor(prefix=str(tmp_path / "store")).run([dedup])
    out = result.plan.steps[-1].output_path
    summary = json.load(open(os.path.join(out, "summary.json")))
    assert summary["removed"]["contaminated"] == 40 and summary["removed"]["exact"] > 0
    assert len(attributes(out)) == summary["documents_in"]
    assert sorted(os.listdir(os.path.join(out, "documents"))) == ["arithmetic", "stories"]
