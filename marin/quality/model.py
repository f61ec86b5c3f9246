"""fastText behind three functions: turn a document into a fastText line, train, and score many texts.

    line = fasttext_line(doc["text"], max_chars=5000)      # one line, whitespace collapsed
    model = train_fasttext(path_to_labelled_lines, FastTextConfig())
    scores = predict_scores(model, lines)                  # [{"hq": 0.93, "web": 0.07}, ...]

The binding is ``fasttext-community`` (upstream fastText's C++, maintained, with wheels). Models load once per
worker process (``load_model`` caches by URL), from any fsspec URL: fastText reads only local files, so a
remote model is copied to a local temporary file first.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from operator import itemgetter

import numpy as np

from marin.quality.config import FastTextConfig
from marin.storage import filesystem, is_local, local_path, read_bytes

LABEL_PREFIX = "__label__"
_MODELS: dict[str, object] = {}


def fasttext_line(text: str, max_chars: int) -> str:
    """The document as fastText reads it: its first ``max_chars`` characters, lower-cased, on one line
    (fastText splits words on whitespace itself; only a newline would end the line). Kept to two C-level
    string operations: this runs once per document and must stay cheap next to ``predict``."""
    return text[:max_chars].lower().replace("\n", " ")


def train_fasttext(train_file: str, config: FastTextConfig):
    """A supervised model trained on ``train_file`` (local; lines ``__label__<l> <text>``), single-threaded."""
    import fasttext

    return fasttext.train_supervised(
        input=train_file,
        epoch=config.epoch,
        lr=config.lr,
        dim=config.dim,
        wordNgrams=config.word_ngrams,
        minn=config.minn,
        maxn=config.maxn,
        minCount=config.min_count,
        bucket=config.bucket,
        seed=config.seed,
        thread=1,
        verbose=0,
    )


def load_model(url: str):
    """The fastText model at ``url`` (cached per process, keyed by URL, size and modification stamp, so a
    model rewritten at the same URL is loaded again)."""
    import fasttext

    fs, path = filesystem(url)
    info = fs.info(path)
    stamp = info.get("mtime") or info.get("etag") or info.get("generation") or info.get("updated")
    key = f"{url}|{info.get('size')}|{stamp}"
    if key not in _MODELS:
        if is_local(url):
            path = local_path(url)
        else:
            data = read_bytes(url)
            path = os.path.join(tempfile.gettempdir(), f"marin-fasttext-{hashlib.sha256(data).hexdigest()[:16]}.bin")
            if not os.path.exists(path):
                with open(path + ".tmp", "wb") as f:
                    f.write(data)
                os.replace(path + ".tmp", path)
        _MODELS[key] = fasttext.load_model(path)
    return _MODELS[key]


def model_labels(model) -> list[str]:
    """The model's labels without fastText's ``__label__`` prefix, in the model's order."""
    return [label.removeprefix(LABEL_PREFIX) for label in model.get_labels()]


def predict_scores(model, lines: list[str]) -> list[dict[str, float]]:
    """Probability of every label for each line, keys sorted (rounded to 6 digits, so output bytes are stable)."""
    if not lines:
        return []
    labels, probs = model.predict(lines, k=-1)
    values = np.minimum(np.asarray(probs, dtype=np.float64), 1.0).round(6).tolist()  # one C call, not one per row
    layouts: dict[tuple[str, ...], tuple[list[str], Callable]] = {}  # fastText orders labels by score: few orders
    scores = []
    for names, row in zip(labels, values, strict=True):
        key = tuple(names)
        if key not in layouts:
            layouts[key] = _sorted_layout(key)
        sorted_names, pick = layouts[key]
        scores.append(dict(zip(sorted_names, pick(row), strict=True)))
    return scores


def _sorted_layout(names: tuple[str, ...]) -> tuple[list[str], Callable]:
    """For one order of fastText's labels: the names sorted, prefix cut, and a getter of a row in that order."""
    order = sorted(range(len(names)), key=names.__getitem__)
    pick = itemgetter(*order) if len(order) > 1 else (lambda row: row[:1])
    return [names[i].removeprefix(LABEL_PREFIX) for i in order], pick
