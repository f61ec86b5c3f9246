"""The web corpus of tests/extract, extracted once, and the classifiers trained on it."""

import os

import pytest

from marin.extract import ExtractConfig, extract_pages
from marin.quality import FastTextConfig, TrainClassifierConfig, train_classifier
from marin.storage.records import read_records
from tests.extract.conftest import web_corpus  # noqa: F401 (a fixture)

SMALL_MODEL = FastTextConfig(epoch=10, dim=16, bucket=20_000, word_ngrams=1)
LID_MODEL = FastTextConfig(epoch=20, lr=0.5, dim=16, bucket=50_000, minn=2, maxn=4, word_ngrams=1)


@pytest.fixture(scope="session")
def extracted(web_corpus, tmp_path_factory):  # noqa: F811
    out = str(tmp_path_factory.mktemp("extracted"))
    extract_pages(ExtractConfig(input_path=web_corpus["web"], output_path=out, use_ray=False))
    return os.path.join(out, "documents")


@pytest.fixture(scope="session")
def quality_model(web_corpus, tmp_path_factory):  # noqa: F811
    root = web_corpus["root"]
    out = str(tmp_path_factory.mktemp("quality-model"))
    metrics = train_classifier(
        TrainClassifierConfig(
            datasets={
                "hq": (os.path.join(root, "quality", "reference"),),
                "web": (os.path.join(root, "quality", "web_sample"),),
            },
            output_path=out,
            fasttext=SMALL_MODEL,
        )
    )
    return out, metrics


@pytest.fixture(scope="session")
def lid_model(web_corpus, tmp_path_factory):  # noqa: F811
    root = web_corpus["root"]
    out = str(tmp_path_factory.mktemp("lid-model"))
    langs = ("de", "en", "es", "fr", "it")
    metrics = train_classifier(
        TrainClassifierConfig(
            datasets={lang: (os.path.join(root, "langid", f"{lang}.jsonl.gz"),) for lang in langs},
            output_path=out,
            fasttext=LID_MODEL,
        )
    )
    return out, metrics


def rows_by_file(root):
    """Relative path -> list of rows of every record file under ``root``."""
    out = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            if name.endswith(".jsonl.gz"):
                path = os.path.join(dirpath, name)
                out[os.path.relpath(path, root)] = list(read_records(path))
    return out
