"""Train the tiny model under several meshes on 8 simulated CPU devices; print one JSON report.

    python sharding_script.py OUTPUT_DIR [--eval] [--optimizer=muon] [--moe] single fsdp tp restore:fsdp:tp \
        init_from:fsdp:tp block:fsdp_tp

``XLA_FLAGS=--xla_force_host_platform_device_count=8`` only takes effect before JAX initialises, and the
pytest process initialised it long ago, hence a subprocess. Each run name is a key of ``RUNS`` (a mesh and a
sharding preset; ``single`` is a 1-device mesh, i.e. the unsharded program) and trains 5 steps through
``train()``; ``restore:SRC:DST`` resumes the finished run ``SRC`` (which must come earlier in the list)
under ``DST``'s mesh and rules, which restores its final checkpoint and trains nothing;
``init_from:SRC:DST`` builds ``DST``'s initial state with ``initialize_from`` pointing at ``SRC`` (its EMA
becomes the parameters); ``block:RUN`` trains ``RUN`` with the loss computed ``LOSS_BLOCK`` positions at a
time (``TrainerConfig.loss_block``), compared with the ``single`` run as the others are; ``collectives:RUN``
compiles the blocked loss's gradient under ``RUN``'s mesh and rules and reports the collectives inside its
block loop and outside it (nothing trains); ``step_collectives:RUN`` compiles the bf16 training step under
``RUN``'s mesh and rules and reports its collectives and its dots' operand types. ``--eval`` adds a
validation set, evaluated after the last step.

For every run the report holds the per-step losses, the largest difference of parameters and optimizer
state from the ``single`` run (if it ran), and the ``.sharding.spec`` of every array of the final state,
read from the arrays themselves. Diffs are computed here so that no arrays cross the process boundary.
"""

import os
import sys

os.environ["JAX_PLATFORMS"] = "cpu"
os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"

import dataclasses  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from marin.trainer import TrainLmConfig, train  # noqa: E402
from marin.trainer.axes import BATCH, SEQ, use_sharding  # noqa: E402
from marin.trainer.checkpoint import Checkpointer, leaf_names  # noqa: E402
from marin.trainer.loop import load_or_init  # noqa: E402
from marin.trainer.mesh import MeshConfig, sharding_context  # noqa: E402
from marin.trainer.model import param_axes  # noqa: E402
from marin.trainer.model.chunked_loss import chunked_token_loss  # noqa: E402
from marin.trainer.step import PrecisionPolicy, StepConfig, init_state, make_train_step, state_shardings  # noqa: E402
from tests.trainer.tiny_run import STEPS, tiny_config  # noqa: E402

RUNS = {
    "single": (MeshConfig(data=1, fsdp=1, tensor=1), "dp"),
    "dp": (MeshConfig(data=-1, fsdp=1), "dp"),
    "fsdp": (MeshConfig(fsdp=-1), "fsdp"),
    "tp": (MeshConfig(data=4, fsdp=1, tensor=2), "tp"),  # kv_heads=2 bounds the tensor axis
    "fsdp_tp": (MeshConfig(data=2, fsdp=2, tensor=2), "fsdp_tp"),
    # expert parallelism (with --moe): 4 experts over the expert axis, tokens exchanged all-to-all
    "ep": (MeshConfig(data=1, fsdp=2, expert=4, tensor=1), "fsdp"),
    "ep_tp": (MeshConfig(data=1, fsdp=1, expert=4, tensor=2), "fsdp_tp"),
    # context parallelism: each sequence split over the context axis (zigzag), attention across it
    "cp8": (MeshConfig(data=1, fsdp=1, context=8), "fsdp"),
    "cp4_fsdp2": (MeshConfig(data=1, fsdp=2, context=4), "fsdp"),
    "cp2_tp2_fsdp2": (MeshConfig(data=1, fsdp=2, context=2, tensor=2), "fsdp_tp"),
}


OPTIMIZER = "adamw"  # --optimizer=KIND sets it for every run
MOE = False  # --moe: the tiny mixture-of-experts model for every run
LOSS_BLOCK = 32  # block:RUN: a microbatch of 8 rows x 32 positions in 8 blocks of 8 rows x 4 positions


def config(output_path: Path, run: str, evaluate: bool = False, loss_block: int | None = None) -> TrainLmConfig:
    cfg = tiny_config(output_path, *RUNS[run], evaluate=evaluate, optimizer=OPTIMIZER, moe=MOE)
    return dataclasses.replace(cfg, trainer=dataclasses.replace(cfg.trainer, loss_block=loss_block))


