"""Dedupe and decontamination of document collections.

``dedupe_documents(DedupeConfig(...))`` is the step function: exact dedupe (normalized-content hash),
fuzzy dedupe (MinHash + LSH, verified by exact Jaccard), paragraph dedupe (Bloom filter) and
decontamination against eval sets (shared word n-grams). See ``marin.dedupe.pipeline`` for the stages
and the output layout, ``marin.dedupe.hashing`` for the vectorized MinHash.
"""

from marin.dedupe.bloom import BloomFilter, bloom_size
from marin.dedupe.config import (
    DecontaminationConfig,
    DedupeConfig,
    ExactDedupeConfig,
    MinHashConfig,
    ParagraphDedupeConfig,
)
from marin.dedupe.pipeline import dedupe_documents

__all__ = [
    "BloomFilter",
    "DecontaminationConfig",
    "DedupeConfig",
    "ExactDedupeConfig",
    "MinHashConfig",
    "ParagraphDedupeConfig",
    "bloom_size",
    "dedupe_documents",
]
