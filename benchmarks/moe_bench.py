"""A mixture-of-experts training step: the lab's three dispatches beside transformers' Mixtral in torch.

    .venv/bin/python benchmarks/moe_bench.py                      # small-class MoE, 2 rounds, every peer
    .venv/bin/python benchmarks/moe_bench.py --rounds 3 --peers jax_dense torch_compile
    .venv/bin/python benchmarks/moe_bench.py --dtype bfloat16 --out benchmarks/results/moe_bench_bf16.json

The shape is ``trainer_bench``'s ``small`` with its MLP made a MoE of the same active width: 8 experts of 688
(top-2, so 2 x 688 = small's 1376 active), vocab 8192, hidden 512, 6 layers, 8/4 heads, seq 512, batch 8. A
step is forward, backward (cross-entropy plus the load-balancing loss) and AdamW, in fp32 for every peer, or
with ``--dtype bfloat16`` in mixed precision for every peer (fp32 parameters and AdamW, bf16 matmuls: the lab's
``PrecisionPolicy``, torch's CPU autocast), what a host with AMX or AVX512-BF16 runs best. Peers:

* ``jax_dense``, ``jax_ragged``, ``jax_blocked``, ``jax_capacity``: the lab's jitted train step
  (``make_train_step``) with ``moe_dispatch="dense"`` (every expert on every token, one-hot combine),
  ``"ragged"`` (sorted assignments, ``jax.lax.ragged_dot``), ``"blocked"`` (sorted assignments padded to blocks,
  a batched matmul over gathered expert weights) and ``capacity_factor=1.25`` (GShard buffers; drops the
  overflow);
* ``jax_blocked_4k``: ``jax_blocked`` started with the trainer's tunables less huge pages (what they give);
* ``torch_eager``: transformers' ``MixtralForCausalLM`` (the same shapes, sdpa attention,
  ``output_router_logits=True`` so its loss has the same aux term) with ``torch.optim.AdamW``;
* ``torch_compile``: the same model under ``torch.compile``.

Every peer runs in a fresh process per round, the order rotating; each process runs ``--steps`` untimed steps
(compiling) and ``--steps`` timed ones, the lab's with the environment the executor gives a CPU training step
(``host.trainer_env``: the malloc policy, huge pages included), torch's with its defaults. The table gives
median tokens/s over rounds, min and max as the noise, and each peer against the best torch. Results go to
``benchmarks/results/moe_bench.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from host import run_worker, trainer_env, write_report  # noqa: E402  benchmarks/ is the script's own directory

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PROJECT_PY = ROOT / ".venv" / "bin" / "python"
RESULTS = HERE / "results" / "moe_bench.json"

SHAPE = dict(vocab_size=8192, hidden_dim=512, num_layers=6, num_heads=8, num_kv_heads=4, seq_len=512)
EXPERTS, TOP_K, EXPERT_WIDTH, BATCH = 8, 2, 688, 8
AUX = 0.01
LR, WD = 1e-3, 0.1


def _batch():
    import numpy as np

    rng = np.random.default_rng(0)
    tokens = rng.integers(0, SHAPE["vocab_size"], size=(BATCH, SHAPE["seq_len"] + 1))
    return tokens[:, :-1], tokens[:, 1:]


def jax_worker(dispatch: str, steps: int, dtype: str) -> dict:
    import jax
    import numpy as np

    from marin.trainer.loop import tune_host_allocator
    from marin.trainer.model import LlamaConfig, param_axes
    from marin.trainer.optim import OptimizerConfig
    from marin.trainer.step import PrecisionPolicy, StepConfig, init_state, make_train_step

    tune_host_allocator()
    options = {"capacity": dict(capacity_factor=1.25)}.get(dispatch, dict(moe_dispatch=dispatch))
    cfg = LlamaConfig(
        **SHAPE,
        mlp_dim=EXPERT_WIDTH,
        num_experts=EXPERTS,
        experts_per_token=TOP_K,
        router_aux_loss_coef=AUX,
        **options,
    )
    opt = OptimizerConfig(learning_rate=LR, weight_decay=WD, schedule="constant", warmup=0)
    tx = opt.build(1000, param_axes(cfg))
    policy = PrecisionPolicy(compute_dtype=dtype)
    step = make_train_step(cfg, tx, opt.lr_schedule(1000), StepConfig(precision=policy))
    state = init_state(cfg, tx, jax.random.PRNGKey(0), ema=False, policy=policy)
    inputs, targets = _batch()
    batch = jax.device_put(
        dict(
            input_ids=inputs.astype(np.int32),
            targets=targets.astype(np.int32),
            segment_ids=np.ones_like(inputs, np.int32),
            loss_mask=np.ones(inputs.shape, np.float32),
        )
    )
    for _ in range(steps):
        state, metrics = step(state, batch)
    jax.block_until_ready(state)
    t0 = time.perf_counter()
    for _ in range(steps):
        state, metrics = step(state, batch)
    jax.block_until_ready(state)
    return {"seconds": time.perf_counter() - t0, "steps": steps, "loss": float(metrics["loss"])}


def torch_worker(compile: bool, steps: int, dtype: str) -> dict:
    import torch
    import transformers

    torch.manual_seed(0)
    torch.set_num_threads(os.cpu_count() or 1)
    config = transformers.MixtralConfig(
        vocab_size=SHAPE["vocab_size"],
        hidden_size=SHAPE["hidden_dim"],
        intermediate_size=EXPERT_WIDTH,
        num_hidden_layers=SHAPE["num_layers"],
        num_attention_heads=SHAPE["num_heads"],
        num_key_value_heads=SHAPE["num_kv_heads"],
        max_position_embeddings=SHAPE["seq_len"],
        num_local_experts=EXPERTS,
        num_experts_per_tok=TOP_K,
        router_aux_loss_coef=AUX,
        output_router_logits=True,
        attn_implementation="sdpa",
    )
    model = transformers.MixtralForCausalLM(config).train()
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WD, betas=(0.9, 0.95))
    inputs, targets = (torch.tensor(a) for a in _batch())

    def train_step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bfloat16"):
            out = model(input_ids=inputs, labels=None)
        logits = out.logits.float()
        loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))
        loss = loss + AUX * out.aux_loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    if compile:
        model = torch.compile(model)
    for _ in range(steps):
        loss = train_step()
    t0 = time.perf_counter()
    for _ in range(steps):
        loss = train_step()
    return {"seconds": time.perf_counter() - t0, "steps": steps, "loss": float(loss)}


PEERS = {
    "jax_dense": lambda steps, dtype: jax_worker("dense", steps, dtype),
    "jax_ragged": lambda steps, dtype: jax_worker("ragged", steps, dtype),
    "jax_blocked": lambda steps, dtype: jax_worker("blocked", steps, dtype),
    "jax_capacity": lambda steps, dtype: jax_worker("capacity", steps, dtype),
    "jax_blocked_4k": lambda steps, dtype: jax_worker("blocked", steps, dtype),
    "torch_eager": lambda steps, dtype: torch_worker(False, steps, dtype),
    "torch_compile": lambda steps, dtype: torch_worker(True, steps, dtype),
}


def run_peer(peer: str, steps: int, dtype: str) -> dict | None:
    cmd = [str(PROJECT_PY), str(Path(__file__).resolve()), "--worker", peer, "--steps", str(steps), "--dtype", dtype]
    env = trainer_env(huge_pages=not peer.endswith("_4k")) if peer.startswith("jax") else None
    return run_worker(cmd, peer, timeout=3600, env=env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--peers", nargs="+", default=list(PEERS), choices=list(PEERS))
    parser.add_argument("--rounds", type=int, default=2, help="fresh processes per peer")
    parser.add_argument("--steps", type=int, default=3, help="untimed, then timed steps per process")
    parser.add_argument(
        "--dtype",
        choices=("float32", "bfloat16"),
        default="float32",
        help="every peer's compute dtype (bfloat16: fp32 parameters and AdamW, bf16 matmuls; torch autocast)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(PEERS[args.worker](args.steps, args.dtype)))
        return
    tokens = BATCH * SHAPE["seq_len"]
    report = {
        "time": time.strftime("%Y-%m-%d %H:%M:%S"),
        "dtype": args.dtype,
        "shape": {**SHAPE, "experts": EXPERTS, "top_k": TOP_K, "expert_width": EXPERT_WIDTH, "batch": BATCH},
        "load_avg_before": os.getloadavg(),
        "peers": {},
    }
    runs: dict[str, list[float]] = {p: [] for p in args.peers}
    for r in range(args.rounds):
        order = args.peers[r % len(args.peers) :] + args.peers[: r % len(args.peers)]
        for peer in order:
            out = run_peer(peer, args.steps, args.dtype)
            if out:
                runs[peer].append(tokens * out["steps"] / out["seconds"])
                print(f"[bench] {peer} round {r + 1}: {runs[peer][-1]:.0f} tokens/s", file=sys.stderr)
    rows = {
        p: {"tokens_per_s": statistics.median(s), "min": min(s), "max": max(s), "rounds": len(s)}
        for p, s in runs.items()
        if s
    }
    report["peers"] = rows
    best_torch = max((rows[p]["tokens_per_s"] for p in ("torch_eager", "torch_compile") if p in rows), default=None)
    print("\ntokens/s per training step, median [min-max] over fresh processes")
    for name, row in rows.items():
        ratio = f"  {row['tokens_per_s'] / best_torch:.2f}x the best torch" if best_torch else ""
        print(f"  {name:14s} {row['tokens_per_s']:9.0f} [{row['min']:.0f}-{row['max']:.0f}]{ratio}")
    write_report(report, args.out)


if __name__ == "__main__":
    main()
