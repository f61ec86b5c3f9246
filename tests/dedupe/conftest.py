"""One generated corpus for all dedupe tests, and helpers to read a dedupe output back."""

import os

import pytest

from marin.corpus import CorpusConfig, generate_corpus, load_ground_truth
from marin.storage.records import find_record_files, read_documents, read_records


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("dedupe-corpus"))
    generate_corpus(CorpusConfig(output_path=root))
    docs = {d["id"]: d["text"] for f in find_record_files(os.path.join(root, "train")) for d in read_documents(f)}
    duplicates, contaminated = load_ground_truth(root)
    return {
        "root": root,
        "train": os.path.join(root, "train"),
        "eval": os.path.join(root, "eval"),
        "docs": docs,
        "duplicates": duplicates,
        "contaminated": contaminated,
    }


def attributes(output_path):
    """id -> attribute row, over every attribute file of a dedupe output."""
    rows = {}
    for f in find_record_files(os.path.join(output_path, "attributes")):
        for row in read_records(f):
            rows[row["id"]] = row
    return rows


def output_files(output_path):
    """Relative path -> bytes of every document and attribute file (what must not depend on workers)."""
    out = {}
    for sub in ("documents", "attributes"):
        for dirpath, _, names in os.walk(os.path.join(output_path, sub)):
            for name in names:
                path = os.path.join(dirpath, name)
                out[os.path.relpath(path, output_path)] = open(path, "rb").read()
    return out
