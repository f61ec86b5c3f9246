"""The export step: a training run's newest checkpoint as a Hugging Face ``LlamaForCausalLM`` directory.

    python -m marin.export --checkpoint_path local_store/checkpoints/quickstart-1a2b \\
        --tokenizer local_store/tokenizers/x --output_path /tmp/hf
"""

from __future__ import annotations

import dataclasses
import logging

from marin.inference import export_hf, load_model
from marin.trainer.model.config import LlamaConfig

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExportConfig:
    checkpoint_path: str
    """A training step's output directory (its newest checkpoint is exported)."""
    output_path: str
    model: LlamaConfig | None = None
    """Default: the config the run stored with its checkpoints."""
    tokenizer: str | None = None
    """Copied beside the weights so the directory loads with AutoTokenizer too."""
    checkpoint_step: int | None = None


def export_checkpoint(config: ExportConfig) -> None:
    cfg, params, step = load_model(config.checkpoint_path, config.model, config.checkpoint_step)
    export_hf(cfg, params, config.output_path, tokenizer=config.tokenizer)
    logger.info("exported %s (step %s) to %s", config.checkpoint_path, step, config.output_path)
