"""Gram Newton–Schulz beside the lab's Newton–Schulz, bf16, on ``medium``'s hidden matrices: time and error.

    .venv/bin/python benchmarks/gram_newton_schulz.py                 # medium, 3 rounds
    .venv/bin/python benchmarks/gram_newton_schulz.py --config small --rounds 5

Gram Newton–Schulz (Dao lab, 2026, https://tridao.me/blog/2026/gram-newton-schulz/; DeepSpeed's Muon default
since) computes the same polynomial in exact arithmetic with fewer FLOPs on a wide ``m × n`` matrix: it
iterates on the ``m × m`` Gram matrix ``R = X Xᵀ`` and the accumulated factor ``Q`` (``X_k = Q_k X_0``),
touching ``X`` only at the start, at a restart and at the end. For ``medium``'s MLP matrices (768 × 2048) it
needs ~22% fewer multiply-adds with one restart at iteration 2 (as DeepSpeed runs it), 30% with none; square
matrices keep the standard iteration. Its authors run the Gram products in fp16 because in bf16 the Gram
matrix loses the small singular values (their squares fall under bf16's resolution of the large ones).

The question here is whether it would close the gap of the lab's bf16 Muon to ``torch.optim.Muon`` under
``torch.compile`` on a CPU (docs/optimizers.md, "Step cost"). XLA:CPU's YNNPACK has bf16 × bf16 → fp32
kernels and no fp16 ones, so the Gram variant is measured in bf16 (operands; fp32 accumulation, results and
carried matrices, as the lab's own iteration). Inputs: per parameter a standard normal matrix plus a rank-16
part three times as large (a gradient's spectrum is dominated by a few directions), fixed seed. The error is
the largest absolute difference from a float64 NumPy run of the standard iteration, over the largest entry,
on the first layer's matrix of each parameter. Both variants run in one process, alternating, ``--rounds``
times; each round times ``--calls`` calls after one untimed (compiling) call. Results go to
``benchmarks/results/gram_newton_schulz.json``.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from host import cpu_model, write_report  # noqa: E402
from trainer_bench import CONFIGS, model_dims  # noqa: E402

RESULTS = HERE / "results" / "gram_newton_schulz.json"
MATRICES = ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down")
STEPS, EPS, RESTARTS = 5, 1e-7, (2,)


def gram_newton_schulz(x, steps: int, coefficients, eps: float, restarts=RESTARTS, dtype=None):
    """The standard iteration's polynomial through the Gram matrix (wide or tall ``[..., rows, cols]``), its
    products' operands in ``dtype`` (bf16 by default) accumulating in fp32."""
    import jax.numpy as jnp

    from marin.trainer.layouts import row_major
    from marin.trainer.muon import newton_schulz

    dtype = jnp.bfloat16 if dtype is None else dtype
    a, b, c = coefficients

    def mm(spec, p, q):
        return jnp.einsum(spec, p.astype(dtype), q.astype(dtype), preferred_element_type=jnp.float32)

    if x.shape[-2] == x.shape[-1]:
        return newton_schulz(x, steps, coefficients, eps, dtype)
    tall = x.shape[-2] > x.shape[-1]
    if tall:  # materialized, or XLA folds the transpose into the products and they miss YNNPACK's kernel
        x = row_major(jnp.swapaxes(x, -1, -2))
    x = x.astype(jnp.float32)
    x = x / jnp.maximum(jnp.linalg.norm(x, axis=(-2, -1), keepdims=True), eps)
    eye = jnp.eye(x.shape[-2], dtype=jnp.float32)
    gram = mm("...ij,...kj->...ik", x, x)
    q = None
    for i in range(steps):
        if i in restarts and q is not None:  # fold Q into X and start the Gram matrix afresh
            x = mm("...ij,...jk->...ik", q, x)
            gram, q = mm("...ij,...kj->...ik", x, x), None
        z = b * gram + c * mm("...ij,...jk->...ik", gram, gram)
        q = a * eye + z if q is None else a * q + mm("...ij,...jk->...ik", q, z)
        if i + 1 < steps and i + 1 not in restarts:  # R <- (aI + Z) R (aI + Z)
            rz = a * gram + mm("...ij,...jk->...ik", gram, z)
            gram = a * rz + mm("...ij,...jk->...ik", z, rz)
    x = mm("...ij,...jk->...ik", q, x)
    return jnp.swapaxes(row_major(x), -1, -2) if tall else x


