"""Configuration of the dedupe step: which methods run, and their parameters.

A ``DedupeConfig`` with every method on, as an experiment would declare it::

    DedupeConfig(
        input_path=output_path_of(download, "train"),
        output_path=this_output_path(),
        exact=versioned(ExactDedupeConfig()),
        fuzzy=versioned(MinHashConfig(threshold=0.8, bands=20, rows=6)),
        paragraph=versioned(ParagraphDedupeConfig(false_positive_rate=1e-3)),
        decontaminate=DecontaminationConfig(eval_paths=(output_path_of(corpus, "eval"),), ngram=versioned(13)),
    )

(A config holding another step's path is not wrapped in ``versioned`` as a whole; the path already
counts for identity, and its other fields are versioned one by one.)

A method set to None does not run. ``max_workers`` and ``use_ray`` only change how the work is spread,
never the result, so they are not part of a step's identity.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from marin.validation import check


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExactDedupeConfig:
    """Drop documents whose normalized text (``marin.dedupe.text.normalize_exact``) repeats an earlier one."""

    num_partitions: int = 16
    """Hash partitions reduced in parallel. Does not change the result."""

    def __post_init__(self):
        check("ExactDedupeConfig", "num_partitions", self.num_partitions, lambda v: v >= 1, ">= 1")


@dataclasses.dataclass(frozen=True, kw_only=True)
class MinHashConfig:
    """Fuzzy document dedupe: MinHash signatures, LSH banding, then exact verification of candidates.

    A pair with Jaccard similarity J becomes a candidate with probability ``1 - (1 - J^rows)^bands``.
    The defaults (20 bands of 6 rows, 120 permutations) make that 0.998 at J = 0.8 and 0.27 at J = 0.5;
    with ``verify`` the candidates below ``threshold`` are then dropped by computing their exact
    Jaccard, so precision does not depend on the banding.
    """

    shingle_size: int = 5
    """Words per shingle."""
    bands: int = 20
    rows: int = 6
    """Signature values per band; the signature has ``bands * rows`` permutations."""
    threshold: float = 0.8
    """Jaccard similarity at or above which two documents are near-duplicates."""
    verify: bool = True
    """Compute the exact Jaccard of every LSH candidate pair and keep only pairs >= threshold. Without
    it every candidate pair counts (datatrove's behaviour): faster, less precise."""
    seed: int = 0

    def __post_init__(self):
        for field in ("shingle_size", "bands", "rows"):
            check("MinHashConfig", field, getattr(self, field), lambda v: v >= 1, ">= 1")
        check("MinHashConfig", "threshold", self.threshold, lambda v: 0 < v <= 1, "in (0, 1]")

    @property
    def num_perm(self) -> int:
        return self.bands * self.rows

    def candidate_probability(self, jaccard: float) -> float:
        return 1 - (1 - jaccard**self.rows) ** self.bands


@dataclasses.dataclass(frozen=True, kw_only=True)
class ParagraphDedupeConfig:
    """Remove paragraphs already seen earlier (in input order), using a Bloom filter.

    Only documents that survive document-level dedupe and decontamination take part, so a paragraph is
    never dropped in favour of a copy inside a document that is itself removed. A document left with no
    paragraphs is removed (reason ``paragraph``).
    """

    separator: str = "\n"
    """Paragraphs are the pieces between runs of this string ("\\n": lines, as in Dolma)."""
    min_chars: int = 0
    """Paragraphs shorter than this (after stripping) are never removed."""
    false_positive_rate: float = 1e-3
    expected_items: int | None = None
    """Paragraphs the filter is sized for; None counts them first, so the filter is exactly sized."""
    num_partitions: int = 8
    """Hash partitions, each with its own filter, run in parallel. Part of the result (the Bloom false
    positives differ), unlike worker counts."""
    batch_size: int = 65536
    """Items checked per vectorized batch (see ``marin.dedupe.bloom``). Part of the result, slightly."""

    def __post_init__(self):
        name = "ParagraphDedupeConfig"
        check(name, "separator", self.separator, lambda v: isinstance(v, str) and v != "", "a non-empty string")
        check(name, "false_positive_rate", self.false_positive_rate, lambda v: 0 < v < 1, "in (0, 1)")
        check(name, "expected_items", self.expected_items, lambda v: v is None or v >= 1, ">= 1 or None")
        for field in ("num_partitions", "batch_size"):
            check(name, field, getattr(self, field), lambda v: v >= 1, ">= 1")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DecontaminationConfig:
    """Drop training documents that share a word n-gram with any eval item.

    Eval files are record files (JSONL/Parquet); an item's text is its ``text_fields`` joined by spaces,
    plus ``choices[gold]`` when the item has both (the leaked form of a multiple-choice question). Items
    with fewer than ``ngram`` words cannot be matched and are counted in the summary.
    """

    eval_paths: tuple[str, ...]
    """Eval record files, directories or globs."""
    ngram: int = 13
    """Words per n-gram (GPT-3's decontamination used 13)."""
    min_matches: int = 1
    """Shared n-grams needed to call a document contaminated."""
    text_fields: tuple[str, ...] = ("text", "context", "question", "query")

    def __post_init__(self):
        name = "DecontaminationConfig"
        check(
            name,
            "eval_paths",
            self.eval_paths,
            lambda v: isinstance(v, (tuple, list)) and len(v) > 0,
            "a non-empty tuple of paths",
        )
        for field in ("ngram", "min_matches"):
            check(name, field, getattr(self, field), lambda v: v >= 1, ">= 1")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DedupeConfig:
    input_path: str
    """A record file, a directory of them (searched recursively) or a glob."""
    output_path: str
    exact: ExactDedupeConfig | None = ExactDedupeConfig()
    fuzzy: MinHashConfig | None = MinHashConfig()
    paragraph: ParagraphDedupeConfig | None = None
    decontaminate: DecontaminationConfig | None = None
    on_error: Literal["raise", "skip"] = "raise"
    """Malformed input records: fail naming file and line, or skip and count them."""
    batch_docs: int = 1000
    """Documents hashed per vectorized batch (memory vs. speed; no effect on the result)."""
    max_workers: int | None = None
    """Ray tasks in flight at once (None: as many as the cluster has CPUs). No effect on the result."""
    use_ray: bool = True
    """False runs every task in this process, one after another (notebooks, debugging)."""
    keep_work: bool = False
    """Keep the intermediate files under ``<output_path>/_work`` after success."""

    def __post_init__(self):
        if not any((self.exact, self.fuzzy, self.paragraph, self.decontaminate)):
            raise ValueError("DedupeConfig: enable at least one of exact, fuzzy, paragraph, decontaminate")
        check("DedupeConfig", "on_error", self.on_error, lambda v: v in ("raise", "skip"), "'raise' or 'skip'")
        check("DedupeConfig", "batch_docs", self.batch_docs, lambda v: v >= 1, ">= 1")
        check("DedupeConfig", "max_workers", self.max_workers, lambda v: v is None or v >= 1, ">= 1 or None")
