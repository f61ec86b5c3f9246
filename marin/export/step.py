"""The export step: a model as a Hugging Face directory, from a training run's newest checkpoint (or a given
step's) or from a Hugging Face directory (re-saved: fp32 weights, the lab's config fields, and every field of its
``config.json`` the round trip does not read kept, with its tokenizer unless another is given).

    python -m marin.export --checkpoint_path local_store/checkpoints/quickstart-1a2b \\
        --tokenizer local_store/tokenizers/x --output_path /tmp/hf
"""

from __future__ import annotations

import dataclasses
import logging

from marin.inference import export_hf, is_hf_directory, load_model
from marin.trainer.model.config import LlamaConfig

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExportConfig:
    checkpoint_path: str
    """A training step's output directory (its newest checkpoint is exported) or a Hugging Face directory."""
    output_path: str
    model: LlamaConfig | None = None
    """Default: the config the run stored with its checkpoints (or the HF directory's)."""
    tokenizer: str | None = None
    """Copied beside the weights so the directory loads with AutoTokenizer too (an HF directory's own
    tokenizer files are copied when this is None)."""
    checkpoint_step: int | None = None


def export_checkpoint(config: ExportConfig) -> None:
    cfg, params, step = load_model(config.checkpoint_path, config.model, config.checkpoint_step)
    source = config.checkpoint_path if is_hf_directory(config.checkpoint_path) else None
    export_hf(cfg, params, config.output_path, tokenizer=config.tokenizer, source=source)
    logger.info("exported %s (step %s) to %s", config.checkpoint_path, step, config.output_path)
