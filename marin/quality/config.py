"""Configuration of the quality steps: train a fastText classifier, score documents, filter by score.

The DCLM recipe as an experiment declares it (``experiments/defaults`` wraps these)::

    model = TrainClassifierConfig(datasets={"hq": (reference,), "web": (extracted / "documents",)}, ...)
    scores = ClassifyConfig(input_path=extracted / "documents", model_path=model_step, attribute="quality", ...)
    kept = FilterConfig(input_path=extracted / "documents", attribute_paths=(scores_step,),
                        rules=(AttributeRule(attribute="quality", label="hq", top_percent=10),), ...)

``max_workers`` and ``use_ray`` never change a result; fastText trains with one thread (``thread=1``)
because its lock-free multi-threaded SGD is not reproducible.
"""

from __future__ import annotations

import dataclasses

from marin.identity import runtime_field
from marin.validation import check, concrete


@dataclasses.dataclass(frozen=True, kw_only=True)
class FastTextConfig:
    """fastText supervised-training hyperparameters (names as in fastText, snake-cased)."""

    epoch: int = 5
    lr: float = 0.1
    dim: int = 64
    word_ngrams: int = 2
    """Word n-grams as features (DCLM's quality classifier uses bigrams)."""
    minn: int = 0
    maxn: int = 0
    """Character n-gram lengths; 0/0 for quality, e.g. 2/4 for language identification."""
    min_count: int = 1
    bucket: int = 200_000
    """Hash buckets for n-grams; with ``dim`` it sets the model size (bucket x dim x 4 bytes)."""
    seed: int = 0

    def __post_init__(self):
        for field in ("epoch", "dim", "word_ngrams", "min_count", "bucket"):
            check("FastTextConfig", field, getattr(self, field), lambda v: v >= 1, ">= 1")
        check("FastTextConfig", "lr", self.lr, lambda v: v > 0, "> 0")
        check("FastTextConfig", "maxn", self.maxn, lambda v: v == 0 or v >= self.minn, "0 or >= minn")


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainClassifierConfig:
    datasets: dict[str, tuple[str, ...]]
    """Label -> record files, directories or globs of documents with that label (e.g. ``hq`` -> reference
    text, ``web`` -> random web text). Labels are letters, digits, ``_`` and ``-``."""
    output_path: str
    max_docs_per_label: int | None = 20_000
    """Documents sampled per label (a seeded uniform sample; None takes all)."""
    holdout_fraction: float = 0.1
    """Share of each label's sample held out for the precision/recall in metrics.json."""
    max_chars: int = 5_000
    """Characters of each document used (its start), in training as in inference."""
    fasttext: FastTextConfig = FastTextConfig()
    text_field: str = "text"
    seed: int = 0

    def __post_init__(self):
        known, datasets = concrete(self.datasets)
        if known:
            if not isinstance(datasets, dict) or len(datasets) < 2:
                raise ValueError(
                    f"TrainClassifierConfig.datasets must map at least two labels to paths, got {datasets!r}"
                )
            for label in datasets:
                if not label.replace("_", "").replace("-", "").isalnum():
                    raise ValueError(f"TrainClassifierConfig.datasets: label {label!r} must be letters, digits, _ or -")
        check("TrainClassifierConfig", "holdout_fraction", self.holdout_fraction, lambda v: 0 < v < 1, "in (0, 1)")
        check("TrainClassifierConfig", "max_chars", self.max_chars, lambda v: v >= 1, ">= 1")
        check(
            "TrainClassifierConfig",
            "max_docs_per_label",
            self.max_docs_per_label,
            lambda v: v is None or v >= 10,
            ">= 10 or None",
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClassifyConfig:
    input_path: str
    """Documents: a record file, a directory of them (recursive) or a glob."""
    model_path: str
    """A fastText ``.bin`` file, or a training step's output directory (its ``model.bin``)."""
    output_path: str
    attribute: str = "quality"
    """Name of this attribute in the rows: ``{"id": ..., "<attribute>": {"<label>": score, ...}}``."""
    max_chars: int = 5_000
    """Characters of each document scored (its start); match the training step's ``max_chars``."""
    text_field: str = "text"
    batch_docs: int = runtime_field(2_000)
    """Documents per ``predict`` call (memory vs. call overhead; no effect on the scores)."""
    max_workers: int | None = runtime_field(None)
    """Ray tasks in flight at once (None: as many as the cluster has CPUs). No effect on the result."""
    use_ray: bool = runtime_field(True)

    def __post_init__(self):
        check("ClassifyConfig", "attribute", self.attribute, lambda v: v.isidentifier(), "an identifier")
        check("ClassifyConfig", "max_chars", self.max_chars, lambda v: v >= 1, ">= 1")
        check("ClassifyConfig", "batch_docs", self.batch_docs, lambda v: v >= 1, ">= 1")


@dataclasses.dataclass(frozen=True, kw_only=True)
class AttributeRule:
    """Keep a document when ``<attribute>[<label>]`` passes: at least ``min_score``, at most ``max_score``,
    and/or among the ``top_percent`` highest scores of the whole input (ties at the cut are kept)."""

    attribute: str
    label: str
    min_score: float | None = None
    max_score: float | None = None
    top_percent: float | None = None

    def __post_init__(self):
        if self.min_score is None and self.max_score is None and self.top_percent is None:
            raise ValueError(f"AttributeRule({self.attribute}.{self.label}): set min_score, max_score or top_percent")
        check(
            "AttributeRule", "top_percent", self.top_percent, lambda v: v is None or 0 < v <= 100, "in (0, 100] or None"
        )

    @property
    def name(self) -> str:
        """The drop reason this rule writes, e.g. ``quality.hq<0.5`` or ``quality.hq:top10%``."""
        parts = []
        if self.min_score is not None:
            parts.append(f"<{self.min_score:g}")
        if self.max_score is not None:
            parts.append(f">{self.max_score:g}")
        if self.top_percent is not None:
            parts.append(f":top{self.top_percent:g}%")
        return f"{self.attribute}.{self.label}{'|'.join(parts)}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class FilterConfig:
    input_path: str
    """Documents (the same files the attribute steps scored)."""
    attribute_paths: tuple[str, ...]
    """Output directories of classify steps; their ``attributes/`` trees mirror the documents."""
    output_path: str
    rules: tuple[AttributeRule, ...]
    """All must pass; a dropped document's reason is the first rule it fails."""
    max_workers: int | None = runtime_field(None)
    """Ray tasks in flight at once (None: as many as the cluster has CPUs). No effect on the result."""
    use_ray: bool = runtime_field(True)

    def __post_init__(self):
        known, rules = concrete(self.rules)
        if known and not rules:
            raise ValueError("FilterConfig.rules must hold at least one AttributeRule")
        known, paths = concrete(self.attribute_paths)
        if known and not paths:
            raise ValueError("FilterConfig.attribute_paths must name at least one classify step's output")
