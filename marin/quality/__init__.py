"""Quality and language classifiers (fastText), per-document attribute files, and filtering by attribute.

Three steps, in the order the DCLM recipe runs them:

- ``train_classifier(TrainClassifierConfig)``: fit fastText on labelled document sets (reference text vs
  random web text; or one set per language), report held-out precision/recall (``marin.quality.train``);
- ``classify_documents(ClassifyConfig)``: a score per label for every document, in attribute files that
  mirror the document shards row for row (``marin.quality.classify``);
- ``filter_documents(FilterConfig)``: keep documents by score thresholds or top-k percent, with counts and
  reasons for every drop (``marin.quality.filter``).
"""

from marin.quality.classify import classify_documents
from marin.quality.config import AttributeRule, ClassifyConfig, FastTextConfig, FilterConfig, TrainClassifierConfig
from marin.quality.filter import filter_documents
from marin.quality.train import train_classifier

__all__ = [
    "AttributeRule",
    "ClassifyConfig",
    "FastTextConfig",
    "FilterConfig",
    "TrainClassifierConfig",
    "classify_documents",
    "filter_documents",
    "train_classifier",
]
