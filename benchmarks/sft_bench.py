"""SFT costs: training tokens/s with and without the assistant mask, and chat rendering + tokenization
throughput against ``transformers``' ``apply_chat_template``.

    python benchmarks/sft_bench.py [--conversations 4000] [--steps 20] [--repeat 3] [--model nano]

1. Training: one SFT token cache (generated multi-turn conversations, the lab's template), read twice by
   the same loop: once as an SFT source (its stored mask multiplied into the loss mask) and once with the
   mask hidden (every target counts: pretraining on the same tokens). Same model, batch, jitted step;
   each measurement is ``--steps`` steps of batch building + the step, after a warm-up step, interleaved
   ``--repeat`` times. Reported: median tokens/s of each and their ratio (goal: no measurable cost).
2. Rendering: the same conversations rendered and tokenized (ids + assistant mask) by (a) ``ChatTokenizer.
   encode_batch`` and (b) ``transformers``' ``apply_chat_template(tokenize=True,
   return_assistant_tokens_mask=True)`` on the exported tokenizer, one conversation at a time (its API), and
   (c) the same without the mask (ids only). Interleaved ``--repeat`` times; conversations/s and ratios.

Both run in this one process (same cores, same tokenizer). Results: stdout (Markdown) and
benchmarks/results/sft_bench.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")

RESULTS = Path(__file__).resolve().parent / "results"


def make_conversations(n: int, seed: int = 0) -> list[list[dict]]:
    """Multi-turn conversations over the bundled corpus's text: a system prompt, 1-3 exchanges."""
    from marin.corpus.domains import arithmetic, story

    rng = random.Random(seed)
    out = []
    for _ in range(n):
        messages = [{"role": "system", "content": "You are a helpful assistant."}] if rng.random() < 0.5 else []
        for _ in range(rng.randint(1, 3)):
            maker = rng.choice([story, arithmetic])
            question = " ".join(maker(rng).split()[: rng.randint(8, 40)]) + "?"
            messages += [{"role": "user", "content": question}, {"role": "assistant", "content": maker(rng)}]
        out.append(messages)
    return out


def chat_tokenizer(conversations, root: Path):
    from marin.chat import CHAT_SPECIAL_TOKENS, ChatTokenizer
    from marin.tokenize import TrainTokenizerConfig, build_bpe_tokenizer

    texts = (m["content"] for c in conversations[:2000] for m in c)
    config = TrainTokenizerConfig(
        input_paths=["-"],
        output_path="-",
        vocab_size=8192,
        special_tokens=("<|endoftext|>", "<|pad|>", *CHAT_SPECIAL_TOKENS),
    )
    chat = ChatTokenizer(build_bpe_tokenizer(texts, config))
    chat.save(str(root / "tokenizer"))
    return chat


