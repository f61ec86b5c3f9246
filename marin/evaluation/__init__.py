"""Evaluation: log-likelihood scoring, loss / perplexity / bits-per-byte, multiple-choice tasks."""

from marin.evaluation.perplexity import document_windows, evaluate_documents, unigram_bits_per_byte
from marin.evaluation.scoring import Scorer
from marin.evaluation.stats import paired_difference, rate
from marin.evaluation.tasks import (
    MultipleChoiceTask,
    build_prompts,
    load_items,
    load_task_yaml,
    score_task,
    split_context_continuation,
)

__all__ = [
    "MultipleChoiceTask",
    "Scorer",
    "build_prompts",
    "document_windows",
    "evaluate_documents",
    "load_items",
    "load_task_yaml",
    "paired_difference",
    "rate",
    "score_task",
    "split_context_continuation",
    "unigram_bits_per_byte",
]
