"""The training step: ``train_classifier(TrainClassifierConfig)`` fits a fastText classifier on labelled sets.

The DCLM recipe: positives are high-quality reference text, negatives random web text; the classifier
learns what separates them, and the filter keeps the web documents that look most like the reference.
The same step trains a language identifier from per-language samples (labels ``en``, ``de``, ...).

Each label's documents are a seeded uniform sample (reservoir sampling, so any input size streams through
in bounded memory); a ``holdout_fraction`` of every label is held out. Output::

    <output_path>/model.bin        the fastText model
    <output_path>/metrics.json     per label on the held-out documents: precision, recall, f1, support;
                                   accuracy; documents used; the config fingerprint
"""

from __future__ import annotations

import json
import logging
import os
import random
import tempfile
import time

from marin.quality.config import TrainClassifierConfig
from marin.quality.model import LABEL_PREFIX, fasttext_line, predict_scores, train_fasttext
from marin.storage import join, write_atomic
from marin.storage.records import RECORD_SUFFIXES, read_records
from marin.storage.shards import fingerprint_of, finished_summary, list_shards

logger = logging.getLogger(__name__)
METRICS = "metrics.json"
MODEL = "model.bin"


def sample_label(label: str, paths: tuple[str, ...], config: TrainClassifierConfig) -> tuple[list[str], int]:
    """(a seeded uniform sample of at most ``max_docs_per_label`` fastText lines, documents seen)."""
    rng = random.Random(f"{config.seed}-{label}")
    cap = config.max_docs_per_label
    sample: list[str] = []
    seen = 0
    for path in paths:
        for shard in list_shards(path, suffixes=RECORD_SUFFIXES, field=f"TrainClassifierConfig.datasets[{label!r}]"):
            for doc in read_records(shard.url, required=(config.text_field,)):
                line = fasttext_line(str(doc[config.text_field]), config.max_chars)
                if not line:
                    continue
                seen += 1
                if cap is None or len(sample) < cap:
                    sample.append(line)
                elif (j := rng.randrange(seen)) < cap:
                    sample[j] = line
    if len(sample) < 10:
        raise ValueError(
            f"TrainClassifierConfig.datasets[{label!r}]: {len(sample)} non-empty documents under "
            f"{paths}; need at least 10"
        )
    rng.shuffle(sample)
    return sample, seen


def held_out_metrics(model, holdout: list[tuple[str, str]], labels: list[str]) -> dict:
    """Precision, recall and F1 per label of the argmax prediction on ``holdout`` ((label, line) pairs)."""
    scores = predict_scores(model, [line for _, line in holdout])
    predicted = [max(s, key=s.get) for s in scores]
    out = {}
    for label in labels:
        tp = sum(p == label and t == label for (t, _), p in zip(holdout, predicted, strict=True))
        n_pred = sum(p == label for p in predicted)
        n_true = sum(t == label for t, _ in holdout)
        precision = tp / n_pred if n_pred else 0.0
        recall = tp / n_true if n_true else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        out[label] = {
            "precision": round(precision, 4),
            "recall": round(recall, 4),
            "f1": round(f1, 4),
            "support": n_true,
        }
    accuracy = sum(p == t for (t, _), p in zip(holdout, predicted, strict=True)) / len(holdout)
    return {"labels": out, "accuracy": round(accuracy, 4)}


def train_classifier(config: TrainClassifierConfig) -> dict:
    """Sample, train, evaluate on the held-out documents; returns the metrics (also metrics.json)."""
    start = time.monotonic()
    fingerprint = fingerprint_of(config)
    done = finished_summary(join(config.output_path, METRICS), fingerprint)
    if done is not None:
        return done
    labels = sorted(config.datasets)
    train, holdout, counts = [], [], {}
    for label in labels:
        sample, seen = sample_label(label, tuple(config.datasets[label]), config)
        cut = max(1, round(len(sample) * config.holdout_fraction))
        holdout += [(label, line) for line in sample[:cut]]
        train += [f"{LABEL_PREFIX}{label} {line}" for line in sample[cut:]]
        counts[label] = {"seen": seen, "train": len(sample) - cut, "holdout": cut}
    random.Random(config.seed).shuffle(train)  # SGD sees the labels interleaved
    with tempfile.TemporaryDirectory(prefix="marin-fasttext-") as tmp:
        train_file = os.path.join(tmp, "train.txt")
        with open(train_file, "w", encoding="utf-8") as f:
            f.write("\n".join(train) + "\n")
        model = train_fasttext(train_file, config.fasttext)
        model_file = os.path.join(tmp, MODEL)
        model.save_model(model_file)
        with open(model_file, "rb") as f:
            write_atomic(join(config.output_path, MODEL), f.read())
    metrics = {
        "fingerprint": fingerprint,
        "labels": labels,
        "documents": counts,
        "held_out": held_out_metrics(model, holdout, labels),
        "seconds": round(time.monotonic() - start, 3),
    }
    write_atomic(join(config.output_path, METRICS), json.dumps(metrics, indent=2))
    logger.info("train_classifier: %s; held-out %s", counts, metrics["held_out"])
    return metrics
