"""Decontamination: the n-grams of eval items, and which training documents contain any of them.

Eval items are read once by the driver and turned into a sorted array of 64-bit n-gram hashes, each with
the index of the first item it came from (``EvalNgrams``). Every map task loads that table and looks up
all n-grams of its documents with one ``np.searchsorted`` per batch. Hashing uses the same vectorized
word n-grams as MinHash (``marin.dedupe.hashing``), so "n-gram" means n consecutive normalized words
(lower case, punctuation dropped) in both the eval set and the training text.
"""

from __future__ import annotations

import dataclasses
import io
import logging

import numpy as np

from marin.dedupe.config import DecontaminationConfig
from marin.dedupe.hashing import shingle_hashes, word_hashes
from marin.storage import read_bytes, write_atomic
from marin.storage.records import find_record_files, read_records

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class EvalNgrams:
    hashes: np.ndarray
    """Sorted unique uint64 n-gram hashes."""
    item: np.ndarray
    """int32 index (into ``ids``) of the first eval item holding each n-gram."""
    ids: list[str]
    too_short: int
    """Eval items with fewer than n words (they cannot be matched)."""

    def save(self, url: str) -> None:
        buf = io.BytesIO()
        np.savez(
            buf,
            hashes=self.hashes,
            item=self.item,
            ids=np.array(self.ids, dtype=object),
            too_short=np.array(self.too_short),
        )
        write_atomic(url, buf.getvalue())

    @classmethod
    def load(cls, url: str) -> EvalNgrams:
        with np.load(io.BytesIO(read_bytes(url)), allow_pickle=True) as z:
            return cls(z["hashes"], z["item"], list(z["ids"]), int(z["too_short"]))

    def match(self, texts: list[str], ngram: int) -> tuple[np.ndarray, np.ndarray]:
        """Per text: (number of n-grams found in the eval set, index of the first matching item or -1)."""
        words, offsets = word_hashes(texts)
        grams, goff = shingle_hashes(words, offsets, ngram)
        counts = np.zeros(len(texts), dtype=np.int64)
        first = np.full(len(texts), -1, dtype=np.int32)
        if len(self.hashes) == 0 or len(grams) == 0:
            return counts, first
        pos = np.minimum(np.searchsorted(self.hashes, grams), len(self.hashes) - 1)
        hit = self.hashes[pos] == grams
        # Only full-length n-grams count: a short text's single "all words" shingle is not an n-gram.
        lengths = np.diff(offsets)
        doc = np.repeat(np.arange(len(texts)), np.diff(goff))
        hit &= lengths[doc] >= ngram
        counts = np.bincount(doc[hit], minlength=len(texts))
        hit_docs, first_hit = np.unique(doc[hit], return_index=True)
        first[hit_docs] = self.item[pos[hit][first_hit]]
        return counts, first


def eval_item_text(record: dict, text_fields: tuple[str, ...]) -> str:
    parts = [str(record[f]) for f in text_fields if isinstance(record.get(f), str)]
    text = " ".join(parts)
    choices, gold = record.get("choices"), record.get("gold")
    if isinstance(choices, list) and isinstance(gold, int) and 0 <= gold < len(choices):
        text += str(choices[gold])
    return text


def build_eval_ngrams(config: DecontaminationConfig) -> EvalNgrams:
    """All n-grams of all eval items under ``config.eval_paths``."""
    ids, texts = [], []
    for path in config.eval_paths:
        files = find_record_files(path)
        if not files:
            raise FileNotFoundError(f"DecontaminationConfig.eval_paths: no record files at {path}")
        for url in files:
            for line, record in enumerate(read_records(url), 1):
                text = eval_item_text(record, config.text_fields)
                if not text.strip():
                    raise ValueError(f"{url}:{line}: eval item has none of the text fields {config.text_fields}")
                ids.append(str(record.get("id", f"{url}:{line}")))
                texts.append(text)
    words, offsets = word_hashes(texts)
    lengths = np.diff(offsets)
    grams, goff = shingle_hashes(words, offsets, config.ngram)
    item = np.repeat(np.arange(len(texts), dtype=np.int32), np.diff(goff))
    full = lengths[item] >= config.ngram
    grams, item = grams[full], item[full]
    order = np.lexsort((item, grams))
    grams, item = grams[order], item[order]
    first = np.concatenate(([True], grams[1:] != grams[:-1])) if len(grams) else np.zeros(0, bool)
    too_short = int((lengths < config.ngram).sum())
    if too_short:
        logger.warning(
            "decontamination: %d of %d eval items have fewer than %d words and cannot be matched",
            too_short,
            len(texts),
            config.ngram,
        )
    logger.info("decontamination: %d eval items, %d distinct %d-grams", len(texts), int(first.sum()), config.ngram)
    return EvalNgrams(grams[first], item[first], ids, too_short)
