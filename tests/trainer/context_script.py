"""Context parallelism on 8 simulated CPU devices: gradients against one device, and the 8k-token memory table.

    python context_script.py grads:cp8:ring grads:cp4_fsdp2:all_gather memory:8192 refuse

``grads:MESH:METHOD``: the tiny model's mean loss and every parameter's gradient on a packed batch (several
documents per row, GQA, a full and a sliding-window layer) computed under ``MESHES[MESH]`` with the context
attention ``METHOD``, and the largest difference from the same on one device. ``memory:SEQ``: the compiled bf16
training step of one SEQ-token row (the tiny model), on one device and under context 8 by each method; for each its
``memory_analysis()`` bytes per device and the bytes every collective moves per step (loops counted by their trip
counts). ``refuse``: what an unsupported attention backend under a context split raises. Prints one JSON report.
``XLA_FLAGS`` counts only before JAX initialises, hence a subprocess (as ``sharding_script.py``).
"""

import os
import sys

os.environ["JAX_PLATFORMS"] = "cpu"
os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"

import dataclasses  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
from collections import defaultdict  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from marin.trainer.axes import BATCH, SEQ, use_sharding  # noqa: E402
from marin.trainer.mesh import MeshConfig, sharding_context, tree_shardings  # noqa: E402
from marin.trainer.model import LlamaConfig, init_params, param_axes, training_loss  # noqa: E402
from marin.trainer.optim import OptimizerConfig  # noqa: E402
from marin.trainer.step import PrecisionPolicy, StepConfig, init_state, make_train_step, state_shardings  # noqa: E402

MESHES = {
    "single": (MeshConfig(data=1, fsdp=1), "fsdp"),
    "cp8": (MeshConfig(data=1, fsdp=1, context=8), "fsdp"),
    "cp4_fsdp2": (MeshConfig(data=1, fsdp=2, context=4), "fsdp"),
    "cp2_tp2_fsdp2": (MeshConfig(data=1, fsdp=2, context=2, tensor=2), "fsdp_tp"),
    "cp4_data2": (MeshConfig(data=2, fsdp=1, context=4), "dp"),
}
MODEL = LlamaConfig(
    vocab_size=256,
    hidden_dim=64,
    mlp_dim=128,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    seq_len=64,
    sliding_window=12,
    sliding_window_layers=(1,),
)


