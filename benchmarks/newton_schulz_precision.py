"""bf16 Newton–Schulz forms against a float64 iteration, beside ``torch.optim.Muon``'s bf16 one; and their time.

    .venv/bin/python benchmarks/newton_schulz_precision.py                # errors, then medium's stacks, 3 rounds
    .venv/bin/python benchmarks/newton_schulz_precision.py --rounds 0     # errors only

Forms of one quintic iteration ``X <- a X + P X``, ``P = b G + c G²``, ``G = X Xᵀ``, every product's operands
bf16 and its accumulation fp32, the iterate carried in fp32 (issue #79, item 1):

* ``mixed``: the lab's form until 2026-12-07: ``a X`` and ``b G`` from the fp32 ``X`` and ``G``, the products
  from their bf16 casts;
* ``rounded``: ``X`` and ``G`` rounded to bf16 once and used in every term, ``a X`` included (what the issue's
  emulation did; the iterate's low bits never reach the next iteration, as in torch's bf16 iterate);
* ``carried``: the iterate carried in bf16: ``G``, ``P`` and each new ``X`` rounded, torch's roundings in the
  lab's loop;
* ``lab``: ``marin.trainer.muon.newton_schulz`` as it is: ``G`` rounded once for both of ``P``'s terms,
  ``a X`` from the fp32 ``X``, and ``P X = P X_lo + P (X - X_lo)`` (one product more);
* ``torch``: ``torch.optim.Muon`` 2.13 as shipped (its iterate and every product's result in bf16).

The error is the relative Frobenius distance from a float64 NumPy run of the iteration, averaged over a stack's
matrices. Inputs: standard normal stacks (a flat spectrum; the shapes of
``tests/trainer/test_newton_schulz_precision.py``), the hidden matrices' gradients of that test's small Llama
at initialization, and Muon momenta (beta 0.95) of a 128-wide Llama's gradients after 30 Adam steps on tokens
of a fixed random bigram chain (spectra that decay: a few directions dominate). Time: ``mixed`` against ``lab``
on ``medium``'s three stack shapes, alternating in one process, each round one untimed and ``--calls`` timed
calls. Results go to ``benchmarks/results/newton_schulz_precision.json``.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from host import cpu_model, write_report  # noqa: E402

RESULTS = HERE / "results" / "newton_schulz_precision.json"
STEPS, EPS = 5, 1e-7
GAUSSIAN = (  # (logical axes, shape) as the test's; its seeds too
    (("layers", "embed", "mlp"), (8, 24, 64)),
    (("layers", "mlp", "embed"), (8, 64, 24)),
    (("layers", "embed", "mlp"), (4, 128, 256)),
    (("layers", "embed", "heads", "head_dim"), (4, 96, 4, 24)),
    (("layers", "experts", "embed", "mlp"), (2, 4, 32, 80)),
    (("layers", "experts", "mlp", "embed"), (2, 4, 80, 32)),
)
MEDIUM = ((8, 768, 2048), (8, 2048, 768), (8, 768, 768))  # w_gate/w_up, w_down, wq/wo stacks


def forms():
    """``name -> fn(matrices [n, rows, cols]) -> [n, rows, cols]``, the JAX forms jitted."""
    import jax
    import jax.numpy as jnp

    from marin.trainer.muon import NS_COEFFICIENTS, newton_schulz

    a, b, c = NS_COEFFICIENTS
    bf, f32 = jnp.bfloat16, jnp.float32

    def mm(spec, p, q):
        return jnp.einsum(spec, p.astype(bf), q.astype(bf), preferred_element_type=f32)

    def mixed(_, x):
        gram = mm("...ij,...kj->...ik", x, x)
        return a * x + mm("...ij,...jk->...ik", b * gram + c * mm("...ij,...jk->...ik", gram, gram), x)

    def rounded(_, x):
        low = x.astype(bf).astype(f32)
        gram = mm("...ij,...kj->...ik", low, low).astype(bf).astype(f32)
        return a * low + mm("...ij,...jk->...ik", b * gram + c * mm("...ij,...jk->...ik", gram, gram), low)

    def carried(_, x):  # torch's roundings: G, P and the new iterate rounded to bf16
        low = x.astype(bf)
        gram = mm("...ij,...kj->...ik", low, low).astype(bf)
        poly = (b * gram.astype(f32) + c * mm("...ij,...jk->...ik", gram, gram)).astype(bf)
        return (a * low.astype(f32) + mm("...ij,...jk->...ik", poly, low)).astype(bf).astype(f32)

    def wrap(iteration):
        def run(x):
            tall = x.shape[-2] > x.shape[-1]
            x = jnp.swapaxes(x, -1, -2) if tall else x
            x = x / jnp.maximum(jnp.linalg.norm(x, axis=(-2, -1), keepdims=True), EPS)
            x = jax.lax.fori_loop(0, STEPS, iteration, x)
            return jnp.swapaxes(x, -1, -2) if tall else x

        return jax.jit(run)

    lab = jax.jit(lambda x: newton_schulz(x, STEPS, NS_COEFFICIENTS, EPS, bf))
    return {"mixed": wrap(mixed), "rounded": wrap(rounded), "carried": wrap(carried), "lab": lab}


def float64_iteration(x):
    import numpy as np

    from marin.trainer.muon import NS_COEFFICIENTS

    a, b, c = NS_COEFFICIENTS
    x = np.asarray(x, np.float64)
    tall = x.shape[-2] > x.shape[-1]
    x = np.swapaxes(x, -1, -2) if tall else x
    x = x / np.maximum(np.linalg.norm(x, axis=(-2, -1), keepdims=True), EPS)
    for _ in range(STEPS):
        gram = x @ np.swapaxes(x, -1, -2)
        x = a * x + (b * gram + c * gram @ gram) @ x
    return np.swapaxes(x, -1, -2) if tall else x


def torch_iteration(matrices):
    """torch.optim.Muon one step from zero, no momentum or decay: the parameter is ``-scale * NS(gradient)``."""
    import numpy as np
    import torch

    out = []
    for m in matrices:
        p = torch.nn.Parameter(torch.zeros(m.shape, dtype=torch.float32))
        p.grad = torch.tensor(np.ascontiguousarray(m, np.float32))
        torch.optim.Muon([p], lr=1.0, weight_decay=0.0, momentum=0.0, nesterov=False, adjust_lr_fn="original").step()
        out.append(-p.detach().numpy().astype(np.float64) / math.sqrt(max(1.0, m.shape[0] / m.shape[1])))
    return np.stack(out)


def errors(matrices, jitted) -> dict[str, float]:
    """Mean relative Frobenius error of each form (and torch's) against float64, over ``matrices``."""
    import numpy as np

    exact = float64_iteration(matrices)
    outs = {name: np.asarray(fn(matrices), np.float64) for name, fn in jitted.items()}
    outs["torch"] = torch_iteration(np.asarray(matrices))
    norm = np.linalg.norm(exact, axis=(-2, -1))
    return {name: float(np.mean(np.linalg.norm(o - exact, axis=(-2, -1)) / norm)) for name, o in outs.items()}


def as_matrices(leaf, axes: tuple) -> object:
    """A parameter-shaped array as its ``[n, fan_in, fan_out]`` matrices (float32 NumPy), as Muon forms them."""
    import numpy as np

    from marin.trainer.muon import matrix_dims

    d = matrix_dims(axes)
    leaf = np.asarray(leaf, np.float32)
    fan_in = math.prod(leaf.shape[i] for i in d.reduction)
    fan_out = math.prod(leaf.shape[i] for i in d.output)
    return np.transpose(leaf, d.batch + d.reduction + d.output).reshape(-1, fan_in, fan_out)


def hidden_matrices(cfg, tree) -> dict[str, object]:
    """Each hidden matrix leaf of ``tree['layers']`` as ``[n, fan_in, fan_out]``."""
    from marin.trainer.model import param_axes
    from marin.trainer.muon import matrix_dims

    axes = param_axes(cfg)["layers"]
    return {name: as_matrices(tree["layers"][name], a) for name, a in axes.items() if matrix_dims(a) is not None}


def gradient_inputs():
    """(init gradients of the test's small Llama, momenta of a 128-wide Llama after 30 Adam steps)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax

    from marin.trainer.model import LlamaConfig, init_params, next_token_loss

    def batch(cfg, tokens):
        rows, width = tokens.shape[0], tokens.shape[1] - 1
        ones = jnp.ones((rows, width))
        return dict(input_ids=tokens[:, :-1], targets=tokens[:, 1:], segment_ids=ones.astype(jnp.int32), loss_mask=ones)

    small = LlamaConfig(vocab_size=48, hidden_dim=32, num_layers=2, num_heads=4, num_kv_heads=2, mlp_dim=80, seq_len=16)
    tokens = jax.random.randint(jax.random.key(1), (8, small.seq_len + 1), 0, small.vocab_size)
    init = jax.grad(lambda p: next_token_loss(small, p, batch(small, tokens))[0])(init_params(small, jax.random.key(0)))

    cfg = LlamaConfig(
        vocab_size=512, hidden_dim=128, num_layers=2, num_heads=4, num_kv_heads=2, mlp_dim=384, seq_len=128
    )
    rng = np.random.default_rng(0)
    chain = rng.zipf(1.3, size=(cfg.vocab_size, 8)) % cfg.vocab_size
    text = np.zeros((16, cfg.seq_len + 1), np.int32)
    text[:, 0] = rng.integers(0, cfg.vocab_size, 16)
    for t in range(1, cfg.seq_len + 1):
        text[:, t] = chain[text[:, t - 1], rng.integers(0, 8, 16)]
    data = batch(cfg, jnp.asarray(text))
    grad = jax.jit(jax.grad(lambda p: next_token_loss(cfg, p, data)[0] / data["loss_mask"].size))
    params, adam = init_params(cfg, jax.random.key(0)), optax.adam(3e-3)
    state, momentum = adam.init(params), None
    for _ in range(31):
        g = grad(params)
        momentum = g if momentum is None else jax.tree.map(lambda m, x: 0.95 * m + 0.05 * x, momentum, g)
        updates, state = adam.update(g, state, params)
        params = optax.apply_updates(params, updates)
    return hidden_matrices(small, init), hidden_matrices(cfg, momentum)


def timings(jitted, rounds: int, calls: int) -> dict:
    import jax

    stacks = [jax.random.normal(jax.random.key(i), s) for i, s in enumerate(MEDIUM)]
    names = ("mixed", "lab")
    times = {n: {str(s): [] for s in MEDIUM} for n in names}
    for r in range(rounds):
        for name in names if r % 2 == 0 else reversed(names):
            for shape, x in zip(MEDIUM, stacks):
                jax.block_until_ready(jitted[name](x))
                start = time.perf_counter()
                for _ in range(calls):
                    out = jitted[name](x)
                jax.block_until_ready(out)
                times[name][str(shape)].append((time.perf_counter() - start) / calls)
    return {
        name: {s: {"median": statistics.median(t), "min": min(t), "max": max(t)} for s, t in by_shape.items()}
        for name, by_shape in times.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    import jax

    jitted = forms()
    report = {"host": cpu_model(), "jax": jax.__version__, "load_avg_before": list(os.getloadavg()), "errors": {}}
    init, trained = gradient_inputs()
    groups = {
        "gaussian": {
            ", ".join(axes) + f" {shape}": as_matrices(
                jax.random.normal(jax.random.key(len(shape) * 1000 + shape[-1]), shape), axes
            )
            for axes, shape in GAUSSIAN
        },
        "init_gradient": init,
        "trained_momentum": trained,
    }
    for group, inputs in groups.items():
        report["errors"][group] = {}
        for name, matrices in inputs.items():
            e = errors(matrices, jitted)
            report["errors"][group][name] = {
                **e,
                **{f"{k}/torch": v / e["torch"] for k, v in e.items() if k != "torch"},
            }
            print(group, name, matrices.shape, " ".join(f"{k} {v:.2e} ({v / e['torch']:.2f}x)" for k, v in e.items()))
    if args.rounds:
        report["rounds"], report["calls"] = args.rounds, args.calls
        report["seconds"] = timings(jitted, args.rounds, args.calls)
        for shape in map(str, MEDIUM):
            m, lab = report["seconds"]["mixed"][shape], report["seconds"]["lab"][shape]
            ratio = lab["median"] / m["median"]
            print(f"{shape}: mixed {m['median'] * 1e3:.0f} ms, lab {lab['median'] * 1e3:.0f} ms ({ratio:.2f}x)")
    report["load_avg_after"] = list(os.getloadavg())
    write_report(report, args.out)


if __name__ == "__main__":
    main()
