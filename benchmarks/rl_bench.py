"""GRPO iterations: the lab's RL loop against TRL's ``GRPOTrainer`` on the same model, side by side (issue 38).

    .venv/bin/python benchmarks/rl_bench.py                      # small preset, 8 prompts x 8 completions x 64 tokens
    .venv/bin/python benchmarks/rl_bench.py --preset nano --iterations 3

One process per side, run one after the other on the same host. Both start from the same random ``small``
Llama (exported to Hugging Face format for TRL, read back by the lab), the same chat tokenizer and prompts, G
completions per prompt sampled at temperature 1 up to ``--max_tokens`` tokens, one optimizer step per
iteration on all of them (loss "grpo", no KL), and the same reward (the share of the letter "e" in the
completion: it varies within a group, so both do the full update). TRL generates with its default path
(``transformers``' ``generate``); the lab through its engine (continuous batching over KV slots).

Reported per side: seconds per iteration (rollouts + update; the first iteration, which compiles, is left
out), completion tokens per second of the rollouts, and their ratio lab/TRL. Results go to
``benchmarks/results/rl_bench.json`` with the host's CPU model (docs/rl.md has the table).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from host import cpu_model  # noqa: E402  benchmarks/ is the script's own directory

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PROMPTS = [
    "What is 3 + 4?",
    "Tell me about the cow.",
    "Count from one to five.",
    "What does the duck say?",
    "Add 2 and 7.",
    "What is the opposite of big?",
    "Compute 5 + 1.",
    "Which sound does the dog make?",
]


def letter_e(completion: str) -> float:
    return completion.count("e") / max(len(completion), 1)


def make_model(root: Path, preset: str) -> tuple[str, str]:
    """A random ``preset`` Llama exported with a chat tokenizer trained on the bundled stories (no hub)."""
    import dataclasses
    import random

    import jax
    import numpy as np

    from marin.chat import ChatTokenizer, with_chat_tokens
    from marin.corpus.domains import story
    from marin.inference import export_hf
    from marin.tokenize.tokenizer import TrainTokenizerConfig, build_bpe_tokenizer
    from marin.trainer.model import init_params, model_preset

    rng = random.Random(0)
    texts = [story(rng) for _ in range(300)]
    tokenizer = build_bpe_tokenizer(
        iter(texts), TrainTokenizerConfig(input_paths=["-"], output_path="-", vocab_size=4000)
    )
    tokenizer = with_chat_tokens(tokenizer)
    cfg = dataclasses.replace(model_preset(preset), vocab_size=4096, seq_len=256)
    tok_dir = str(root / "chat-tokenizer")
    ChatTokenizer(tokenizer).save(tok_dir)
    params = jax.tree.map(np.asarray, init_params(cfg, jax.random.PRNGKey(0)))
    export_hf(cfg, params, str(root / "hf"), tokenizer=tok_dir)
    return str(root / "hf"), tok_dir


def run_lab(root: Path, export: str, tokenizer: str, args) -> dict:
    from marin.environments import EnvironmentConfig, register_reward
    from marin.posttrain.rl.config import GrpoConfig, RolloutConfig, TrainRlConfig
    from marin.posttrain.rl.loop import train_rl
    from marin.posttrain.rl.loss import LossConfig
    from marin.posttrain.rl.rollout import SamplingConfig
    from marin.trainer.checkpoint import CheckpointConfig
    from marin.trainer.optim import OptimizerConfig
    from marin.trainer.tracking import TrackerConfig

    register_reward("bench_letter_e")(lambda record, completion: letter_e(completion))
    prompts = root / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"p{i}", "prompt": p}) + "\n" for i, p in enumerate(PROMPTS)))
    rows = len(PROMPTS) * args.generations
    config = TrainRlConfig(
        output_path=str(root / "lab-run"),
        initialize_from=export,
        tokenizer=tokenizer,
        environments={"bench": EnvironmentConfig(prompts=str(prompts), rewards=(("bench_letter_e", 1.0),))},
        grpo=GrpoConfig(
            num_iterations=args.iterations + 1,
            prompts_per_iteration=len(PROMPTS),
            num_generations=args.generations,
            sampling=SamplingConfig(max_completion_tokens=args.max_tokens),
            loss=LossConfig(max_completion_tokens=args.max_tokens),
        ),
        optimizer=OptimizerConfig(learning_rate=1e-6, schedule="constant", warmup=0, weight_decay=0.0),
        rollout=RolloutConfig(slots=rows, prefill_chunk=64),
        checkpoint=CheckpointConfig(save_interval_minutes=None),
        tracker=TrackerConfig(wandb=False, progress_bar=False),
    )
    start = time.perf_counter()
    train_rl(config)
    total = time.perf_counter() - start
    metrics = [json.loads(line) for line in open(root / "lab-run" / "metrics.jsonl")][1:]
    seconds = [m["time/rollout_s"] + m["time/update_s"] for m in metrics]
    return {
        "seconds_per_iteration": statistics.median(seconds),
        "rollout_tokens_per_s": statistics.median(m["throughput/rollout_tokens_per_s"] for m in metrics),
        "completion_length": statistics.mean(m["rl/completion_length"] for m in metrics),
        "first_iteration_s": total - sum(seconds),
    }


def run_trl(root: Path, export: str, args) -> dict:
    import datasets
    import torch
    import transformers
    import trl

    torch.manual_seed(0)
    rows = len(PROMPTS) * args.generations
    marks: list[float] = []
    generation: list[float] = []

    class Clock(transformers.TrainerCallback):
        def on_step_end(self, *_, **__):
            marks.append(time.perf_counter())

    config = trl.GRPOConfig(
        output_dir=str(root / "trl-run"),
        loss_type="grpo",
        beta=0.0,
        num_generations=args.generations,
        per_device_train_batch_size=rows,
        gradient_accumulation_steps=1,
        max_completion_length=args.max_tokens,
        temperature=1.0,
        learning_rate=1e-6,
        max_steps=args.iterations + 1,
        logging_steps=1,
        use_cpu=True,
        bf16=False,
        report_to=[],
        save_strategy="no",
    )
    model = transformers.LlamaForCausalLM.from_pretrained(export, dtype=torch.float32)
    tokenizer = transformers.AutoTokenizer.from_pretrained(export)
    dataset = datasets.Dataset.from_list([{"prompt": [{"role": "user", "content": p}]} for p in PROMPTS])
    trainer = trl.GRPOTrainer(
        model=model,
        reward_funcs=[lambda completions, **_: [letter_e(c[0]["content"]) for c in completions]],
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[Clock()],
    )
    generate = trainer.model.generate

    def timed_generate(*a, **k):
        start = time.perf_counter()
        out = generate(*a, **k)
        generation.append(time.perf_counter() - start)
        return out

    trainer.model.generate = timed_generate
    start = time.perf_counter()
    trainer.train()
    steps = [b - a for a, b in zip([start, *marks], marks)][1:]
    lengths = [h["completions/mean_length"] for h in trainer.state.log_history if "completions/mean_length" in h][1:]
    tokens = [length * rows for length in lengths]
    return {
        "seconds_per_iteration": statistics.median(steps),
        "rollout_tokens_per_s": statistics.median(t / g for t, g in zip(tokens, generation[1:]))
        if generation
        else None,
        "completion_length": statistics.mean(lengths),
        "first_iteration_s": marks[0] - start,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--iterations", type=int, default=3, help="timed iterations (after one warm-up)")
    parser.add_argument("--generations", type=int, default=8)
    parser.add_argument("--max_tokens", type=int, default=64)
    parser.add_argument("--side", choices=("lab", "trl"), help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    parser.add_argument("--out", default=str(HERE / "results" / "rl_bench.json"))
    args = parser.parse_args()
    if args.side:  # a child process: one side, its numbers as JSON on the last line
        root = Path(args.root)
        export, tokenizer = str(root / "hf"), str(root / "chat-tokenizer")
        result = run_lab(root, export, tokenizer, args) if args.side == "lab" else run_trl(root, export, args)
        print(json.dumps(result))
        return
    root = Path(tempfile.mkdtemp(prefix="rl-bench-"))
    make_model(root, args.preset)
    common = ["--preset", args.preset, "--iterations", str(args.iterations), "--generations", str(args.generations)]
    common += ["--max_tokens", str(args.max_tokens), "--root", str(root)]
    results = {}
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    for side in ("lab", "trl"):
        out = subprocess.run(
            [sys.executable, __file__, "--side", side, *common], env=env, capture_output=True, text=True
        )
        if out.returncode:
            raise SystemExit(f"{side} failed:\n{out.stderr[-3000:]}")
        results[side] = json.loads(out.stdout.strip().splitlines()[-1])
    lab, ref = results["lab"], results["trl"]
    report = {
        "date": time.strftime("%Y-%m-%d"),
        "host": cpu_model(),
        "config": {k: v for k, v in vars(args).items() if k not in ("side", "root", "out")} | {"prompts": len(PROMPTS)},
        "results": results,
        "iteration_speedup": ref["seconds_per_iteration"] / lab["seconds_per_iteration"],
        "rollout_speedup": (lab["rollout_tokens_per_s"] / ref["rollout_tokens_per_s"])
        if ref["rollout_tokens_per_s"]
        else None,
    }
    print(f"{'':6s} {'s/iteration':>12s} {'rollout tok/s':>14s} {'completion len':>15s}")
    for side, r in results.items():
        print(
            f"{side:6s} {r['seconds_per_iteration']:12.2f} {r['rollout_tokens_per_s'] or 0:14.0f} "
            f"{r['completion_length']:15.1f}"
        )
    print(
        f"lab / TRL: {report['iteration_speedup']:.2f}x per iteration, rollouts {report['rollout_speedup'] or 0:.2f}x"
    )
    Path(args.out).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
