"""Training data: token sources, the Feistel shuffle, staged mixtures, packing and deterministic batches."""

from marin.trainer.data.cache_source import CacheTokenSource, TokenCacheSourceConfig
from marin.trainer.data.loader import (
    Batch,
    DataConfig,
    Prefetcher,
    TrainBatches,
    eval_batches,
    num_sequences,
    pack_window,
)
from marin.trainer.data.mixture import Mixture, MixtureStage, apportion
from marin.trainer.data.permutation import EpochPermutation, FeistelPermutation, mix_seed
from marin.trainer.data.source import (
    EOS,
    ArrayTokenSource,
    NumpySourceConfig,
    SyntheticSourceConfig,
    TokenSource,
    TokenSourceConfig,
    documents_to_source,
    load_numpy_source,
    write_numpy_source,
)

__all__ = [
    "EOS",
    "ArrayTokenSource",
    "Batch",
    "CacheTokenSource",
    "DataConfig",
    "EpochPermutation",
    "FeistelPermutation",
    "Mixture",
    "MixtureStage",
    "NumpySourceConfig",
    "Prefetcher",
    "SyntheticSourceConfig",
    "TokenCacheSourceConfig",
    "TokenSource",
    "TokenSourceConfig",
    "TrainBatches",
    "apportion",
    "documents_to_source",
    "eval_batches",
    "load_numpy_source",
    "mix_seed",
    "num_sequences",
    "pack_window",
    "write_numpy_source",
]
