"""One small corpus with web pages (every page kind planted) for the extract and quality tests."""

import os

import pytest

from marin.corpus import CorpusConfig, generate_corpus
from marin.storage.records import read_records

WEB_SMALL = {
    "train_docs_per_domain": 60,
    "validation_docs_per_domain": 10,
    "train_shards_per_domain": 1,
    "eval_items_per_task": 20,
    "contaminated_docs_per_task": 1,
    "web_pages_per_domain": 400,
    "web_shards_per_domain": 3,
    "reference_docs_per_domain": 300,
    "langid_docs_per_language": 200,
}


@pytest.fixture(scope="session")
def web_corpus(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("web-corpus"))
    generate_corpus(CorpusConfig(output_path=root, **WEB_SMALL))
    truth = {row["id"]: row for row in read_records(os.path.join(root, "ground_truth", "web_pages.jsonl.gz"))}
    return {"root": root, "web": os.path.join(root, "web"), "truth": truth}


def tree_bytes(root, *subdirs):
    """Relative path -> bytes of every file under ``root/<subdir>`` (what must not depend on workers)."""
    out = {}
    for sub in subdirs:
        for dirpath, _, names in os.walk(os.path.join(root, sub)):
            for name in names:
                path = os.path.join(dirpath, name)
                with open(path, "rb") as f:
                    out[os.path.relpath(path, root)] = f.read()
    return out
