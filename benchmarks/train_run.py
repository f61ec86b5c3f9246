"""A real training run on the bundled data, as a user runs one: tokens/s and MFU from its metrics.jsonl.

    .venv/bin/python benchmarks/train_run.py prepare --out .gpudata           # corpus, 8k BPE, token cache
    python benchmarks/train_run.py run --cache .gpudata/tokenized --config gpu_1b --steps 300 --out /tmp/run
    python benchmarks/train_run.py run ... --matmul-dtype float8 --attention cudnn

``prepare`` (CPU, ~20 s) generates the bundled corpus (36,000 documents per domain, no web pages), trains
a byte-level BPE of 8,192 tokens on it and tokenizes train and validation into token caches (~10M
tokens): the data a GPU run reads, small enough to carry to a lent machine.

``run`` trains the model of a ``trainer_bench.py`` config (the same model that benchmark times against
PyTorch) with ``marin.trainer.train``: the real loop, data loader over the token cache, AdamW with
warmup and cosine decay, bf16 compute (``--matmul-dtype float8`` for FP8 projections), evaluation on the
validation cache at the end, and the final checkpoint. It prints the run's tokens/s and MFU, as the
trainer logs them (``throughput/*`` in ``metrics.jsonl``, MFU against the device's entry in
``marin.trainer.tracking.PEAK_FLOPS_PER_DEVICE``), as the median over the logging intervals after the
first (which holds compilation), with the first and final loss and the eval loss; JSON with ``--json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def prepare(out: Path, docs_per_domain: int) -> None:
    from marin.corpus import CorpusConfig, generate_corpus
    from marin.tokenize import TokenizeConfig, TrainTokenizerConfig, tokenize_corpus, train_tokenizer

    t0 = time.perf_counter()
    corpus, tokenizer = out / "corpus", out / "tokenizer"
    generate_corpus(
        CorpusConfig(output_path=str(corpus), train_docs_per_domain=docs_per_domain, web_pages_per_domain=0)
    )
    train_tokenizer(
        TrainTokenizerConfig(input_paths=[str(corpus / "train")], output_path=str(tokenizer), vocab_size=8192)
    )
    tokenize_corpus(
        TokenizeConfig(
            train_paths=[str(corpus / "train")],
            validation_paths=[str(corpus / "validation")],
            tokenizer=str(tokenizer),
            output_path=str(out / "tokenized"),
        )
    )
    print(f"prepared {out / 'tokenized'} in {time.perf_counter() - t0:.0f} s")


def run(args: argparse.Namespace) -> dict:
    import jax
    from trainer_bench import CONFIGS, model_dims

    from marin.trainer import (
        CheckpointConfig,
        DataConfig,
        OptimizerConfig,
        PrecisionPolicy,
        TrackerConfig,
        TrainerConfig,
        TrainLmConfig,
    )
    from marin.trainer.data.cache_source import TokenCacheSourceConfig
    from marin.trainer.loop import train
    from marin.trainer.model import LlamaConfig

    c = CONFIGS[args.config]
    model = LlamaConfig(**model_dims(c), attention_backend=args.attention, remat=args.remat)
    cache = Path(args.cache)
    config = TrainLmConfig(
        output_path=args.out,
        model=model,
        data=DataConfig(
            train={"bundled": TokenCacheSourceConfig(path=str(cache / "train"))},
            validation={"bundled": TokenCacheSourceConfig(path=str(cache / "validation"))},
        ),
        optimizer=OptimizerConfig(learning_rate=args.lr, schedule="cosine", warmup=0.05, weight_decay=0.1),
        trainer=TrainerConfig(
            num_train_steps=args.steps,
            batch_size=args.batch or c["batch"],
            log_every=args.log_every,
            max_eval_sequences=64,
            precision=PrecisionPolicy(compute_dtype="bfloat16", matmul_dtype=args.matmul_dtype),
            checkpoint=CheckpointConfig(save_interval_minutes=None),
            tracker=TrackerConfig(wandb=False, progress_bar=False),
        ),
    )
    t0 = time.perf_counter()
    result = train(config)
    wall = time.perf_counter() - t0
    records = [json.loads(line) for line in (Path(args.out) / "metrics.jsonl").read_text().splitlines()]
    throughput = [r for r in records if "throughput/tokens_per_s" in r]
    losses = [r["train/loss"] for r in records if "train/loss" in r]
    steady = throughput[1:] or throughput  # the first interval holds compilation
    summary = {
        "config": args.config,
        "device": jax.devices()[0].device_kind,
        "jax": jax.__version__,
        "params": model.param_count,
        "flops_per_token": model.flops_per_token(),
        "steps": result.step,
        "batch_tokens": config.trainer.batch_size * model.seq_len,
        "matmul_dtype": args.matmul_dtype,
        "attention": args.attention,
        "tokens_per_s": statistics.median(r["throughput/tokens_per_s"] for r in steady),
        "mfu": statistics.median(r.get("throughput/mfu", float("nan")) for r in steady),
        "first_loss": losses[0],
        "final_loss": result.train_loss,
        "eval": result.eval_metrics,
        "wall_s": wall,
    }
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="write the bundled corpus's token cache (CPU)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--docs-per-domain", type=int, default=36_000)
    r = sub.add_parser("run", help="train on a prepared cache")
    r.add_argument("--cache", required=True, help="the prepared tokenized/ directory")
    r.add_argument("--config", default="gpu_1b", help="a trainer_bench.py config")
    r.add_argument("--steps", type=int, default=300)
    r.add_argument("--batch", type=int, default=None, help="sequences per step (default: the config's)")
    r.add_argument("--lr", type=float, default=3e-4)
    r.add_argument("--matmul-dtype", default="default", choices=["default", "float8"])
    r.add_argument("--attention", default="default", help="attention backend (default: the platform's)")
    r.add_argument("--remat", default="none", choices=["none", "minimal", "full"])
    r.add_argument("--log-every", type=int, default=25)
    r.add_argument("--out", required=True, help="the run's output directory")
    r.add_argument("--json", type=Path, default=None, help="also write the summary here")
    args = parser.parse_args()
    if args.command == "prepare":
        prepare(args.out, args.docs_per_domain)
        return
    sys.path.insert(0, str(HERE))
    summary = run(args)
    print(json.dumps(summary, indent=1))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