def bench_rendering(chat, conversations, root: Path, repeat: int) -> dict:
    import transformers

    hf = transformers.AutoTokenizer.from_pretrained(str(root / "tokenizer"))
    rates = {"ours": [], "transformers_with_mask": [], "transformers_ids_only": []}
    tokens = sum(len(ids) for ids, _ in chat.encode_batch(conversations))
    for _ in range(repeat):
        start = time.perf_counter()
        chat.encode_batch(conversations)
        rates["ours"].append(len(conversations) / (time.perf_counter() - start))
        start = time.perf_counter()
        for c in conversations:
            hf.apply_chat_template(c, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
        rates["transformers_with_mask"].append(len(conversations) / (time.perf_counter() - start))
        start = time.perf_counter()
        for c in conversations:
            hf.apply_chat_template(c, tokenize=True)
        rates["transformers_ids_only"].append(len(conversations) / (time.perf_counter() - start))
    medians = {k: statistics.median(v) for k, v in rates.items()}
    return {
        "conversations": len(conversations),
        "tokens": tokens,
        "conversations_per_s": medians,
        "runs": rates,
        "ratio_vs_with_mask": medians["ours"] / medians["transformers_with_mask"],
        "ratio_vs_ids_only": medians["ours"] / medians["transformers_ids_only"],
    }


class Unmasked:
    """The same token source with its stored mask hidden: pretraining on the SFT cache's tokens."""

    def __init__(self, source):
        self.source = source
        self.num_tokens, self.num_bytes = source.num_tokens, source.num_bytes

    def read(self, start, length):
        return self.source.read(start, length)

    def doc_starts(self, start, stop):
        return self.source.doc_starts(start, stop)


def bench_training(cache_dir: str, model_name: str, steps: int, batch_size: int, repeat: int) -> dict:
    import dataclasses

    import jax

    from marin.tokenize import TokenCache
    from marin.trainer.data import CacheTokenSource, DataConfig, SyntheticSourceConfig, TrainBatches
    from marin.trainer.model import model_preset, param_axes
    from marin.trainer.optim import OptimizerConfig
    from marin.trainer.step import PrecisionPolicy, StepConfig, init_state, make_train_step

    cache = TokenCache.open(cache_dir)
    cfg = dataclasses.replace(model_preset(model_name), vocab_size=cache.ledger["vocab_size"], seq_len=256)
    policy = PrecisionPolicy(compute_dtype="float32")
    opt = OptimizerConfig(learning_rate=1e-3, schedule="constant", warmup=0)
    tx = opt.build(10_000, param_axes(cfg))
    step_fn = make_train_step(cfg, tx, opt.lr_schedule(10_000), StepConfig(precision=policy))
    placeholder = DataConfig(train={"s": SyntheticSourceConfig(vocab_size=cfg.vocab_size, num_tokens=1000)})
    sft_source = CacheTokenSource(cache)
    loaders = {
        "sft": TrainBatches({"s": sft_source}, placeholder, seq_len=cfg.seq_len, batch_size=batch_size),
        "pretraining": TrainBatches(
            {"s": Unmasked(sft_source)}, placeholder, seq_len=cfg.seq_len, batch_size=batch_size
        ),
    }
    rates = {name: [] for name in loaders}
    masked_share = {}
    for r in range(repeat):
        for name, batches in loaders.items():
            state = jax.jit(lambda k: init_state(cfg, tx, k, ema=False, policy=policy))(jax.random.PRNGKey(0))
            state, metrics = step_fn(state, batches.batch(0))  # compile (cached after the first) and warm up
            jax.block_until_ready(metrics)
            start = time.perf_counter()
            counted = 0.0
            for step in range(1, steps + 1):
                batch = batches.batch(r * steps + step)
                state, metrics = step_fn(state, batch)
                counted += float(batch["loss_mask"].sum())
            jax.block_until_ready(metrics)
            rates[name].append(steps * batch_size * cfg.seq_len / (time.perf_counter() - start))
            masked_share[name] = counted / (steps * batch_size * cfg.seq_len)
    medians = {k: statistics.median(v) for k, v in rates.items()}
    return {
        "model": model_name,
        "params_m": cfg.param_count / 1e6,
        "seq_len": cfg.seq_len,
        "batch_size": batch_size,
        "steps": steps,
        "tokens_per_s": medians,
        "runs": rates,
        "share_of_targets_trained": masked_share,
        "ratio_sft_vs_pretraining": medians["sft"] / medians["pretraining"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--conversations", type=int, default=4000)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--model", default="nano")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    from marin.chat.cache import build_sft_cache
    from marin.storage.records import write_records

    conversations = make_conversations(args.conversations)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        chat = chat_tokenizer(conversations, root)
        rendering = bench_rendering(chat, conversations, root, args.repeat)
        write_records(str(root / "chat.jsonl"), [{"messages": c} for c in conversations])
        build_sft_cache([str(root / "chat.jsonl")], str(root / "cache"), str(root / "tokenizer"))
        training = bench_training(str(root / "cache"), args.model, args.steps, args.batch_size, args.repeat)
    result = {
        "rendering": rendering,
        "training": training,
        "cpu_count": os.cpu_count(),
        "measured": time.strftime("%Y-%m-%d %H:%M"),
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "sft_bench.json").write_text(json.dumps(result, indent=2))
    r, t = rendering, training
    print(
        f"| rendering + tokenization ({r['conversations']} conversations, {r['tokens']:,} tokens) | conversations/s |"
    )
    print("|---|---|")
    for name, rate in r["conversations_per_s"].items():
        print(f"| {name} | {rate:,.0f} |")
    print(f"ours / transformers with mask: {r['ratio_vs_with_mask']:.2f}x; ids only: {r['ratio_vs_ids_only']:.2f}x\n")
    print(
        f"| training {t['model']} ({t['params_m']:.1f}M), batch {t['batch_size']} x {t['seq_len']} | tokens/s |"
        " share of targets trained |"
    )
    print("|---|---|---|")
    for name, rate in t["tokens_per_s"].items():
        print(f"| {name} | {rate:,.0f} | {t['share_of_targets_trained'][name]:.2f} |")
    print(f"SFT / pretraining: {t['ratio_sft_vs_pretraining']:.3f}")


if __name__ == "__main__":
    main()