def spec_of(array: jax.Array) -> list:
    """The array's PartitionSpec as JSON, one entry per dimension (None, a mesh axis, or a list of them)."""
    sharding = array.sharding
    spec = list(sharding.spec) if isinstance(sharding, jax.sharding.NamedSharding) else []
    spec += [None] * (array.ndim - len(spec))
    return [list(s) if isinstance(s, tuple) and len(s) > 1 else (s[0] if isinstance(s, tuple) else s) for s in spec]


def max_diff(a, b) -> float:
    return max(
        float(np.max(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64)), initial=0.0))
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b))
    )


def losses(output: Path) -> list[float]:
    lines = (output / "metrics.jsonl").read_text().splitlines()
    return [record["train/loss"] for record in map(json.loads, lines) if "train/loss" in record]


def bitwise_equal(a, b) -> bool:
    leaves_a, leaves_b = jax.tree.leaves(a), jax.tree.leaves(b)
    return len(leaves_a) == len(leaves_b) and all(
        np.asarray(x).dtype == np.asarray(y).dtype and np.asarray(x).tobytes() == np.asarray(y).tobytes()
        for x, y in zip(leaves_a, leaves_b)
    )


def initialized_from(out: Path, source: str, target: str):
    """``load_or_init`` of a fresh run under ``target`` that starts from ``source``'s parameters."""
    cfg = dataclasses.replace(config(out / f"init_from_{source}_{target}", target), initialize_from=str(out / source))
    optimizer = cfg.optimizer.build(STEPS, param_axes(cfg.model))
    context = sharding_context(cfg.trainer.mesh, cfg.trainer.sharding)
    shardings = state_shardings(
        context, cfg.model, optimizer, ema=cfg.optimizer.keeps_average, policy=cfg.trainer.precision
    )
    return load_or_init(
        cfg, optimizer, Checkpointer(f"{cfg.output_path}/checkpoints", cfg.trainer.checkpoint), shardings
    )


_COLLECTIVE = re.compile(
    r"= (\w+)\[([\d,]*)\]\S* (all-reduce|reduce-scatter|all-gather|all-to-all|collective-permute)\("
)


def loss_block_collectives(run: str) -> dict:
    """The collectives (op, dtype, shape) of the compiled gradient of ``chunked_token_loss`` under ``run``'s mesh
    and rules (the tiny model's shapes, a microbatch of 8 rows), inside its block loop and outside it."""
    cfg = config(Path("unused"), run)
    model, rows = cfg.model, cfg.trainer.batch_size // cfg.trainer.num_microbatches
    context = sharding_context(cfg.trainer.mesh, cfg.trainer.sharding)
    x = jax.device_put(np.ones((rows, model.seq_len, model.hidden_dim), np.float32), context.sharding(("batch",)))
    w = jax.device_put(np.ones((model.hidden_dim, model.vocab_size), np.float32), context.sharding(("embed", "vocab")))
    targets = jax.device_put(np.zeros((rows, model.seq_len), np.int32), context.sharding(("batch",)))

    def loss(x, w):
        return chunked_token_loss(x, w, targets, jnp.ones(targets.shape), block=LOSS_BLOCK)[0]

    grad = jax.jit(jax.grad(loss, argnums=(0, 1)), out_shardings=(x.sharding, w.sharding))
    with use_sharding(context):
        text = grad.lower(x, w).compile().as_text()
    bodies = set(re.findall(r"body=%?([\w.-]+)", text))
    found = {"loop": [], "outside": []}
    for computation in re.split(r"\n(?=\S)", text):
        name = computation.split(None, 2)[1 if computation.startswith("ENTRY") else 0].lstrip("%")
        for dtype, shape, op in _COLLECTIVE.findall(computation):
            found["loop" if name in bodies else "outside"].append([op, dtype, [int(d) for d in shape.split(",") if d]])
    found["head_shard"] = list(w.addressable_shards[0].data.shape)
    return found


