"""cuDNN attention on a GPU in one process: is each way of masking exact, and what does each cost?

    python benchmarks/cudnn_attention_probe.py --out benchmarks/results/gpu/cudnn_probe.json

For bf16 inputs and llama_1b's heads (32 query / 8 kv, head_dim 64), against ``reference`` in fp32 at
HIGHEST precision on the same inputs (``||x - ref|| / ||ref||`` of the output and of dq, dk, dv for one
random cotangent): the ``cudnn`` backend (the route it takes is printed), ``cudnn_masked``, cuDNN's packed
layout called directly with the CAUSAL and PADDING_CAUSAL mask types, and ``pallas``; on four batches:
one document per row, ~8 packed documents per row, and 64 per row (more than ``MAX_PACKED_SEGMENTS``:
the fallback). ``reference`` in bf16 gives bf16's own rounding level.

Then the median time of a jitted forward + backward at training shapes (batch 8, seq 2048, head_dim 64;
batch 2, seq 4096, head_dim 128), one row per (backend, batch). One process: a GPU process takes seconds
to start, and the lease is short. The table is printed last; rows go to ``--out`` as JSON.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from marin.trainer.attention import ATTENTION_BACKENDS, attention
from marin.trainer.attention.cudnn import MAX_PACKED_SEGMENTS, attention_route, cudnn_packed_attention


def segments(kind: str, batch: int, seq: int, rng) -> jax.Array:
    if kind == "one":
        ids = np.zeros((batch, seq), np.int32)
    elif kind in ("packed", "many"):
        docs = 8 if kind == "packed" else 2 * MAX_PACKED_SEGMENTS
        cuts = np.sort(rng.choice(np.arange(1, seq), size=(batch, docs - 1), replace=True), axis=1)
        ids = np.zeros((batch, seq), np.int32)
        for row, row_cuts in enumerate(cuts):
            ids[row] = np.searchsorted(row_cuts, np.arange(seq), side="right")
    else:  # "runs back": document 0 resumes after document 1
        ids = np.zeros((batch, seq), np.int32)
        ids[:, seq // 3 : 2 * seq // 3] = 1
    return jnp.asarray(ids)


def packed_direct(mask_type: str):
    """cuDNN's packed layout called directly (no route): wrong where a row has more runs than it has room for."""
    return functools.partial(cudnn_packed_attention, mask_type=mask_type)


def peers() -> dict:
    def named(name):
        return lambda q, k, v, s: attention(q, k, v, s, backend=name)

    return {
        **{name: named(name) for name in ("cudnn", "cudnn_masked", "pallas")},
        "packed CAUSAL": packed_direct("CAUSAL"),
        "packed PADDING_CAUSAL": packed_direct("PADDING_CAUSAL"),
    }


def out_and_grads(fn, q, k, v, seg, ct):
    out, vjp = jax.vjp(lambda q, k, v: fn(q, k, v, seg), q, k, v)
    return (out, *vjp(ct.astype(out.dtype)))


def rel(x, ref) -> float:
    x, ref = np.asarray(x, np.float64), np.asarray(ref, np.float64)
    if not np.all(np.isfinite(x)):
        return float("nan")
    return float(np.linalg.norm(x - ref) / np.linalg.norm(ref))