def packed_batch(rows: int, seq: int, seed: int = 0) -> dict:
    """Random tokens in documents of 5-40 tokens packed into rows, the loss masked at a few positions."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, MODEL.vocab_size, size=(rows, seq + 1), dtype=np.int32)
    segments = np.zeros((rows, seq), np.int32)
    for row in segments:
        cuts = np.cumsum(rng.integers(5, 40, size=seq))
        row[:] = np.searchsorted(cuts[cuts < seq], np.arange(seq), side="right")
    mask = (rng.random((rows, seq)) > 0.1).astype(np.float32)
    return {"input_ids": tokens[:, :-1], "targets": tokens[:, 1:], "segment_ids": segments, "loss_mask": mask}


def mean_loss(cfg: LlamaConfig, params, batch):
    loss_sum, weight, _ = training_loss(cfg, params, batch)
    return loss_sum / weight


def grads(mesh_name: str, method: str) -> dict:
    cfg = dataclasses.replace(MODEL, context_attention=method)
    params = jax.jit(init_params, static_argnums=0)(cfg, jax.random.PRNGKey(0))
    batch = packed_batch(4, cfg.seq_len)
    single_loss, single_grads = jax.jit(jax.value_and_grad(lambda p, b: mean_loss(cfg, p, b)))(params, batch)
    context = sharding_context(*MESHES[mesh_name])
    placed = jax.device_put(params, tree_shardings(context, param_axes(cfg), params))
    on_rows = context.sharding((BATCH, SEQ))
    placed_batch = {k: jax.device_put(v, on_rows) for k, v in batch.items()}

    def traced(p, b):
        with use_sharding(context):
            return jax.value_and_grad(lambda p: mean_loss(cfg, p, b))(p)

    loss, grad = jax.jit(traced)(placed, placed_batch)
    diffs = jax.tree.map(lambda a, b: float(np.max(np.abs(np.asarray(a) - np.asarray(b)))), grad, single_grads)
    names = [
        "/".join(str(getattr(k, "key", k)) for k in path) for path, _ in jax.tree_util.tree_leaves_with_path(diffs)
    ]
    return {
        "mesh": dict(context.mesh.shape),
        "loss": float(loss),
        "single_loss": float(single_loss),
        "grad_diffs": dict(zip(names, jax.tree.leaves(diffs))),
        "grad_scale": max(float(np.max(np.abs(np.asarray(g)))) for g in jax.tree.leaves(single_grads)),
        "segments_per_row": [int(s.max()) + 1 for s in batch["segment_ids"]],
    }


_COLLECTIVE = re.compile(r"= (.+?) (all-reduce|reduce-scatter|all-gather|all-to-all|collective-permute)(?:-start)?\(")
_ARRAY = re.compile(r"(\w+)\[([\d,]*)\]")
_DTYPE_BYTES = {"f32": 4, "bf16": 2, "s32": 4, "u32": 4, "f16": 2, "pred": 1, "s8": 1, "u8": 1}


def _group_size(line: str, devices: int) -> int:
    """How many devices a collective's groups hold (all of them when the groups are not spelled out as lists)."""
    groups = re.search(r"replica_groups=\{\{([\d,]*)\}", line)
    if groups:
        return len(groups.group(1).split(","))
    iota = re.search(r"replica_groups=\[\d+,(\d+)\]", line)
    return int(iota.group(1)) if iota else devices


def _sent(op: str, result_bytes: int, n: int) -> float:
    """Bytes one device sends for a collective of ``n`` devices with a result of ``result_bytes`` (ring algorithms:
    a gather or all-to-all sends (n-1)/n of its result, a reduce-scatter n-1 shards, an all-reduce twice (n-1)/n)."""
    if op == "collective-permute":
        return result_bytes
    if op == "reduce-scatter":
        return result_bytes * (n - 1)
    if op == "all-reduce":
        return 2 * result_bytes * (n - 1) / n
    return result_bytes * (n - 1) / n


def collective_bytes(text: str, devices: int = 8) -> dict[str, int]:
    """Bytes each device sends per execution of the program, per kind of collective: a collective in a ``while``
    body counts its loop's ``known_trip_count`` times (nested loops multiply); groups of one device count nothing."""
    computations = {}
    for computation in re.split(r"\n(?=\S)", text):
        header = computation.split("\n", 1)[0].split()
        if header:
            computations[(header[1] if header[0] == "ENTRY" else header[0]).lstrip("%")] = computation
    parents: dict[str, tuple[str, int]] = {}  # body -> (the computation holding its while, trips)
    for name, computation in computations.items():
        for line in computation.splitlines():
            if " while(" in line:
                body = re.search(r"body=%?([\w.\-]+)", line).group(1)
                trips = re.search(r'"known_trip_count":\{"n":"(\d+)"', line)
                parents[body] = (name, int(trips.group(1)) if trips else 1)
            for called in re.findall(r"(?:to_apply|calls|branch_computations=\{)=?%?([\w.\-]+)", line):
                parents.setdefault(called, (name, 1))

    def trips(name: str) -> int:
        total, seen = 1, set()
        while name in parents and name not in seen:
            seen.add(name)
            name, n = parents[name]
            total *= n
        return total

    found: dict[str, float] = defaultdict(float)
    for name, computation in computations.items():
        for line in computation.splitlines():
            match = _COLLECTIVE.search(line)
            n = _group_size(line, devices) if match else 1
            if match is None or n == 1:
                continue  # groups of one device (shard_map's transposes leave such no-ops) move nothing
            result, op = match.groups()
            for dtype, shape in _ARRAY.findall(result):  # a combined collective's result is a tuple
                size = int(np.prod([int(d) for d in shape.split(",") if d])) * _DTYPE_BYTES.get(dtype, 4)
                found[op] += _sent(op, size, n) * trips(name)
    return {op: int(total) for op, total in found.items()}