def reference(x, steps: int, coefficients):
    """The standard iteration in float64 NumPy."""
    import numpy as np

    a, b, c = coefficients
    x = np.asarray(x, np.float64)
    tall = x.shape[-2] > x.shape[-1]
    x = x.T if tall else x
    x = x / np.linalg.norm(x)
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if tall else x


def multiply_adds(shape, gram: bool) -> int:
    """Multiply-adds of one call on a ``[layers, rows, cols]`` stack, counted as each iteration runs them."""
    layers, rows, cols = shape
    m, n = min(rows, cols), max(rows, cols)
    if not gram or m == n:
        return layers * STEPS * (2 * m * m * n + m**3)
    wide, cubes, fresh = 2, 0, True  # X Xᵀ at the start and Q X at the end
    for i in range(STEPS):
        if i in RESTARTS and not fresh:
            wide, fresh = wide + 2, True
        cubes += 1 if fresh else 2  # R², and Q Z once Q is not the identity
        fresh = False
        cubes += 2 if i + 1 < STEPS and i + 1 not in RESTARTS else 0
    return layers * (wide * m * m * n + cubes * m**3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="medium", choices=list(CONFIGS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    import jax
    import jax.numpy as jnp
    import numpy as np

    from marin.trainer.loop import tune_host_allocator
    from marin.trainer.model import LlamaConfig, init_params, param_axes
    from marin.trainer.muon import NS_COEFFICIENTS, matrix_dims, newton_schulz

    tune_host_allocator()
    cfg = LlamaConfig(**model_dims(CONFIGS[args.config]))
    shapes = jax.eval_shape(lambda: init_params(cfg, jax.random.PRNGKey(0)))
    rng = np.random.default_rng(0)
    stacks = {}
    for name in MATRICES:
        shape = shapes["layers"][name].shape
        dims = matrix_dims(param_axes(cfg)["layers"][name])
        fan_in = math.prod(shape[i] for i in dims.reduction)
        flat = (shape[0], fan_in, math.prod(shape) // shape[0] // fan_in)
        low_rank = rng.standard_normal(flat[:2] + (16,)) @ rng.standard_normal((16, flat[2]))
        stacks[name] = jnp.asarray(rng.standard_normal(flat) + 3 * low_rank, jnp.float32)

    variants = {
        "standard": lambda t: {k: newton_schulz(v, STEPS, NS_COEFFICIENTS, EPS, jnp.bfloat16) for k, v in t.items()},
        "gram": lambda t: {k: gram_newton_schulz(v, STEPS, NS_COEFFICIENTS, EPS) for k, v in t.items()},
    }
    compiled = {name: jax.jit(fn) for name, fn in variants.items()}
    errors = {}
    for name, fn in compiled.items():
        out = jax.block_until_ready(fn(stacks))
        errors[name] = {}
        for k in MATRICES:
            ref = reference(np.asarray(stacks[k][0]), STEPS, NS_COEFFICIENTS)
            errors[name][k] = float(np.max(np.abs(np.asarray(out[k][0]) - ref)) / np.max(np.abs(ref)))
    times = {name: [] for name in compiled}
    for r in range(args.rounds):
        for name in compiled if r % 2 == 0 else reversed(list(compiled)):
            fn = compiled[name]
            jax.block_until_ready(fn(stacks))
            start = time.perf_counter()
            for _ in range(args.calls):
                out = fn(stacks)
            jax.block_until_ready(out)
            times[name].append((time.perf_counter() - start) / args.calls)
    report = {"config": args.config, "host": cpu_model(), "jax": jax.__version__, "rounds": args.rounds, "variants": {}}
    for name in compiled:
        macs = sum(multiply_adds(v.shape, name == "gram") for v in stacks.values())
        median = statistics.median(times[name])
        report["variants"][name] = {
            "seconds": median,
            "min": min(times[name]),
            "max": max(times[name]),
            "multiply_adds": macs,
            "gflops": 2 * macs / median / 1e9,
            "max_error_over_max_entry": errors[name],
        }
        print(
            f"{name:9s} {median * 1e3:7.0f} ms [{min(times[name]) * 1e3:.0f}-{max(times[name]) * 1e3:.0f}]"
            f"  {macs / 1e9:6.1f} G multiply-adds  {2 * macs / median / 1e9:6.0f} GFLOP/s"
            f"  error {max(errors[name].values()):.4f} (largest; per matrix {errors[name]})"
        )
    s, g = report["variants"]["standard"]["seconds"], report["variants"]["gram"]["seconds"]
    report["gram_speedup"] = s / g
    print(f"gram is {s / g:.2f}x as fast as standard")
    write_report(report, args.out)


if __name__ == "__main__":
    main()
