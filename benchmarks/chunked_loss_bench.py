"""The blocked next-token loss (``TrainerConfig.loss_block``) beside the whole logits: step time and XLA's
temporary memory of the compiled training step, one process, the peers alternated round by round.

    python benchmarks/chunked_loss_bench.py [--width 12] [--vocab 2048] [--seq 128] [--batch 16]
        [--blocks 0,4096,1024] [--rounds 3] [--steps 50] [--out benchmarks/results/chunked_loss_bench.json]

Block 0 is the whole logits. The defaults are the optimizer study's smallest model (``exp_optimizers``: nano
family width 12, the 2,048-token BPE, 16 x 128), where the vocabulary dominates a CPU step; ``--vocab 131072
--width 256 --seq 512 --batch 8`` is Llama 3's vocabulary on a small model, where the logits dominate memory.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.host import cpu_model
from marin.scaling.ladder import nano_family
from marin.trainer.model import param_axes
from marin.trainer.optim import OptimizerConfig
from marin.trainer.step import PrecisionPolicy, StepConfig, init_state, make_train_step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--width", type=int, default=12)
    parser.add_argument("--vocab", type=int, default=2048)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--blocks", default="0,4096,1024")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    model = nano_family(vocab_size=args.vocab, seq_len=args.seq, widths=(args.width,))[0]
    policy = PrecisionPolicy(compute_dtype="float32")
    optimizer_cfg = OptimizerConfig(learning_rate=1e-3)
    optimizer = optimizer_cfg.build(10_000, param_axes(model))
    rng = np.random.default_rng(0)
    ids = rng.integers(0, args.vocab, (args.batch, args.seq + 1)).astype(np.int32)
    batch = {
        "input_ids": ids[:, :-1],
        "targets": ids[:, 1:],
        "segment_ids": np.zeros((args.batch, args.seq), np.int32),
        "loss_mask": np.ones((args.batch, args.seq), np.float32),
    }
    peers = {}
    for block in (int(b) for b in args.blocks.split(",")):
        config = StepConfig(precision=policy, loss_block=block or None)
        step = make_train_step(model, optimizer, optimizer_cfg.lr_schedule(10_000), config)
        state = init_state(model, optimizer, jax.random.PRNGKey(0), ema=False, policy=policy)
        compiled = step.lower(state, batch).compile()
        peers[block] = {"step": step, "state": state, "ms": []}
        peers[block]["temp_mib"] = compiled.memory_analysis().temp_size_in_bytes / 2**20
        state, metrics = step(state, batch)  # warm
        peers[block]["state"] = state
        jax.block_until_ready(metrics)
    for _ in range(args.rounds):
        for peer in peers.values():
            state, start = peer["state"], time.perf_counter()
            for _ in range(args.steps):
                state, metrics = peer["step"](state, batch)
            jax.block_until_ready(metrics)
            peer["ms"].append((time.perf_counter() - start) / args.steps * 1e3)
            peer["state"] = state
    whole = statistics.median(peers[min(peers)]["ms"]) if 0 in peers else None
    rows = []
    for block, peer in peers.items():
        median = statistics.median(peer["ms"])
        rows.append(
            {
                "loss_block": block or None,
                "ms_per_step": median,
                "ms_range": [min(peer["ms"]), max(peer["ms"])],
                "temp_mib": peer["temp_mib"],
                "speed_vs_whole": whole / median if whole else None,
            }
        )
        ratio = f"{whole / median:.2f}x" if whole else "-"
        print(
            f"loss_block {block or 'whole':>6}: {median:7.2f} ms/step [{min(peer['ms']):.2f}-{max(peer['ms']):.2f}] "
            f"{ratio:>6}  temporaries {peer['temp_mib']:.1f} MiB"
        )
    if args.out:
        record = {"host": cpu_model(), "jax": jax.__version__, "args": vars(args), "peers": rows}
        with open(args.out, "w") as f:
            json.dump(record, f, indent=2)


if __name__ == "__main__":
    jnp.zeros(())  # start the runtime before timing anything
    main()
