"""Muon's update on parameters sharded over the host's devices (FSDP: the ``embed`` axis; TP: ``heads`` and
``mlp``) against the one-device update, for the Newton–Schulz precisions named on the command line (default:
all). Run with ``XLA_FLAGS=--xla_force_host_platform_device_count=8``; prints one JSON line
(tests/trainer/test_optimizers.py)."""

from __future__ import annotations

import json
import sys

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from marin.trainer.model import LlamaConfig, init_params, param_axes
from marin.trainer.muon import NS_DTYPES
from marin.trainer.optim import OptimizerConfig

CFG = LlamaConfig(vocab_size=64, hidden_dim=64, num_layers=2, num_heads=8, num_kv_heads=8, mlp_dim=128, seq_len=16)
STRATEGIES = {"fsdp": ("embed",), "tp": ("heads", "mlp")}


def spec(axes: tuple, sharded: tuple[str, ...]) -> P:
    """The first of ``axes`` named in ``sharded`` goes over the mesh; the rest are replicated."""
    first = next((i for i, a in enumerate(axes) if a in sharded), None)
    return P(*["x" if i == first else None for i in range(len(axes))])


def main(dtypes: list[str]) -> dict:
    params = init_params(CFG, jax.random.key(0))
    leaves, treedef = jax.tree.flatten(params)
    grads = treedef.unflatten([jax.random.normal(jax.random.key(i), p.shape) for i, p in enumerate(leaves)])
    axes = jax.tree.leaves(param_axes(CFG), is_leaf=lambda x: isinstance(x, tuple))
    mesh = Mesh(np.array(jax.devices()), ("x",))
    report = {"devices": jax.device_count()}
    for dtype in dtypes:
        opt = OptimizerConfig(kind="muon", learning_rate=0.02, muon_ns_dtype=dtype, schedule="constant", warmup=0)
        tx = opt.build(10, param_axes(CFG))

        def three_updates(params, grads, tx=tx):
            state = tx.init(params)
            for _ in range(3):
                updates, state = tx.update(grads, state, params)
                params = jax.tree.map(lambda p, u: p + u, params, updates)
            return params

        single = jax.device_get(jax.jit(three_updates)(params, grads))
        moved = max(float(np.max(np.abs(b - np.asarray(a)))) for a, b in zip(leaves, jax.tree.leaves(single)))
        for name, sharded in STRATEGIES.items():
            shardings = treedef.unflatten([NamedSharding(mesh, spec(a, sharded)) for a in axes])
            run = jax.jit(three_updates, in_shardings=(shardings, shardings), out_shardings=shardings)
            result = jax.device_get(run(jax.device_put(params, shardings), jax.device_put(grads, shardings)))
            diff = max(float(np.max(np.abs(a - b))) for a, b in zip(jax.tree.leaves(result), jax.tree.leaves(single)))
            count = sum(any(s is not None for s in spec(a, sharded)) for a in axes)
            report[f"{dtype}/{name}"] = {"max_diff": diff, "displacement": moved, "sharded_leaves": count}
    return report


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:] or list(NS_DTYPES))))
