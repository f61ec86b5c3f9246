"""The lab's Muon update beside ``torch.optim.Muon`` (eager and ``torch.compile``) on the same matrices.

    .venv/bin/python benchmarks/muon_bench.py                       # medium's hidden matrices, 3 rounds
    .venv/bin/python benchmarks/muon_bench.py --configs small medium --rounds 5
    .venv/bin/python benchmarks/muon_bench.py --peers jax jax_bf16 --out /tmp/muon.json   # the lab's two precisions

What is timed is the optimizer alone, on the hidden matrices Muon owns (``trainer_bench``'s ``small`` or
``medium`` model: per layer wq, wk, wv, wo, w_gate, w_up, w_down): one update is momentum, Nesterov, five
Newton–Schulz steps, the shape scale, decoupled weight decay and the parameter update, from one gradient per
matrix. The embedding and head (AdamW under both) are left out, so the ratio is Muon's. Peers:

* ``jax``: ``OptimizerConfig(kind="muon").build`` over the stacked ``[layers, ...]`` matrices with their
  logical axes, ``tx.update`` + ``apply_updates`` jitted with the parameters and state donated, as the
  trainer's step runs it; Newton–Schulz in fp32, batched over the layers;
* ``jax_bf16``: the same with ``muon_ns_dtype="bfloat16"`` (bf16 operands, fp32 accumulation and iterate);
* ``torch_eager``: ``torch.optim.Muon`` (torch 2.13, its own defaults: Newton–Schulz in bf16, one matrix at
  a time) on the same matrices, one 2-D tensor per layer and projection;
* ``torch_compile``: the same with ``optimizer.step`` under ``torch.compile``;
* ``torch_fp32``: torch's Muon with its Newton–Schulz in fp32 (the lab's default precision), eager: the
  cast is replaced by monkeypatching ``Tensor.bfloat16``, which ``torch.compile`` does not see (compiled, the
  patched step ran as fast as bf16's, 0.93 s against eager fp32's 3.53 s at ``medium``, 2026-11-30).

Every peer runs in a fresh process per round, the order rotating; each process runs ``--steps`` untimed
updates (the first compiles) and ``--steps`` timed ones, synchronized once at the end. The table gives the
median seconds per update over rounds with min and max as the noise, and ours against each peer.
Results go to ``benchmarks/results/muon_bench.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from host import run_worker, trainer_env, write_report  # noqa: E402
from trainer_bench import CONFIGS, PROJECT_PY, TORCH_VENV, ensure_venv, model_dims  # noqa: E402

RESULTS = HERE / "results" / "muon_bench.json"
LR, WD, MOMENTUM, NS_STEPS = 0.02, 0.1, 0.95, 5
MATRICES = ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down")


def jax_worker(config: str, steps: int, ns_dtype: str = "float32") -> dict:
    import jax
    import numpy as np

    from marin.trainer.loop import tune_host_allocator
    from marin.trainer.model import LlamaConfig, init_params, param_axes
    from marin.trainer.optim import OptimizerConfig

    tune_host_allocator()
    cfg = LlamaConfig(**model_dims(CONFIGS[config]))
    layers = init_params(cfg, jax.random.PRNGKey(0))["layers"]
    params = {"layers": {name: layers[name] for name in MATRICES}}
    axes = {"layers": {name: param_axes(cfg)["layers"][name] for name in MATRICES}}
    opt = OptimizerConfig(
        kind="muon",
        learning_rate=LR,
        weight_decay=WD,
        muon_momentum=MOMENTUM,
        muon_ns_steps=NS_STEPS,
        muon_ns_dtype=ns_dtype,
        max_grad_norm=None,
        schedule="constant",
        warmup=0,
    )
    tx = opt.build(1000, axes)
    state = tx.init(params)
    rng = np.random.default_rng(0)
    grads = jax.device_put(jax.tree.map(lambda p: rng.standard_normal(p.shape, np.float32), params))

    def update(params, state, grads):
        updates, state = tx.update(grads, state, params)
        return jax.tree.map(lambda p, u: p + u, params, updates), state

    update = jax.jit(update, donate_argnums=(0, 1))
    for _ in range(steps):
        params, state = update(params, state, grads)
    jax.block_until_ready(params)
    t0 = time.perf_counter()
    for _ in range(steps):
        params, state = update(params, state, grads)
    jax.block_until_ready(params)
    count = sum(p.size for p in jax.tree.leaves(params))
    return {"seconds": time.perf_counter() - t0, "steps": steps, "parameters": int(count)}


def torch_worker(config: str, steps: int, compile: bool, fp32: bool) -> dict:
    import torch

    c = CONFIGS[config]
    d, heads, kv, mlp = c["hidden_dim"], c["num_heads"], c["num_kv_heads"], c["mlp_dim"]
    head_dim = d // heads
    shapes = [(d, heads * head_dim), (d, kv * head_dim), (d, kv * head_dim), (heads * head_dim, d)]
    shapes += [(d, mlp), (d, mlp), (mlp, d)]
    gen = torch.Generator().manual_seed(0)
    params = [
        torch.nn.Parameter(torch.randn(o, i, generator=gen) * 0.02)
        for _ in range(c["num_layers"])
        for (i, o) in shapes  # torch's Linear layout: [out, in]
    ]
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen)
    if fp32:  # the lab's precision: Newton–Schulz on an fp32 copy where torch casts to bf16 (this process only)
        torch.Tensor.bfloat16 = lambda self, *args, **kwargs: self.clone()
    opt = torch.optim.Muon(
        params, lr=LR, weight_decay=WD, momentum=MOMENTUM, nesterov=True, ns_steps=NS_STEPS, adjust_lr_fn="original"
    )
    step = torch.compile(opt.step) if compile else opt.step
    with torch.no_grad():
        for _ in range(steps):
            step()
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
    return {"seconds": time.perf_counter() - t0, "steps": steps, "parameters": sum(p.numel() for p in params)}


PEERS = {
    "jax": ("project", lambda config, steps: jax_worker(config, steps)),
    "jax_bf16": ("project", lambda config, steps: jax_worker(config, steps, ns_dtype="bfloat16")),
    "torch_eager": ("torch", lambda config, steps: torch_worker(config, steps, compile=False, fp32=False)),
    "torch_compile": ("torch", lambda config, steps: torch_worker(config, steps, compile=True, fp32=False)),
    "torch_fp32": ("torch", lambda config, steps: torch_worker(config, steps, compile=False, fp32=True)),
}


def run_peer(python: Path, peer: str, config: str, steps: int) -> dict | None:
    cmd = [str(python), str(Path(__file__).resolve()), "--worker", peer, "--config", config, "--steps", str(steps)]
    return run_worker(cmd, peer, timeout=1800, env=trainer_env() if PEERS[peer][0] == "project" else None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--config", help=argparse.SUPPRESS)
    parser.add_argument("--configs", nargs="+", default=["medium"], choices=["nano", "small", "medium"])
    parser.add_argument("--peers", nargs="+", default=list(PEERS), choices=list(PEERS))
    parser.add_argument("--rounds", type=int, default=3, help="fresh processes per peer and config")
    parser.add_argument("--steps", type=int, default=10, help="untimed, then timed updates per process")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(PEERS[args.worker][1](args.config, args.steps)))
        return
    pythons = {"project": PROJECT_PY}
    if any(PEERS[p][0] == "torch" for p in args.peers):  # the export-test extra's CPU torch, else a bench venv
        has_torch = subprocess.run([str(PROJECT_PY), "-c", "import torch"], capture_output=True).returncode == 0
        pythons["torch"] = PROJECT_PY if has_torch else ensure_venv(TORCH_VENV, ["torch==2.13.0", "numpy"])
    peers = [p for p in args.peers if pythons.get(PEERS[p][0])]
    report = {"time": time.strftime("%Y-%m-%d %H:%M:%S"), "load_avg_before": os.getloadavg(), "configs": {}}
    for config in args.configs:
        runs: dict[str, list[float]] = {p: [] for p in peers}
        for r in range(args.rounds):
            for peer in peers[r % len(peers) :] + peers[: r % len(peers)]:
                out = run_peer(pythons[PEERS[peer][0]], peer, config, args.steps)
                if out:
                    runs[peer].append(out["seconds"] / out["steps"])
                    print(f"[bench] {config}/{peer} round {r + 1}: {runs[peer][-1] * 1e3:.1f} ms", file=sys.stderr)
        rows = {
            p: {"seconds_per_update": statistics.median(s), "min": min(s), "max": max(s), "rounds": len(s)}
            for p, s in runs.items()
            if s
        }
        report["configs"][config] = rows
        print(f"\n{config}: seconds per Muon update, median [min-max] over fresh processes")
        labs = {lab: rows[lab]["seconds_per_update"] for lab in ("jax", "jax_bf16") if lab in rows}
        print("  (the last columns: how many times as fast as this peer each of the lab's runs is)")
        for name, row in rows.items():
            speed = "".join(f"  {lab} {row['seconds_per_update'] / s:.2f}x" for lab, s in labs.items())
            spread = f"[{row['min'] * 1e3:.1f}-{row['max'] * 1e3:.1f}]"
            print(f"  {name:14s} {row['seconds_per_update'] * 1e3:8.1f} ms {spread}{speed}")
    write_report(report, args.out)


if __name__ == "__main__":
    main()