def check(rows: list, batch=2, seq=2048, heads=32, kv_heads=8, head_dim=64) -> None:
    rng = np.random.default_rng(0)
    key = jax.random.split(jax.random.PRNGKey(0), 4)
    q = jax.random.normal(key[0], (batch, seq, heads, head_dim), jnp.float32).astype(jnp.bfloat16)
    k, v = (
        jax.random.normal(kk, (batch, seq, kv_heads, head_dim), jnp.float32).astype(jnp.bfloat16) for kk in key[1:3]
    )
    ct = jax.random.normal(key[3], (batch, seq, heads, head_dim), jnp.float32).astype(jnp.bfloat16)
    ref_fn = ATTENTION_BACKENDS["reference"]
    for kind in ("one", "packed", "many"):
        seg = segments(kind, batch, seq, rng)
        with jax.default_matmul_precision("highest"):
            ref = jax.jit(lambda *a: out_and_grads(ref_fn, *a))(*(x.astype(jnp.float32) for x in (q, k, v)), seg, ct)
        route = int(attention_route(seg))
        for name, fn in {"reference bf16": ref_fn, **peers()}.items():
            try:
                got = jax.jit(lambda *a, fn=fn: out_and_grads(fn, *a))(q, k, v, seg, ct)
                errs = [rel(g, r) for g, r in zip(got, ref)]
                row = {
                    "segments": kind,
                    "route": route,
                    "backend": name,
                    "out": errs[0],
                    "dq": errs[1],
                    "dk": errs[2],
                    "dv": errs[3],
                }
            except Exception as e:  # noqa: BLE001  a probe: record why and go on
                row = {
                    "segments": kind,
                    "route": route,
                    "backend": name,
                    "error": f"{type(e).__name__}: {str(e)[:300]}",
                }
            rows.append(row)
            print(json.dumps(row), flush=True)


def timed(rows: list, batch, seq, heads, kv_heads, head_dim, reps=20) -> None:
    rng = np.random.default_rng(1)
    key = jax.random.split(jax.random.PRNGKey(1), 4)
    q = jax.random.normal(key[0], (batch, seq, heads, head_dim), jnp.bfloat16)
    k, v = (jax.random.normal(kk, (batch, seq, kv_heads, head_dim), jnp.bfloat16) for kk in key[1:3])
    ct = jax.random.normal(key[3], (batch, seq, heads, head_dim), jnp.bfloat16)
    for kind in ("one", "packed", "many"):
        seg = segments(kind, batch, seq, rng)
        for name, fn in peers().items():
            if name == "packed PADDING_CAUSAL" or (name.startswith("packed") and kind == "many"):
                continue
            try:
                step = jax.jit(lambda *a, fn=fn: out_and_grads(fn, *a))
                jax.block_until_ready(step(q, k, v, seg, ct))
                times = []
                for _ in range(reps):
                    t = time.perf_counter()
                    jax.block_until_ready(step(q, k, v, seg, ct))
                    times.append(time.perf_counter() - t)
                ms = 1e3 * statistics.median(times)
                row = {"batch": batch, "seq": seq, "head_dim": head_dim, "segments": kind, "backend": name, "ms": ms}
            except Exception as e:  # noqa: BLE001
                row = {
                    "batch": batch,
                    "seq": seq,
                    "head_dim": head_dim,
                    "segments": kind,
                    "backend": name,
                    "error": f"{type(e).__name__}: {str(e)[:300]}",
                }
            rows.append(row)
            print(json.dumps(row), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/gpu/cudnn_probe.json"))
    args = parser.parse_args()
    print("jax", jax.__version__, jax.devices(), flush=True)
    checks, times = [], []
    check(checks)
    timed(times, 8, 2048, 32, 8, 64)
    timed(times, 2, 4096, 32, 8, 128)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"jax": jax.__version__, "checks": checks, "times": times}, indent=1))
    print("\nerrors vs fp32 reference (out, dq, dk, dv):")
    for r in checks:
        errs = r.get("error") or "  ".join(f"{r[x]:.1e}" for x in ("out", "dq", "dk", "dv"))
        print(f"  {r['segments']:9s} route {r['route']}  {r['backend']:22s} {errs}")
    print("\nfwd+bwd ms:")
    for r in times:
        print(
            f"  b{r['batch']} s{r['seq']} d{r['head_dim']} {r['segments']:7s} {r['backend']:22s} "
            f"{r.get('ms', float('nan')):8.3f} {r.get('error', '')}"
        )


if __name__ == "__main__":
    main()
