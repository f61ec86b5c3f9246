"""python -m marin.export --checkpoint_path RUN_OR_HF_DIR --output_path DIR [--tokenizer TOK] [--step N]

``--checkpoint_path`` is a training run's output directory (its newest checkpoint, or ``--step``'s) or a Hugging
Face directory (``marin.export.step``). The model config is the one the run stored with its checkpoints (or the
directory's ``config.json``); ``--model_preset`` (with ``--vocab_size`` / ``--seq_len``) is for checkpoints
written before runs stored it."""

import argparse
import dataclasses

from marin.export.step import ExportConfig, export_checkpoint
from marin.logs import configure_logging
from marin.trainer.model.config import model_preset


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        description="Export a training run's checkpoint, or re-save a Hugging Face directory, in Hugging Face format."
    )
    parser.add_argument(
        "--checkpoint_path",
        required=True,
        help="a training run's output directory, or a Hugging Face directory (config.json beside safetensors)",
    )
    parser.add_argument("--output_path", required=True)
    parser.add_argument(
        "--tokenizer", default=None, help="written beside the weights (default: a Hugging Face directory's own)"
    )
    parser.add_argument(
        "--model_preset", default=None, help="only for checkpoints that do not record their model (e.g. nano)"
    )
    parser.add_argument("--vocab_size", type=int, default=None)
    parser.add_argument("--seq_len", type=int, default=None)
    parser.add_argument("--step", type=int, default=None)
    args = parser.parse_args(argv)
    configure_logging()
    model = None
    if args.model_preset:
        overrides = {k: v for k, v in (("vocab_size", args.vocab_size), ("seq_len", args.seq_len)) if v is not None}
        model = dataclasses.replace(model_preset(args.model_preset), **overrides)
    export_checkpoint(
        ExportConfig(
            checkpoint_path=args.checkpoint_path,
            model=model,
            output_path=args.output_path,
            tokenizer=args.tokenizer,
            checkpoint_step=args.step,
        )
    )


if __name__ == "__main__":
    main()
