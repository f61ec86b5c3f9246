"""DPO step throughput and memory: the lab's DPO step against TRL's ``DPOTrainer`` on the exported copy of the
same model, side by side on real preference pairs.

    python benchmarks/dpo_bench.py [--model small] [--pairs 8] [--steps 8] [--rounds 3] [--trl-path DIR]

Data: real pairs from ``tests/data`` (OpenAssistant ranked siblings and AlpacaEval annotations alternating, the
first ``--max-pairs``), rendered with the chat template of an 8,192-token chat BPE trained on all 1,052 pairs'
text, truncated at ``seq_len + 1`` tokens as both sides truncate (TRL's ``max_length``). Model: the ``small``
preset (~26M parameters, seq 512), random weights, exported to Hugging Face format; both sides start from those
weights, fp32, AdamW (lr 5e-7, constant, no weight decay), ``--pairs`` pairs per step, sigmoid DPO (beta 0.1),
reference = the same weights, frozen.

Peers, each a fresh process per round (rounds rotate the order; medians over rounds):

* ``lab``: the DPO step as ``train_dpo`` runs it (``make_train_step`` with ``dpo_loss_fn``; policy forward and
  backward, reference forward on the fly), packed rows;
* ``lab_precomputed``: the same with the reference log-probabilities read from the batch, after a pass that
  computes them for every pair (the reference step); its tokens/s counts that pass's time too, spread over one
  epoch of the ``--max-pairs`` pairs;
* ``lab_padded``: the on-the-fly step with one sequence per row (the padded layout);
* ``trl``: ``DPOTrainer.train()`` (ref_model given, fp32, ``gradient_checkpointing=False``), timed from the end
  of its warm-up steps to the end of its last step by a ``TrainerCallback``.

tokens/s counts the pairs' real tokens (prompt and reply, both sides, after truncation; TRL's
``num_tokens``) per second of steady-state step time; the first ``--warmup`` steps (compilation) are untimed.
Memory: each process's peak resident set (``ru_maxrss``). The trainer's malloc policy (``marin.allocator``: no
mmap, no trim, for speed) keeps every freed block in the heap, so a lab worker's peak RSS is its heap's
high-water mark, which varies run to run with allocation order; ``--malloc-defaults`` runs the lab's workers
with glibc's defaults (``MARIN_MALLOC_DEFAULTS=1``), where RSS follows what is live, for the memory comparison.
Results: stdout (Markdown) and ``benchmarks/results/<--out>`` (``dpo_bench.json``).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("JAX_PLATFORMS", "cpu")
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from host import cpu_model  # noqa: E402  benchmarks/ is the script's own directory

RESULTS = HERE / "results"
DATA = ROOT / "tests" / "data"
PEERS = ("lab", "trl", "lab_precomputed", "lab_padded")
LR, BETA = 5e-7, 0.1


def real_pairs() -> list[dict]:
    """The OpenAssistant and AlpacaEval pairs, alternating while both last."""
    from marin.chat import normalize_preference

    oasst, alpaca = [], []
    for line in (DATA / "public_chat/oasst_en_100_trees.jsonl").read_text().splitlines():
        oasst += normalize_preference(json.loads(line))
    for row in json.loads((DATA / "public_preferences/alpaca_eval_gpt4_annotations_300.json").read_text()):
        if row["preference"] in (1, 2):
            alpaca += normalize_preference(row)
    mixed = [p for pair in zip(oasst, alpaca) for p in pair]
    return mixed + oasst[len(alpaca) :]


def prepare(root: Path, model_name: str, max_pairs: int) -> dict:
    """Pairs, chat tokenizer, pair cache and the exported random model, shared by every peer."""
    import jax
    import numpy as np

    from marin.chat import CHAT_SPECIAL_TOKENS, ChatTokenizer, build_pair_cache
    from marin.inference.hf import export_hf
    from marin.tokenize import TrainTokenizerConfig, build_bpe_tokenizer
    from marin.trainer.model import init_params, model_preset

    pairs = real_pairs()
    texts = [m["content"] for p in pairs for m in [*p["prompt"], *p["chosen"], *p["rejected"]]]
    pairs = pairs[:max_pairs]
    (root / "pairs.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pairs))
    specials = ("<|endoftext|>", "<|pad|>", *CHAT_SPECIAL_TOKENS)
    config = TrainTokenizerConfig(input_paths=["-"], output_path="-", vocab_size=8192, special_tokens=specials)
    ChatTokenizer(build_bpe_tokenizer(iter(texts), config)).save(str(root / "tokenizer"))
    build_pair_cache([str(root / "pairs.jsonl")], str(root / "cache"), str(root / "tokenizer"))
    cfg = dataclasses.replace(model_preset(model_name), vocab_size=8192)
    rng = np.random.default_rng(0)
    shapes = jax.eval_shape(lambda: init_params(cfg, jax.random.PRNGKey(0)))
    params = jax.tree.map(
        lambda s: (rng.normal(size=s.shape) * cfg.initializer_range if len(s.shape) > 1 else np.ones(s.shape)).astype(
            np.float32
        ),
        shapes,
    )
    export_hf(cfg, params, str(root / "hf"), tokenizer=str(root / "tokenizer"))
    return {"pairs": len(pairs), "seq_len": cfg.seq_len, "params": cfg.param_count}


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# -- lab ------------------------------------------------------------------------------------------------


def _precompute(cfg, params, cache) -> tuple[float, Any]:
    """The reference step's pass over every pair (``compute_reference_logps``' loop), timed after compiling."""
    import jax
    import numpy as np

    from marin.posttrain.batches import PairBatches
    from marin.posttrain.objective import sequence_logps

    run = jax.jit(lambda p, b: sequence_logps(cfg, p, b)[0])
    batches = PairBatches(cache, seq_len=cfg.seq_len, pairs_per_step=32, shuffle=False)
    reference = np.zeros((len(cache), 2), np.float32)
    jax.block_until_ready(run(params, batches.batch(0)))  # compile, untimed
    start = time.perf_counter()
    for s in range(batches.num_eval_steps):
        idx = batches.pair_indices(s)
        reference[idx[idx >= 0]] = np.asarray(run(params, batches.batch(s)))[idx >= 0]
    return time.perf_counter() - start, reference


def lab_worker(root: Path, peer: str, pairs_per_step: int, warmup: int, steps: int) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from marin.chat import PairCache
    from marin.inference.hf import import_hf
    from marin.posttrain import PreferenceLossConfig, dpo_loss_fn
    from marin.posttrain.batches import PairBatches
    from marin.trainer.model import param_axes
    from marin.trainer.optim import OptimizerConfig
    from marin.trainer.step import PrecisionPolicy, StepConfig, TrainState, make_train_step

    cfg, params = import_hf(str(root / "hf"))
    policy = PrecisionPolicy(compute_dtype="float32")
    cache = PairCache.open(str(root / "cache"))
    precompute_s, reference = _precompute(cfg, params, cache) if peer == "lab_precomputed" else (0.0, None)
    batches = PairBatches(
        cache,
        seq_len=cfg.seq_len,
        pairs_per_step=pairs_per_step,
        num_steps=warmup + steps,
        packing=peer != "lab_padded",
        reference_logps=reference,
    )
    opt = OptimizerConfig(learning_rate=LR, schedule="constant", warmup=0, weight_decay=0.0)
    tx = opt.build(warmup + steps, param_axes(cfg))
    loss_fn = dpo_loss_fn(cfg, PreferenceLossConfig(beta=BETA), policy)
    with_frozen = reference is None
    step = make_train_step(
        cfg, tx, opt.lr_schedule(10**6), StepConfig(precision=policy), loss_fn=loss_fn, with_frozen=with_frozen
    )
    params = jax.tree.map(jnp.asarray, params)
    state = TrainState(jnp.zeros((), jnp.int32), params, tx.init(params), None, jnp.zeros(2, jnp.uint32))
    frozen = (jax.tree.map(jnp.copy, params),) if with_frozen else ()
    lengths = np.minimum(cache.lengths(), cfg.seq_len + 1)
    tokens = 0
    for s in range(warmup + steps):
        if s == warmup:
            jax.block_until_ready(state)
            start = time.perf_counter()
        if s >= warmup:
            tokens += int(lengths[batches.pair_indices(s)].sum())
        state, metrics = step(state, batches.batch(s), *frozen)
    jax.block_until_ready(state)
    elapsed = time.perf_counter() - start
    out = {
        "tokens_per_s": tokens / elapsed,
        "step_s": elapsed / steps,
        "rows": batches.rows,
        "peak_rss_mib": _peak_rss_mib(),
    }
    if peer == "lab_precomputed":  # one epoch: the pass over every pair, then len(cache) / P steps
        epoch_steps = len(cache) / pairs_per_step
        epoch_tokens = tokens / steps * epoch_steps
        out["precompute_s"] = precompute_s
        out["train_only_tokens_per_s"] = out["tokens_per_s"]
        out["tokens_per_s"] = epoch_tokens / (elapsed / steps * epoch_steps + precompute_s)
    return out


# -- TRL ------------------------------------------------------------------------------------------------


def trl_worker(root: Path, pairs_per_step: int, warmup: int, steps: int, seq_len: int) -> dict:
    import datasets
    import torch
    import transformers
    from trl import DPOConfig, DPOTrainer

    pairs = [json.loads(line) for line in (root / "pairs.jsonl").read_text().splitlines()]
    model = transformers.AutoModelForCausalLM.from_pretrained(str(root / "hf"), dtype=torch.float32)
    ref = transformers.AutoModelForCausalLM.from_pretrained(str(root / "hf"), dtype=torch.float32)
    marks: dict[str, float] = {}

    class Clock(transformers.TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == warmup:
                marks["start"], marks["tokens"] = time.perf_counter(), trainer._total_train_tokens
            if state.global_step == warmup + steps:
                marks["end"], marks["tokens_end"] = time.perf_counter(), trainer._total_train_tokens

    args = DPOConfig(
        output_dir=str(root / "trl-out"),
        per_device_train_batch_size=pairs_per_step,
        max_length=seq_len + 1,
        max_steps=warmup + steps,
        learning_rate=LR,
        lr_scheduler_type="constant",
        weight_decay=0.0,
        beta=BETA,
        bf16=False,
        use_cpu=True,
        gradient_checkpointing=False,
        report_to="none",
        save_strategy="no",
        logging_steps=10**6,
        dataloader_num_workers=0,
        seed=0,
    )
    trainer = DPOTrainer(
        model=model,
        ref_model=ref,
        args=args,
        train_dataset=datasets.Dataset.from_list(pairs),
        processing_class=transformers.AutoTokenizer.from_pretrained(str(root / "hf")),
        callbacks=[Clock()],
    )
    trainer.train()
    elapsed = marks["end"] - marks["start"]
    tokens = marks["tokens_end"] - marks["tokens"]
    return {
        "tokens_per_s": tokens / elapsed,
        "step_s": elapsed / steps,
        "torch_threads": torch.get_num_threads(),
        "peak_rss_mib": _peak_rss_mib(),
    }


# -- driver ---------------------------------------------------------------------------------------------


def run_peer(root: Path, peer: str, args) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), args.trl_path]))}
    if args.malloc_defaults:  # glibc's own malloc in the lab's workers: RSS follows what is live (see below)
        env["MARIN_MALLOC_DEFAULTS"] = "1"
    command = [sys.executable, __file__, "--worker", peer, "--root", str(root), "--pairs", str(args.pairs)]
    command += ["--steps", str(args.steps), "--warmup", str(args.warmup)]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{peer} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def summarize(runs: dict[str, list[dict]], info: dict, args) -> dict:
    medians = {p: statistics.median(r["tokens_per_s"] for r in rs) for p, rs in runs.items()}
    return {
        "date": datetime.date.today().isoformat(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "setup": {
            **info,
            "pairs_per_step": args.pairs,
            "steps": args.steps,
            "warmup": args.warmup,
            "model": args.model,
        },
        "tokens_per_s": medians,
        "ratio_vs_trl": {p: medians[p] / medians["trl"] for p in medians if "trl" in medians},
        "peak_rss_mib": {p: statistics.median(r["peak_rss_mib"] for r in rs) for p, rs in runs.items()},
        "runs": runs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="small")
    parser.add_argument("--pairs", type=int, default=8, help="pairs per step")
    parser.add_argument("--steps", type=int, default=8, help="timed steps")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first (compilation)")
    parser.add_argument("--max-pairs", type=int, default=256, help="pairs of the data set (an epoch)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--peers", nargs="+", default=list(PEERS), choices=PEERS)
    parser.add_argument("--trl-path", default=None, help="a directory holding trl, if it is not installed")
    parser.add_argument("--malloc-defaults", action="store_true", help="MARIN_MALLOC_DEFAULTS=1 in every worker")
    parser.add_argument("--out", default="dpo_bench.json", help="file name under benchmarks/results/")
    parser.add_argument("--worker", choices=PEERS)
    parser.add_argument("--root")
    args = parser.parse_args()
    if args.worker:
        root = Path(args.root)
        info = json.loads((root / "info.json").read_text())
        if args.worker == "trl":
            out = trl_worker(root, args.pairs, args.warmup, args.steps, info["seq_len"])
        else:
            out = lab_worker(root, args.worker, args.pairs, args.warmup, args.steps)
        print(json.dumps(out))
        return
    root = Path(tempfile.mkdtemp(prefix="dpo-bench-"))
    info = prepare(root, args.model, args.max_pairs)
    (root / "info.json").write_text(json.dumps(info))
    runs: dict[str, list[dict]] = {p: [] for p in args.peers}
    for r in range(args.rounds):
        order = args.peers[r % len(args.peers) :] + args.peers[: r % len(args.peers)]
        for peer in order:
            runs[peer].append(run_peer(root, peer, args))
            print(f"round {r} {peer}: {runs[peer][-1]}", file=sys.stderr)
    result = summarize(runs, info, args)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / args.out).write_text(json.dumps(result, indent=2))
    print(
        f"\nDPO step, {args.model} ({info['params'] / 1e6:.1f}M), {args.pairs} pairs/step, seq {info['seq_len']}, fp32"
    )
    print(f"{result['date']}, {result['cpu_model']}, {result['cpu_count']} CPUs\n")
    print("| peer | tokens/s | vs TRL | peak RSS (MiB) |\n|---|---|---|---|")
    for peer in args.peers:
        ratio = result["ratio_vs_trl"].get(peer)
        print(
            f"| {peer} | {result['tokens_per_s'][peer]:,.0f} | {f'{ratio:.2f}x' if ratio else '-'} | "
            f"{result['peak_rss_mib'][peer]:,.0f} |"
        )


if __name__ == "__main__":
    main()
