"""python -m marin.export --checkpoint_path RUN --output_path DIR [--tokenizer TOK] [--step N]

The model config is the one the run stored with its checkpoints; ``--model_preset`` (with ``--vocab_size`` /
``--seq_len``) is for checkpoints written before runs stored it."""

import argparse
import dataclasses

from marin.export.step import ExportConfig, export_checkpoint
from marin.logs import configure_logging
from marin.trainer.model.config import model_preset


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="Export a training run's checkpoint to Hugging Face format.")
    parser.add_argument("--checkpoint_path", required=True, help="a training step's output directory")
    parser.add_argument("--output_path", required=True)
    parser.add_argument("--tokenizer", default=None)
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
