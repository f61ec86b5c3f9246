"""FP8 matmuls against bf16 on the same inputs: error, speed, and whether FP8 GEMMs really ran.

    python benchmarks/fp8_bench.py                       # the large projections of llama_1b and llama_8b
    python benchmarks/fp8_bench.py --tokens 1024 --models tiny --reps 3    # a smoke run (CPU: emulated)

For each projection shape ``x [tokens, in] @ w [in, out]`` of the named models (q, k/v, o, gate/up,
down), on random normal inputs rounded to bf16 (weights scaled like an init, 1/sqrt(in)):

* error: the output and both gradients (for a random output cotangent) of ``fp8_matmul`` and of the bf16
  product the model runs by default, each against the same product in fp32 at HIGHEST precision on the
  same bf16 inputs, as ``||x - ref|| / ||ref||``;
* speed: the median time of the jitted forward and of forward + backward (``jax.vjp``), bf16 and FP8, and
  their ratio, with the TFLOP/s reached (2·tokens·in·out per product; three products forward + backward);
* proof: the number of FP8 GEMM custom calls (``__cublas$lt$matmul$f8``) in the compiled forward +
  backward on a GPU (on CPU XLA emulates FP8: 0, and the speed means nothing).

Rows go to ``benchmarks/results/fp8_bench.json`` (``--out``); the table is printed last.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "fp8_bench.json"
MODELS = {  # name -> (hidden, mlp, heads, kv_heads): the projections' shapes follow
    "tiny": (256, 512, 4, 2),
    "llama_1b": (2048, 8192, 32, 8),
    "llama_8b": (4096, 14336, 32, 8),
}


def projections(model: str) -> list[tuple[str, int, int]]:
    """``(name, in, out)`` of one block's projections (k and v share a shape, gate and up too)."""
    d, mlp, heads, kv = MODELS[model]
    head_dim = d // heads
    return [("q/o", d, d), ("k/v", d, kv * head_dim), ("gate/up", d, mlp), ("down", mlp, d)]


def _time(fn, *args, reps: int) -> float:
    """Median seconds of ``fn(*args)`` after a warm-up; the device is synced after every call."""
    import jax

    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _rel(a, b) -> float:
    import numpy as np

    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def measure(tokens: int, d_in: int, d_out: int, reps: int) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from marin.trainer.model.fp8 import fp8_matmul

    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(tokens, d_in)), jnp.bfloat16)
    w = jnp.asarray(rng.normal(size=(d_in, d_out)) / np.sqrt(d_in), jnp.bfloat16)
    g = jnp.asarray(rng.normal(size=(tokens, d_out)), jnp.bfloat16)

    def bf16(x, w):  # what dense() runs by default on GPU: bf16 operands, bf16 result
        return jnp.dot(x, w, preferred_element_type=jnp.bfloat16)

    def fp8(x, w):
        return fp8_matmul(x, w, jnp.bfloat16)

    def fwd_bwd(matmul, *args):  # compiled once: used for the error, the timing and the HLO
        def run(x, w, g):
            y, vjp = jax.vjp(matmul, x, w)
            return (y, *vjp(g))

        return jax.jit(run).lower(*args).compile()

    with jax.default_matmul_precision("highest"):
        wide = [a.astype(jnp.float32) for a in (x, w, g)]
        ref = [np.asarray(a) for a in fwd_bwd(lambda x, w: x @ w, *wide)(*wide)]
    row = {"tokens": tokens, "in": d_in, "out": d_out}
    for name, matmul in (("bf16", bf16), ("fp8", fp8)):
        both = fwd_bwd(matmul, x, w, g)
        ours = [np.asarray(a.astype(jnp.float32)) for a in both(x, w, g)]
        for part, a, b in zip(("y", "dx", "dw"), ours, ref):
            row[f"{name}_{part}_rel"] = _rel(a, b)
        row[f"{name}_fwd_ms"] = 1e3 * _time(jax.jit(matmul), x, w, reps=reps)
        row[f"{name}_fwd_bwd_ms"] = 1e3 * _time(both, x, w, g, reps=reps)
        if name == "fp8":
            row["fp8_gemm_calls"] = both.as_text().count("__cublas$lt$matmul$f8")
    flops = 2 * tokens * d_in * d_out
    for name in ("bf16", "fp8"):
        row[f"{name}_fwd_tflops"] = flops / row[f"{name}_fwd_ms"] / 1e9
        row[f"{name}_fwd_bwd_tflops"] = 3 * flops / row[f"{name}_fwd_bwd_ms"] / 1e9
    return row


def table(rows: list[dict]) -> str:
    head = (
        f"{'model':<9} {'proj':<8} {'tokens x in x out':>20} | {'rel err y / dx / dw: bf16':>27} | "
        f"{'fp8':>22} | {'fwd ms bf16/fp8':>16} {'x':>5} | {'fwd+bwd ms':>14} {'x':>5} {'TFLOP/s':>11} | f8 GEMMs"
    )
    lines = [head, "-" * len(head)]
    for r in rows:

        def errs(n, r=r):
            return " / ".join(f"{r[f'{n}_{p}_rel']:.1e}" for p in ("y", "dx", "dw"))

        lines.append(
            f"{r['model']:<9} {r['proj']:<8} {r['tokens']:>6}x{r['in']:>6}x{r['out']:>6} | {errs('bf16'):>27} | "
            f"{errs('fp8'):>22} | {r['bf16_fwd_ms']:>7.3f}/{r['fp8_fwd_ms']:<7.3f} "
            f"{r['bf16_fwd_ms'] / r['fp8_fwd_ms']:>5.2f} | {r['bf16_fwd_bwd_ms']:>6.3f}/{r['fp8_fwd_bwd_ms']:<7.3f} "
            f"{r['bf16_fwd_bwd_ms'] / r['fp8_fwd_bwd_ms']:>5.2f} {r['bf16_fwd_bwd_tflops']:>5.0f}/"
            f"{r['fp8_fwd_bwd_tflops']:<5.0f} | {r['fp8_gemm_calls']}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["llama_1b", "llama_8b"], choices=list(MODELS))
    parser.add_argument("--tokens", type=int, default=8192, help="rows of x: batch x seq of one microbatch")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    import jax

    device = jax.devices()[0]
    rows = []
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for model in args.models:
        for proj, d_in, d_out in projections(model):
            rows.append({"model": model, "proj": proj, **measure(args.tokens, d_in, d_out, args.reps)})
            print(json.dumps(rows[-1]), flush=True)  # row by row: a run cut short keeps what it measured
            args.out.write_text(
                json.dumps(
                    {
                        "device": device.device_kind,
                        "jax": jax.__version__,
                        "time": time.strftime("%F %T"),
                        "rows": rows,
                    },
                    indent=1,
                )
            )
    print(f"{jax.default_backend()} ({device.device_kind}), jax {jax.__version__}; ratios are bf16 time / fp8 time")
    print(table(rows))


if __name__ == "__main__":
    main()
