"""Serving throughput and latency: the lab's server (continuous batching) against one-at-a-time generation
and ``transformers``' batched ``generate``, on the same weights.

    python benchmarks/serving_bench.py [--preset small] [--concurrency 1 4 16] [--requests_per_client 4]
        [--max_tokens 64] [--rounds 1] [--baseline REV] [--device cpu|gpu] [--peer_timeout 1800] [--budget S]

    # on one NVIDIA GPU (issue 39; benchmarks/gpu_proof.sh serving runs this):
    python benchmarks/serving_bench.py --device gpu --preset llama_1b --concurrency 1 16 64 \
        --peers server transformers

One model (``--preset``, random weights drawn once, exported to Hugging Face format with a small BPE), one
workload: every client sends its requests one after another (closed loop), each a prompt of 16-128 random
token ids and exactly ``--max_tokens`` generated tokens (``ignore_eos`` / ``min_new_tokens``: random weights
would stop anywhere). At each concurrency c:

- **server**: ``python -m marin.inference.serve`` in its own process, c client threads streaming from
  ``/v1/completions`` over loopback; time to first token is the first streamed chunk.
- **one at a time**: ``marin.inference.generate`` (the lab's generator before the engine) in its own
  process, c client threads sharing it one request at a time (a lock: a server without batching).
- **transformers**: ``LlamaForCausalLM.generate`` (greedy) in its own process on the export, the c clients'
  requests batched together (left-padded), batch after batch; a request's latency is its batch's, and it
  streams nothing (no time to first token). On the CPU: fp32, dynamic cache, padded to the batch's longest
  prompt. On a GPU: bf16, the static cache (which ``generate`` compiles with ``torch.compile`` on CUDA), every
  batch padded to the longest prompt the workload has (128), so each batch size compiles once, in warm-up.
- **transformers_eager**: the same on a GPU without the compilation (``disable_compile``): a number that
  costs no compile time, in case the compiled peer outlasts a lease.

``--device gpu``: the server and ``transformers`` run on the GPU (the server with its default ``--dtype auto``:
bf16 weights and cache), each peer process alone on it; one warm-up batch per concurrency first. vLLM, the
peer a user would name, is not run: its wheel is larger than what can travel to the lent machine.
The server serves a context of 128 + ``--max_tokens`` (``--max_model_len``: the longest request the workload
sends), which bounds its cache and the programs its warm-up compiles.

``--baseline REV`` adds ``server@REV``: the same server as of a git revision (``git archive`` of ``marin/``),
for before/after ratios measured in one run.

Each peer runs alone on the machine (the processes run one after another, not at once), after a warm-up
that compiles what it needs. Reported per concurrency: output tokens/s, TTFT p50, latency p50/p99, and the
server's ratio to each peer. A peer that fails or outlasts ``--peer_timeout`` is recorded with its error and
the others still run; the JSON is rewritten after every peer, so a run cut short keeps what it measured.
Results: stdout (Markdown) and benchmarks/results/serving_bench.json.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from host import cpu_model, export_revision  # noqa: E402  benchmarks/ is the script's own directory

RESULTS = Path(__file__).resolve().parent / "results"
ROOT = Path(__file__).resolve().parent.parent
LONGEST_PROMPT = 128  # prompts are 16-128 token ids


def worker_env(device: str) -> dict:
    """A peer process's environment: JAX on the CPU, or on the GPU with a persistent compilation cache (a
    second round compiles nothing)."""
    env = dict(os.environ)
    if device == "cpu":
        env["JAX_PLATFORMS"] = "cpu"
    else:
        env.pop("JAX_PLATFORMS", None)
        env.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(tempfile.gettempdir(), "serving-bench-jax-cache"))
    return env


def make_export(preset: str, path: str) -> None:
    """Random weights of ``preset`` (numpy draws: fast) and a small BPE, exported in HF format."""
    import random

    import jax
    import numpy as np

    from marin.corpus.domains import arithmetic, story
    from marin.inference import export_hf
    from marin.tokenize.tokenizer import TrainTokenizerConfig, build_bpe_tokenizer
    from marin.trainer.model.config import model_preset
    from marin.trainer.model.llama import init_params

    cfg = model_preset(preset)
    rng = random.Random(0)
    texts = [rng.choice([story, arithmetic])(rng) for _ in range(5000)]
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(30000)]
    texts += [" ".join(rng.choices(words, k=200)) for _ in range(1000)]
    if cfg.vocab_size > 8192:  # Llama 3's 128,256: enough distinct words for that many merges (~6 s on 2 cores)
        many = sorted({"".join(rng.choice(letters) for _ in range(rng.randint(4, 10))) for _ in range(200_000)})
        texts += [" ".join(many[i : i + 500]) for i in range(0, len(many), 500)] * 2
    # a vocabulary as large as the model's, so generated ids decode to text (and stream as it arrives)
    tokenizer = build_bpe_tokenizer(
        iter(texts), TrainTokenizerConfig(input_paths=["-"], output_path="-", vocab_size=cfg.vocab_size)
    )
    tok_path = f"{path}-tokenizer.json"
    Path(tok_path).write_text(tokenizer.to_str())
    rng = np.random.default_rng(0)
    shapes = jax.eval_shape(lambda: init_params(cfg, jax.random.PRNGKey(0)))
    params = jax.tree.map(
        lambda s: (
            rng.standard_normal(s.shape, np.float32) * np.float32(cfg.initializer_range)
            if len(s.shape) > 1
            else np.ones(s.shape, np.float32)
        ),
        shapes,
    )
    export_hf(cfg, params, path, tokenizer=tok_path)


def workload(c: int, per_client: int, vocab: int, seed: int = 0) -> list[list[list[int]]]:
    """Per client, its prompts (token ids)."""
    import random

    rng = random.Random(seed * 1000 + c)
    return [
        [[rng.randrange(1, vocab) for _ in range(rng.randint(16, 128))] for _ in range(per_client)] for _ in range(c)
    ]


def summarize(records: list[dict], wall: float, max_tokens: int) -> dict:
    latencies = sorted(r["latency"] for r in records)
    ttfts = sorted(r["ttft"] for r in records if r.get("ttft") is not None)

    def pct(values, q):
        return values[min(len(values) - 1, int(q * len(values)))] if values else None

    return {
        "requests": len(records),
        "output_tokens_per_s": len(records) * max_tokens / wall,
        "ttft_p50_s": pct(ttfts, 0.5),
        "latency_p50_s": pct(latencies, 0.5),
        "latency_p99_s": pct(latencies, 0.99),
        "wall_s": wall,
    }


# ---- peers (each in its own process) -----------------------------------------------------------------


def run_closed_loop(clients: list[list[list[int]]], ask) -> tuple[list[dict], float]:
    records, lock = [], threading.Lock()

    def client(prompts):
        for prompt in prompts:
            start = time.perf_counter()
            ttft = ask(prompt, start)
            record = {"latency": time.perf_counter() - start, "ttft": ttft}
            with lock:
                records.append(record)

    threads = [threading.Thread(target=client, args=(p,)) for p in clients]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return records, time.perf_counter() - t0


def peer_server(
    export: str, concurrency: list[int], per_client: int, max_tokens: int, vocab: int, device: str, root: Path = ROOT
) -> dict:
    """``root``: the directory whose ``marin`` package serves (an older revision's, for ``--baseline``)."""
    import socket

    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "marin.inference.serve",
            "--checkpoint",
            export,
            "--port",
            str(port),
            "--slots",
            str(max(concurrency)),
            *(["--max_model_len", str(LONGEST_PROMPT + max_tokens)] if device == "gpu" else []),
        ],
        cwd=root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + (900 if device == "gpu" else 300)  # its warm-up compiles every program
        while True:
            try:
                httpx.get(f"{url}/health", timeout=1)
                break
            except httpx.HTTPError:
                if server.poll() is not None or time.time() > deadline:
                    raise RuntimeError(f"server did not start: {server.stderr.read()[-2000:]}") from None
                time.sleep(0.2)
        client = httpx.Client(timeout=600, limits=httpx.Limits(max_connections=64))

        def ask(prompt, start):
            body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": True}
            ttft = None
            with client.stream("POST", f"{url}/v1/completions", json=body) as response:
                response.raise_for_status()
                for line in response.iter_lines():
                    if ttft is None and line.startswith("data: {"):
                        ttft = time.perf_counter() - start
            return ttft

        # warm-up (the server compiled its programs before listening): the connections, the first requests
        run_closed_loop(workload(4, 2, vocab, seed=99), ask)
        out = {}
        for c in concurrency:
            records, wall = run_closed_loop(workload(c, per_client, vocab), ask)
            out[c] = summarize(records, wall, max_tokens)
        return out
    finally:
        server.terminate()
        server.wait(60)


