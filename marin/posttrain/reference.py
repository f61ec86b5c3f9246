"""The reference model's log-probabilities of every pair, computed once as their own step.

    compute_reference_logps(ReferenceLogpsConfig(checkpoint_path=<SFT run>, pairs={"train": <cache>, ...},
                                                 output_path=this_output_path(), seq_len=4096))
    # <output>/<set>/logps.npy   float32 [pairs, 2]: sum of log p(reply token) of chosen, rejected (NaN: left out)
    # <output>/reference.json    the checkpoint and its step, seq_len, dtype, each set's cache and pair count

DPO's reference is the frozen starting checkpoint, so its numbers never change during training: computing
them once (a forward pass over the pairs, no gradients, no optimizer) spares the training step the reference
forward and the memory of a second copy of the weights (docs/dpo.md measures both ways). The sequences are
truncated as training truncates them (``seq_len``), by the same batch builder.
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from marin.chat.preference_cache import PairCache
from marin.identity import runtime_field
from marin.posttrain.batches import PairBatches, usable_pairs
from marin.posttrain.objective import sequence_logps
from marin.storage import join, read_bytes, read_text, write_atomic
from marin.trainer.model import LlamaConfig
from marin.trainer.step import PrecisionPolicy
from marin.validation import check

logger = logging.getLogger(__name__)
INFO_FILE = "reference.json"


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReferenceLogpsConfig:
    checkpoint_path: str
    """The reference model: a training (SFT) run's output directory or an HF export."""
    pairs: Mapping[str, str]
    """Set name ("train", a validation set's name) -> a pair cache."""
    output_path: str
    model: LlamaConfig | None = None
    """Default: the config stored with the checkpoint."""
    seq_len: int | None = None
    """Truncation, as the DPO run's (its model's ``seq_len``); default the reference model's."""
    compute_dtype: str = "float32"
    pairs_per_batch: int = runtime_field(32)

    def __post_init__(self):
        check("ReferenceLogpsConfig", "pairs", self.pairs, lambda v: len(v) > 0, "at least one pair cache")
        dtypes = ("float32", "bfloat16", "float16")
        check("ReferenceLogpsConfig", "compute_dtype", self.compute_dtype, lambda v: v in dtypes, f"one of {dtypes}")


def compute_reference_logps(config: ReferenceLogpsConfig) -> dict[str, Any]:
    from marin.inference import load_model, place_params

    cfg, params, step = load_model(config.checkpoint_path, config.model)
    seq_len = config.seq_len or cfg.seq_len
    cfg = dataclasses.replace(cfg, seq_len=seq_len)
    policy = PrecisionPolicy(compute_dtype=config.compute_dtype)
    params = place_params(cfg, params)
    run = jax.jit(lambda p, batch: sequence_logps(cfg, policy.cast_for_compute(p), batch)[0])
    info = {"checkpoint": config.checkpoint_path, "checkpoint_step": step, "seq_len": seq_len, "sets": {}}
    info["compute_dtype"] = config.compute_dtype
    for name, url in config.pairs.items():
        pairs = PairCache.open(url)
        logps = np.full((len(pairs), 2), np.nan, np.float32)
        usable = usable_pairs(pairs, seq_len)
        if len(usable):  # an empty held-out set (no validation_fraction) has nothing to score
            batches = PairBatches(pairs, seq_len=seq_len, pairs_per_step=config.pairs_per_batch, shuffle=False)
            for s in range(batches.num_eval_steps):
                indices = batches.pair_indices(s)
                values = np.asarray(jax.device_get(run(params, batches.batch(s))))
                logps[indices[indices >= 0]] = values[indices >= 0]
        buffer = io.BytesIO()
        np.save(buffer, logps)
        write_atomic(join(config.output_path, name, "logps.npy"), buffer.getvalue())
        left_out = len(pairs) - len(usable)
        info["sets"][name] = {"cache": url, "pairs": len(pairs), "left_out": left_out, **_identity(pairs)}
        logger.info("reference log-probabilities of %d %s pairs (%d left out)", len(pairs), name, left_out)
    write_atomic(join(config.output_path, INFO_FILE), json.dumps(info, indent=2))
    return info


def _identity(pairs: PairCache) -> dict[str, Any]:
    """What ties stored numbers to a cache's bytes: its shards' token hashes."""
    return {"tokens_sha256": [shard["tokens_sha256"] for shard in pairs.ledger["shards"]]}


def load_reference_logps(path: str, name: str, pairs: PairCache, seq_len: int) -> np.ndarray:
    """Set ``name``'s stored log-probabilities [pairs, 2], checked against the cache and the truncation."""
    info = json.loads(read_text(join(path, INFO_FILE)))
    where = f"{path}: reference log-probabilities"
    if name not in info["sets"]:
        raise ValueError(f"{where} hold no set {name!r} (sets: {sorted(info['sets'])})")
    if info["seq_len"] != seq_len:
        raise ValueError(f"{where} were computed at seq_len {info['seq_len']}, the run truncates at {seq_len}")
    if info["sets"][name]["tokens_sha256"] != _identity(pairs)["tokens_sha256"]:
        raise ValueError(f"{where} of set {name!r} were computed on other pairs than {pairs.url}")
    logps = np.load(io.BytesIO(read_bytes(join(path, name, "logps.npy"))))
    if logps.shape != (len(pairs), 2):
        raise ValueError(f"{where} of set {name!r} have shape {logps.shape}, expected {(len(pairs), 2)}")
    return logps
