"""The bundled corpus: a deterministic generator of small web-like training data with known answers.

``generate_corpus(CorpusConfig(output_path=...))`` writes training and validation shards in two domains,
multiple-choice eval tasks, and ground truth for the planted duplicates and contamination
(see ``marin.corpus.build`` for the layout). ``python -m marin.corpus --output DIR`` does the same.
"""

from marin.corpus.build import CorpusConfig, generate_corpus, load_ground_truth
from marin.corpus.tasks import TASKS, item_text

__all__ = ["TASKS", "CorpusConfig", "generate_corpus", "item_text", "load_ground_truth"]