def step_collectives(run: str) -> dict:
    """The collectives (op, dtype, shape) and the dots' operand types of the tiny model's bf16 training step
    as XLA compiles it under ``run``'s mesh and rules (nothing trains)."""
    cfg = config(Path("unused"), run)
    model, policy = cfg.model, PrecisionPolicy(compute_dtype="bfloat16")
    context = sharding_context(cfg.trainer.mesh, cfg.trainer.sharding)
    optimizer = cfg.optimizer.build(STEPS, param_axes(model))
    shardings = state_shardings(context, model, optimizer, ema=False, policy=policy)
    state = jax.eval_shape(
        lambda key: init_state(model, optimizer, key, ema=False, policy=policy), jax.random.PRNGKey(0)
    )
    state = jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), state, shardings)
    rows, seq = cfg.trainer.batch_size, model.seq_len
    on_rows = context.sharding((BATCH, SEQ))
    batch = {key: jax.ShapeDtypeStruct((rows, seq), jnp.int32, sharding=on_rows) for key in ("input_ids", "targets")}
    batch["segment_ids"] = jax.ShapeDtypeStruct((rows, seq), jnp.int32, sharding=on_rows)
    batch["loss_mask"] = jax.ShapeDtypeStruct((rows, seq), jnp.float32, sharding=on_rows)
    step = make_train_step(
        model,
        optimizer,
        cfg.optimizer.lr_schedule(STEPS),
        StepConfig(precision=policy),
        context=context,
        shardings=shardings,
    )
    text = step.lower(state, batch).compile().as_text()
    found = {"collectives": [], "dots": []}
    for computation in re.split(r"\n(?=\S)", text):
        types = dict(re.findall(r"(%[\w.\-]+) = (\w+)\[", computation))
        for operands in re.findall(r"= \w+\[[\d,]*\]\S* dot\((%[\w.\-]+), (%[\w.\-]+)\)", computation):
            found["dots"].append([types[name] for name in operands])
        for dtype, shape, op in _COLLECTIVE.findall(computation):
            found["collectives"].append([op, dtype, [int(d) for d in shape.split(",") if d]])
    return found


def main(out: Path, jobs: list[str], evaluate: bool) -> dict:
    report, host_states = {"devices": jax.device_count(), "runs": {}}, {}
    for job in jobs:
        start = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            kind, _, rest = job.partition(":")
            directory = out / job.replace(":", "_")
            if kind == "restore":
                source, target = rest.split(":")
                shutil.copytree(out / source, directory)
                state = train(config(directory, target)).state
                entry = {"bitwise_equal": bitwise_equal(state, host_states[source])}
            elif kind == "collectives":
                report["runs"][job] = loss_block_collectives(rest)
                continue
            elif kind == "step_collectives":
                report["runs"][job] = step_collectives(rest)
                continue
            elif kind == "init_from":
                source, target = rest.split(":")
                state = initialized_from(out, source, target)
                entry = {
                    "params_are_source_ema": bitwise_equal(state.params, host_states[source].ema),
                    "ema_is_params": bitwise_equal(state.ema, state.params),
                }
            else:
                run, loss_block = (rest, LOSS_BLOCK) if kind == "block" else (job, None)
                result = train(config(directory, run, evaluate, loss_block))
                state, host_states[job] = result.state, jax.device_get(result.state)
                entry = {"losses": losses(directory), "eval": result.eval_metrics}
                if "single" in host_states:
                    entry["param_diff"] = max_diff(host_states[job].params, host_states["single"].params)
                    entry["opt_state_diff"] = max_diff(host_states[job].opt_state, host_states["single"].opt_state)
                    entry["ema_diff"] = max_diff(host_states[job].ema, host_states["single"].ema)
        entry["step"] = int(state.step)
        entry["specs"] = dict(zip(leaf_names(state), map(spec_of, jax.tree.leaves(state))))
        sharding = jax.tree.leaves(state.params)[0].sharding
        entry["mesh"] = dict(sharding.mesh.shape) if isinstance(sharding, jax.sharding.NamedSharding) else {}
        entry["warnings"] = [str(w.message) for w in caught if "donat" in str(w.message).lower()]
        entry["seconds"] = round(time.perf_counter() - start, 1)
        report["runs"][job] = entry
    return report


if __name__ == "__main__":
    args = sys.argv[2:]
    OPTIMIZER = next((a.split("=", 1)[1] for a in args if a.startswith("--optimizer=")), OPTIMIZER)
    MOE = "--moe" in args
    jobs = [a for a in args if not a.startswith("--")]
    print(json.dumps(main(Path(sys.argv[1]), jobs, evaluate="--eval" in args)))
