"""Serving a sliding-window model at a long context: the engine's rolling cache beside its whole-context cache
and beside transformers' ``generate`` (whose ``DynamicCache`` keeps a sliding layer's last window only).

    .venv/bin/python benchmarks/window_cache_bench.py                 # 2 rounds, every peer
    .venv/bin/python benchmarks/window_cache_bench.py --rounds 1 --new_tokens 512 --peers ring whole

The model is ``trainer_bench``'s ``small`` shape (vocab 8192, hidden 512, 6 layers, 8/4 heads, MLP 1376) made
Mistral-like: a sliding window of 256 keys in every layer, a context of 4,096; random weights drawn once and
exported in Hugging Face format (a ``mistral`` config), fp32. The workload: 8 requests of 256 random prompt
tokens, each generating exactly ``--new_tokens`` greedy tokens (no end token), submitted together. Peers:

* ``ring``: ``Engine.generate`` with the default ``EngineConfig(slots=8)``: each layer keeps 255 + 256 (a
  prefill chunk) positions per slot in a ring, and decoding attends over at most those;
* ``whole``: the same with ``rolling_windows=False``: every layer keeps the whole context and masks it, so a
  decoding step's attention reads a span that grows with the sequence (the engine before the ring);
* ``transformers``: ``MistralForCausalLM.generate`` on the export, the 8 prompts as one batch, greedy,
  ``min_new_tokens`` = ``max_new_tokens``, its default dynamic cache, sdpa attention, torch's threads = cores.

Every peer runs in a fresh process per round, the order rotating; each process runs the workload once untimed
(the engine compiles its programs, torch warms up) and once timed. Reported: generated tokens/s (median over
rounds, min-max), each peer against ``whole`` and against transformers, the KV cache's bytes at the end, and
whether the ring's and the whole cache's tokens agree. Results go to ``benchmarks/results/window_cache_bench.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from host import run_worker, write_report  # noqa: E402  benchmarks/ is the script's own directory

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PROJECT_PY = ROOT / ".venv" / "bin" / "python"
RESULTS = HERE / "results" / "window_cache_bench.json"

SHAPE = dict(vocab_size=8192, hidden_dim=512, mlp_dim=1376, num_layers=6, num_heads=8, num_kv_heads=4)
SEQ_LEN, WINDOW, REQUESTS, PROMPT = 4096, 256, 8, 256


def _config():
    from marin.trainer.model import LlamaConfig

    return LlamaConfig(**SHAPE, seq_len=SEQ_LEN, sliding_window=WINDOW)


def _prompts():
    import numpy as np

    rng = np.random.default_rng(0)
    return rng.integers(1, SHAPE["vocab_size"], size=(REQUESTS, PROMPT)).tolist()


def export(path: str) -> None:
    import jax

    from marin.inference import export_hf
    from marin.trainer.model.llama import init_params

    export_hf(_config(), init_params(_config(), jax.random.PRNGKey(0)), path)


def engine_worker(path: str, rolling: bool, new_tokens: int) -> dict:
    import jax

    from marin.inference import SamplingParams
    from marin.inference.checkpoint import load_model, place_params
    from marin.inference.engine import Engine, EngineConfig

    cfg, params, _ = load_model(path)
    engine = Engine(cfg, place_params(cfg, params), EngineConfig(slots=REQUESTS, rolling_windows=rolling))
    greedy = SamplingParams(max_tokens=new_tokens, temperature=0)
    engine.generate(_prompts(), greedy)  # compiles every span the workload reaches
    t0 = time.perf_counter()
    results = engine.generate(_prompts(), greedy)
    seconds = time.perf_counter() - t0
    return {
        "seconds": seconds,
        "tokens": sum(len(r.tokens) for r in results),
        "cache_bytes": sum(x.nbytes for x in jax.tree.leaves(engine.cache)),
        "first_tokens": [r.tokens[:64] for r in results],
        "all_tokens": [r.tokens for r in results],
    }


def transformers_worker(path: str, new_tokens: int) -> dict:
    import torch
    import transformers

    torch.set_num_threads(os.cpu_count() or 1)
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="sdpa")
    model.eval()
    inputs = torch.tensor(_prompts())
    kwargs = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, pad_token_id=0)
    with torch.inference_mode():
        model.generate(inputs, **kwargs)
        t0 = time.perf_counter()
        out = model.generate(inputs, return_dict_in_generate=True, **kwargs)
        seconds = time.perf_counter() - t0
    cache = out.past_key_values
    cache_bytes = sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))
    generated = out.sequences[:, PROMPT:]
    return {
        "seconds": seconds,
        "tokens": int(generated.numel()),
        "cache_bytes": cache_bytes,
        "first_tokens": generated[:, :64].tolist(),
    }


def run_peer(peer: str, path: str, new_tokens: int) -> dict | None:
    cmd = [str(PROJECT_PY), str(Path(__file__).resolve()), "--worker", peer, "--path", path]
    cmd += ["--new_tokens", str(new_tokens)]
    return run_worker(cmd, peer, timeout=3600)


PEERS = ("ring", "whole", "transformers")


def worker(peer: str, path: str, new_tokens: int) -> dict:
    if peer == "transformers":
        return transformers_worker(path, new_tokens)
    return engine_worker(path, peer == "ring", new_tokens)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    parser.add_argument("--export", help=argparse.SUPPRESS)
    parser.add_argument("--peers", nargs="+", default=list(PEERS), choices=PEERS)
    parser.add_argument("--rounds", type=int, default=2, help="fresh processes per peer")
    parser.add_argument("--new_tokens", type=int, default=1536, help="tokens each request generates")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.path, args.new_tokens)))
        return
    if args.export:
        export(args.export)
        print(json.dumps({"exported": args.export}))
        return
    report = {
        "time": time.strftime("%Y-%m-%d %H:%M:%S"),
        "shape": {**SHAPE, "seq_len": SEQ_LEN, "window": WINDOW, "requests": REQUESTS, "prompt": PROMPT},
        "new_tokens": args.new_tokens,
        "load_avg_before": os.getloadavg(),
    }
    runs: dict[str, list[dict]] = {p: [] for p in args.peers}
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "export")
        if run_worker([str(PROJECT_PY), str(Path(__file__).resolve()), "--export", path], "export", 600) is None:
            raise SystemExit("window_cache_bench: exporting the model failed (its error is above)")
        for r in range(args.rounds):
            order = args.peers[r % len(args.peers) :] + args.peers[: r % len(args.peers)]
            for peer in order:
                out = run_peer(peer, path, args.new_tokens)
                if out:
                    out["tokens_per_s"] = out["tokens"] / out["seconds"]
                    runs[peer].append(out)
                    print(f"[bench] {peer} round {r + 1}: {out['tokens_per_s']:.0f} tokens/s", file=sys.stderr)
    rows = {}
    for peer, outs in runs.items():
        if outs:
            rates = [o["tokens_per_s"] for o in outs]
            rows[peer] = {
                "tokens_per_s": statistics.median(rates),
                "min": min(rates),
                "max": max(rates),
                "rounds": len(rates),
                "cache_bytes": outs[-1]["cache_bytes"],
            }
    if runs.get("ring") and runs.get("whole"):
        a, b = runs["ring"][-1]["all_tokens"], runs["whole"][-1]["all_tokens"]
        report["ring_equals_whole"] = a == b
    if runs.get("ring") and runs.get("transformers"):
        a, b = runs["ring"][-1]["first_tokens"], runs["transformers"][-1]["first_tokens"]
        report["first_64_tokens_equal_transformers"] = sum(x == y for x, y in zip(a, b))
    report["peers"] = rows
    print(f"\ngenerated tokens/s, {REQUESTS} requests x {args.new_tokens} tokens, median [min-max]")
    for name, row in rows.items():
        ratios = "".join(
            f"  {row['tokens_per_s'] / rows[ref]['tokens_per_s']:.2f}x {ref}"
            for ref in ("whole", "transformers")
            if ref in rows
        )
        print(
            f"  {name:13s} {row['tokens_per_s']:7.0f} [{row['min']:.0f}-{row['max']:.0f}]"
            f"  cache {row['cache_bytes'] / 2**20:6.1f} MiB{ratios}"
        )
    for key in ("ring_equals_whole", "first_64_tokens_equal_transformers"):
        if key in report:
            print(f"  {key}: {report[key]}")
    write_report(report, args.out)


if __name__ == "__main__":
    main()