def peer_one_at_a_time(
    export: str, concurrency: list[int], per_client: int, max_tokens: int, vocab: int, device: str
) -> dict:
    from benchmarks.one_at_a_time import generate
    from marin.inference import load_model, place_params

    cfg, params, _ = load_model(export)
    params = place_params(cfg, params)
    serial = threading.Lock()

    def ask(prompt, start):
        with serial:
            generate(cfg, params, [prompt], max_tokens)
        return None

    for width in range(16, 129, 16):  # warm-up: one program per prompt bucket
        generate(cfg, params, [[1] * width], max_tokens)
    out = {}
    for c in concurrency:
        records, wall = run_closed_loop(workload(c, per_client, vocab), ask)
        out[c] = summarize(records, wall, max_tokens)
    return out


def peer_transformers(
    export: str, concurrency: list[int], per_client: int, max_tokens: int, vocab: int, device: str, compile=True
) -> dict:
    """``compile=False`` (the ``transformers_eager`` peer): the static cache without ``generate``'s
    ``torch.compile``, a number that costs no compilation (on the CPU ``generate`` never compiles)."""
    import torch
    from transformers import LlamaForCausalLM

    gpu = device == "gpu"
    if not gpu:
        torch.set_num_threads(os.cpu_count() or 1)
    model = LlamaForCausalLM.from_pretrained(export, dtype=torch.bfloat16 if gpu else torch.float32)
    model = model.to("cuda" if gpu else "cpu").eval()

    def run_batch(prompts):
        # on the GPU one width for every batch: the static cache's compiled programs are per shape
        width = LONGEST_PROMPT if gpu else max(len(p) for p in prompts)
        ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts], device=model.device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=model.device)
        with torch.inference_mode():
            out = model.generate(
                input_ids=ids,
                attention_mask=mask,
                max_new_tokens=max_tokens,
                min_new_tokens=max_tokens,
                do_sample=False,
                pad_token_id=0,
                **({"cache_implementation": "static", "disable_compile": not compile} if gpu else {}),
            )
        out.cpu()  # the batch is done when its tokens are on the host

    if gpu:  # one batch of each size: torch.compile's programs for it
        for c in concurrency:
            run_batch([prompts[0] for prompts in workload(c, 1, vocab, seed=99)])
    else:
        run_batch(workload(4, 1, vocab, seed=99)[0] * 4)
    out = {}
    for c in concurrency:
        clients = workload(c, per_client, vocab)
        records = []
        t0 = time.perf_counter()
        for i in range(per_client):  # closed loop, static batching: the c clients' i-th requests together
            start = time.perf_counter()
            run_batch([prompts[i] for prompts in clients])
            records += [{"latency": time.perf_counter() - start, "ttft": None}] * c
        out[c] = summarize(records, time.perf_counter() - t0, max_tokens)
    return out