def compiled_step(seq: int, mesh_name: str, method: str):
    """The tiny model's bf16 AdamW train step for one ``seq``-token row, compiled under ``MESHES[mesh_name]``."""
    cfg = dataclasses.replace(
        MODEL, seq_len=seq, sliding_window=None, sliding_window_layers=None, context_attention=method
    )
    context = sharding_context(*MESHES[mesh_name])
    policy = PrecisionPolicy(compute_dtype="bfloat16")
    optimizer_cfg = OptimizerConfig()
    optimizer = optimizer_cfg.build(10, param_axes(cfg))
    state = jax.eval_shape(lambda key: init_state(cfg, optimizer, key, ema=False, policy=policy), jax.random.PRNGKey(0))
    shardings = state_shardings(context, cfg, optimizer, ema=False, policy=policy) if context else None
    if shardings is not None:
        state = jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), state, shardings)
    rows = context.sharding((BATCH, SEQ)) if context else None
    batch = {
        key: jax.ShapeDtypeStruct((1, seq), jnp.float32 if key == "loss_mask" else jnp.int32, sharding=rows)
        for key in ("input_ids", "targets", "segment_ids", "loss_mask")
    }
    schedule = optimizer_cfg.lr_schedule(10)
    step = make_train_step(cfg, optimizer, schedule, StepConfig(precision=policy), context=context, shardings=shardings)
    return step.lower(state, batch).compile()


def hlo(seq: int, mesh_name: str, method: str) -> dict:
    """The compiled step's collectives, one line each (for reading what moves)."""
    text = compiled_step(seq, mesh_name, method).as_text()
    return {
        "lines": [line.strip()[:300] for line in text.splitlines() if _COLLECTIVE.search(line) or " while(" in line]
    }


def memory(seq: int) -> dict:
    """Bytes per device and per step of the compiled step on one device and under context 8 (each method)."""
    out = {}
    for label, mesh_name, method in (
        ("single", "single", "default"),
        ("ring", "cp8", "ring"),
        ("all_gather", "cp8", "all_gather"),
    ):
        compiled = compiled_step(seq, mesh_name, method)
        analysis = compiled.memory_analysis()
        out[label] = {
            "temp_bytes": int(analysis.temp_size_in_bytes),
            "argument_bytes": int(analysis.argument_size_in_bytes),
            "output_bytes": int(analysis.output_size_in_bytes),
            "collective_bytes": collective_bytes(compiled.as_text()),
        }
    return out


def refuse() -> dict:
    from marin.trainer.attention import attention  # noqa: PLC0415

    context = sharding_context(*MESHES["cp8"])
    q = jnp.zeros((1, 64, 4, 16))
    k = jnp.zeros((1, 64, 2, 16))
    try:
        with use_sharding(context):
            jax.eval_shape(lambda q, k: attention(q, k, k, None, backend="reference"), q, k)
    except ValueError as e:
        return {"error": str(e)}
    return {"error": None}


def main(jobs: list[str]) -> dict:
    report = {"devices": jax.device_count(), "jobs": {}}
    for job in jobs:
        kind, *args = job.split(":")
        if kind == "grads":
            report["jobs"][job] = grads(*args)
        elif kind == "memory":
            report["jobs"][job] = memory(int(args[0]))
        elif kind == "hlo":
            report["jobs"][job] = hlo(int(args[0]), *args[1:])
        elif kind == "refuse":
            report["jobs"][job] = refuse()
        else:
            raise ValueError(f"unknown job {job!r}")
    return report


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])))