PEERS = {
    "server": peer_server,
    "one_at_a_time": peer_one_at_a_time,
    "transformers": peer_transformers,
    "transformers_eager": functools.partial(peer_transformers, compile=False),
}


def accelerator() -> dict:
    """The GPU's name and the frameworks' versions (what a GPU run's numbers depend on)."""
    from importlib.metadata import PackageNotFoundError, version

    info = {}
    for package in ("jax", "jaxlib", "torch", "transformers"):
        try:
            info[package] = version(package)
        except PackageNotFoundError:
            info[package] = None
    try:
        query = ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"]
        info["gpu"] = subprocess.run(query, capture_output=True, text=True, timeout=30).stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        info["gpu"] = None
    return info


def run_peer(command: list[str], device: str, timeout: float) -> dict:
    """One peer's process: its numbers per concurrency, or {"error": why} (a failure or a timeout). The peer
    runs in its own process group, so a timeout also stops the server it started (which holds the GPU)."""
    import signal

    proc = subprocess.Popen(
        command,
        cwd=ROOT,
        env=worker_env(device),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, stderr = proc.communicate()
        return {"error": f"timed out after {timeout:.0f} s: {stderr[-1500:]}"}
    if proc.returncode:
        return {"error": f"exit {proc.returncode}: {stderr[-3000:]}"}
    return {int(k): v for k, v in json.loads(stdout.strip().splitlines()[-1]).items()}


def table_lines(args, host: dict, rounds: dict) -> tuple[dict, list[str]]:
    """Medians over the rounds per peer and concurrency, and the Markdown table."""

    def median(peer, c, key):
        values = [r[c][key] for r in measured[peer] if r[c][key] is not None]
        return statistics.median(values) if values else None

    measured = {peer: [r for r in runs if "error" not in r] for peer, runs in rounds.items()}
    table = {
        peer: {c: {k: median(peer, c, k) for k in ok[0][c]} for c in args.concurrency}
        for peer, ok in measured.items()
        if ok
    }
    where = f"{host['cpu']}, {host['cores']} cores" + (f"; GPU {host['gpu']}" if args.device == "gpu" else "")
    lines = [
        f"Serving, `{args.preset}` preset, {args.max_tokens} output tokens per request, prompts 16-128 tokens, "
        f"{args.requests_per_client} requests per client, median of {args.rounds} round(s); {where}, "
        f"{time.strftime('%Y-%m-%d')}",
        "",
        "| clients | peer | output tok/s | TTFT p50 (s) | latency p50 (s) | latency p99 (s) | server / peer |",
        "|---|---|---|---|---|---|---|",
    ]

    def fmt(value, spec):
        return "n/a" if value is None else format(value, spec)

    for c in args.concurrency:
        ours = table.get("server", {}).get(c, {}).get("output_tokens_per_s")
        for peer in table:
            row = table[peer][c]
            theirs = row["output_tokens_per_s"]
            ratio = f"{ours / theirs:.2f}x" if ours and theirs and peer != "server" else "-"
            lines.append(
                f"| {c} | {peer} | {fmt(theirs, '.0f')} | {fmt(row['ttft_p50_s'], '.3f')} | "
                f"{fmt(row['latency_p50_s'], '.2f')} | {fmt(row['latency_p99_s'], '.2f')} | {ratio} |"
            )
    for peer in rounds:
        for r in rounds[peer]:
            if "error" in r:
                lines.append(f"\n{peer} failed: {r['error'][-500:]}")
    return table, lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--requests_per_client", type=int, default=4)
    parser.add_argument("--max_tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--peers", nargs="+", default=["server", "one_at_a_time", "transformers"], choices=list(PEERS))
    parser.add_argument("--device", choices=["cpu", "gpu"], default="cpu")
    parser.add_argument("--peer_timeout", type=float, default=1800, help="seconds one peer's process may take")
    parser.add_argument(
        "--budget", type=float, default=None, help="seconds for the whole run: a peer still running then is stopped"
    )
    parser.add_argument("--worker", choices=list(PEERS), help=argparse.SUPPRESS)
    parser.add_argument("--export", help=argparse.SUPPRESS)
    parser.add_argument("--server_root", help=argparse.SUPPRESS)
    parser.add_argument("--baseline", nargs="*", default=[], help="also serve as of these git revisions")
    parser.add_argument("--out", default=str(RESULTS / "serving_bench.json"))
    args = parser.parse_args()

    if args.worker:  # one peer, in this process; its numbers as JSON on stdout's last line
        # (the config's JSON read directly: importing the lab here could start JAX on the GPU in this process,
        # which would take the memory the server it starts needs)
        vocab = json.loads(Path(args.export, "config.json").read_text())["vocab_size"]
        more = {"root": Path(args.server_root)} if args.server_root else {}
        result = PEERS[args.worker](
            args.export, args.concurrency, args.requests_per_client, args.max_tokens, vocab, args.device, **more
        )
        print(json.dumps(result))
        return

    os.environ["JAX_PLATFORMS"] = "cpu"  # this process only writes the export; the peers hold the device
    # (name, worker, extra worker arguments): the peers, then the server as of each --baseline revision
    runs = [(peer, peer, []) for peer in args.peers]
    runs += [(f"server@{rev}", "server", ["--server_root", str(export_revision(rev))]) for rev in args.baseline]
    host = {"cpu": cpu_model(), "cores": os.cpu_count(), "python": platform.python_version(), **accelerator()}
    rounds: dict[str, list[dict]] = {name: [] for name, _, _ in runs}

    def write():
        table, lines = table_lines(args, host, rounds)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        record = {"args": vars(args), "host": host, "median": table, "rounds": rounds, "table": lines}
        Path(args.out).write_text(json.dumps(record, indent=2))
        return lines

    begun = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        export = f"{tmp}/export"
        started = time.perf_counter()
        make_export(args.preset, export)
        print(f"exported {args.preset} in {time.perf_counter() - started:.0f} s", flush=True)
        for _ in range(args.rounds):
            for peer, worker, extra in runs:
                command = [sys.executable, __file__, "--worker", worker, "--export", export, *extra]
                command += ["--device", args.device, "--concurrency", *map(str, args.concurrency)]
                command += ["--requests_per_client", str(args.requests_per_client)]
                command += ["--max_tokens", str(args.max_tokens)]
                started = time.perf_counter()
                timeout = args.peer_timeout
                if args.budget is not None:  # stop a peer in time to record it, not be killed with the run
                    timeout = max(1.0, min(timeout, args.budget - (started - begun)))
                rounds[peer].append(run_peer(command, args.device, timeout))
                print(f"{peer}: {time.perf_counter() - started:.0f} s", flush=True)
                write()
    print("\n".join(write()))


if __name__ == "__main__":
    main()
