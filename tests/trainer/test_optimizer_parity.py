"""Ten steps of each optimizer on identical parameters and gradients against a reference implementation:
``torch.optim.Muon`` (torch 2.13, with ``torch.optim.AdamW`` on the parameters Muon leaves to AdamW),
``lion_pytorch.Lion`` 0.2.5, and optax's own ``adafactor`` and ``adamw``. Parameters and optimizer state
after every step agree within 1e-5 relative."""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from marin.trainer.model import LlamaConfig, param_axes
from marin.trainer.muon import NS_DTYPES, MatrixDims, is_axes, matrix_dims
from marin.trainer.optim import OptimizerConfig
from tests.requirements import require_module

STEPS = 10
CFG = LlamaConfig(vocab_size=48, hidden_dim=32, num_layers=2, num_heads=4, num_kv_heads=2, mlp_dim=80, seq_len=16)
RTOL = 1e-5


def _tree(cfg: LlamaConfig = CFG):
    """Parameters and ten gradient trees of the tiny model (gradients of varied scale per step)."""
    from marin.trainer.model import init_params

    params = init_params(cfg, jax.random.key(0))
    leaves, treedef = jax.tree.flatten(params)
    grads = []
    for step in range(STEPS):
        keys = jax.random.split(jax.random.key(100 + step), len(leaves))
        scale = 0.5 + step / STEPS
        grads.append(treedef.unflatten([scale * jax.random.normal(k, p.shape) for k, p in zip(keys, leaves)]))
    return params, grads


def _run_ours(config: OptimizerConfig, params, grads, cfg: LlamaConfig = CFG):
    return _run(config.build(STEPS, param_axes(cfg)), params, grads)


def _run(tx, params, grads):
    """(parameters, state) after each of the gradient steps, applied by the transformation ``tx``."""
    state = tx.init(params)
    history = []
    update = jax.jit(tx.update)
    for g in grads:
        updates, state = update(g, state, params)
        params = jax.tree.map(lambda p, u: p + u, params, updates)
        history.append((params, state))
    return history


def _close(ours, ref, what: str, rtol: float = RTOL) -> None:
    ours, ref = np.asarray(ours, np.float64), np.asarray(ref, np.float64)
    assert ours.shape == ref.shape, (what, ours.shape, ref.shape)
    scale = max(float(np.max(np.abs(ref))), 1e-30)
    err = float(np.max(np.abs(ours - ref)))
    assert err <= rtol * scale, f"{what}: max |ours - reference| = {err:.3g}, reference scale {scale:.3g}"


def _matrix_dims_per_leaf(axes) -> list:
    """``matrix_dims`` of every parameter, in leaf order: a ``MatrixDims`` for Muon's and SOAP's matrices, None
    for AdamW's parameters."""
    dims = jax.tree.map(matrix_dims, axes, is_leaf=is_axes)
    return jax.tree.leaves(dims, is_leaf=lambda d: d is None or isinstance(d, MatrixDims))


def _leaves_with_names(tree):
    return [("/".join(str(getattr(k, "key", k)) for k in path), leaf) for path, leaf in jax.tree.leaves_with_path(tree)]


def _set_grads(torch, layout, grads) -> None:
    """Each torch parameter's ``.grad``: the gradient leaf, or its per-layer matrices in torch's layout."""
    for (_name, d, ts), (_, grad) in zip(layout, _leaves_with_names(grads)):
        views = [np.asarray(grad)] if d is None else _matrix_views(np.asarray(grad), d)
        for t, view in zip(ts, views):
            t.grad = torch.tensor(np.ascontiguousarray(view))


def _matrix_views(leaf: np.ndarray, dims: MatrixDims) -> list[np.ndarray]:
    """The (fan_out, fan_in) matrices, torch's layout, of each layer of a stacked parameter."""
    order = dims.batch + dims.reduction + dims.output
    moved = np.transpose(leaf, order)
    fan_in = math.prod(leaf.shape[i] for i in dims.reduction)
    fan_out = math.prod(leaf.shape[i] for i in dims.output)
    return [m.T for m in moved.reshape(-1, fan_in, fan_out)]


@pytest.mark.parametrize("lr_scaling", ["jordan", "moonlight"])
def test_muon_equals_torch_muon_and_adamw_on_the_rest(lr_scaling, monkeypatch):
    torch = require_module("torch", "CPU torch (the export-test extra)")
    # torch's Muon runs Newton–Schulz in bf16 (a GPU speed choice): run its code with that cast made an fp32
    # copy, so that the comparison is of the algorithm (and its fp32 rounding), not of bf16's.
    monkeypatch.setattr(torch.Tensor, "bfloat16", lambda self, *a, **k: self.clone())
    config = OptimizerConfig(
        kind="muon",
        learning_rate=0.02,
        muon_adam_learning_rate=3e-3,
        muon_lr_scaling=lr_scaling,
        weight_decay=0.1,
        schedule="constant",
        warmup=0,
        max_grad_norm=None,
        beta2=0.95,
    )
    params, grads = _tree()
    ours = _run_ours(config, params, grads)

    axes = param_axes(CFG)
    dims = _matrix_dims_per_leaf(axes)
    decays = jax.tree.leaves(config.decay_mask(axes))
    named = _leaves_with_names(params)
    assert sum(d is not None for d in dims) == 7  # wq wk wv wo w_gate w_up w_down; not embed, lm_head, norms

    muon_params, adam_decay, adam_plain, layout = [], [], [], []
    for (name, leaf), d, decay in zip(named, dims, decays):
        if d is None:
            t = torch.nn.Parameter(torch.tensor(np.asarray(leaf)))
            (adam_decay if decay else adam_plain).append(t)
            layout.append((name, d, [t]))
        else:
            ts = [torch.nn.Parameter(torch.tensor(np.ascontiguousarray(m))) for m in _matrix_views(np.asarray(leaf), d)]
            muon_params += ts
            layout.append((name, d, ts))
    adjust = {"jordan": "original", "moonlight": "match_rms_adamw"}[lr_scaling]
    muon = torch.optim.Muon(muon_params, lr=0.02, weight_decay=0.1, momentum=0.95, nesterov=True, adjust_lr_fn=adjust)
    adam = torch.optim.AdamW(
        [{"params": adam_decay, "weight_decay": 0.1}, {"params": adam_plain, "weight_decay": 0.0}],
        lr=3e-3,
        betas=(0.9, 0.95),
        eps=1e-8,
    )
    for step, g in enumerate(grads):
        _set_grads(torch, layout, g)
        muon.step()
        adam.step()
        our_params, our_state = ours[step]
        momentum = dict(_leaves_with_names(_muon_momentum(our_state)))  # only the matrices have one
        for (name, d, ts), (_, leaf) in zip(layout, _leaves_with_names(our_params)):
            views = [np.asarray(leaf)] if d is None else _matrix_views(np.asarray(leaf), d)
            for i, (t, view) in enumerate(zip(ts, views)):
                _close(view, t.detach().numpy(), f"step {step + 1} {name}[{i}]")
                if d is not None:
                    ref = muon.state[t]["momentum_buffer"].numpy()
                    view_of_ours = _matrix_views(np.asarray(momentum[name]), d)[i]
                    _close(view_of_ours, ref, f"step {step + 1} {name}[{i}] momentum")
                else:
                    ref = adam.state[t]
                    mu, nu = _adam_moments(our_state, name)
                    _close(mu, ref["exp_avg"].numpy(), f"step {step + 1} {name} exp_avg")
                    _close(nu, ref["exp_avg_sq"].numpy(), f"step {step + 1} {name} exp_avg_sq")


def test_muon_in_bf16_follows_torch_muon_as_shipped():
    """``muon_ns_dtype="bfloat16"`` against ``torch.optim.Muon`` unpatched (its Newton–Schulz in bf16): ten steps
    move every hidden matrix as torch's do, within bf16's rounding (measured: up to 2.3% of the largest
    displacement, where a wrong coefficient, scale or transpose is of order 100%), and measurably unlike the fp32
    run (1.2-2.2% apart), so the option does change the matmuls' precision."""
    torch = require_module("torch", "CPU torch (the export-test extra)")
    base = dict(kind="muon", learning_rate=0.02, weight_decay=0.1, schedule="constant", warmup=0, max_grad_norm=None)
    params, grads = _tree()
    ours = {dt: _run_ours(OptimizerConfig(**base, muon_ns_dtype=dt), params, grads)[-1][0] for dt in NS_DTYPES}
    dims = _matrix_dims_per_leaf(param_axes(CFG))
    layout, matrices = [], []
    for (name, leaf), d in zip(_leaves_with_names(params), dims):
        views = [np.asarray(leaf)] if d is None else _matrix_views(np.asarray(leaf), d)
        ts = [torch.nn.Parameter(torch.tensor(np.ascontiguousarray(v))) for v in views]
        layout.append((name, d, ts))
        matrices += ts if d is not None else []
    muon = torch.optim.Muon(matrices, lr=0.02, weight_decay=0.1, momentum=0.95, nesterov=True, adjust_lr_fn="original")
    for g in grads:
        _set_grads(torch, layout, g)
        muon.step()
    moved = {dt: dict(_leaves_with_names(tree)) for dt, tree in ours.items()}
    for (name, d, ts), (_, start) in zip(layout, _leaves_with_names(params)):
        if d is None:
            continue
        views = {dt: _matrix_views(np.asarray(moved[dt][name]) - np.asarray(start), d) for dt in NS_DTYPES}
        for i, t in enumerate(ts):
            reference = t.detach().numpy() - _matrix_views(np.asarray(start), d)[i]
            _close(views["bfloat16"][i], reference, f"{name}[{i}] bf16 displacement", rtol=5e-2)
            scale = np.abs(reference).max()
            assert np.abs(views["bfloat16"][i] - views["float32"][i]).max() > 2e-3 * scale, f"{name}[{i}]"


def _muon_momentum(state):
    """The Muon momentum tree (the matrices only: AdamW's parameters are masked out) from the chained state."""
    partition = next(s for s in state if hasattr(s, "inner_states"))
    return partition.inner_states["matrix"].inner_state.momentum


def _adam_moments(state, name: str):
    partition = next(s for s in state if hasattr(s, "inner_states"))
    adam = partition.inner_states["adam"].inner_state
    mu = dict(_leaves_with_names(adam.mu))[name]
    nu = dict(_leaves_with_names(adam.nu))[name]
    return mu, nu


def test_lion_equals_lion_pytorch():
    torch = require_module("torch", "CPU torch (the export-test extra)")
    lion_pytorch = require_module("lion_pytorch", "lion-pytorch (the export-test extra)")
    config = OptimizerConfig(
        kind="lion",
        learning_rate=1e-4,
        beta1=0.9,
        beta2=0.99,
        weight_decay=1.0,
        schedule="constant",
        warmup=0,
        max_grad_norm=None,
        decay_embeddings=True,
    )
    params, grads = _tree()
    ours = _run_ours(config, params, grads)
    decays = jax.tree.leaves(config.decay_mask(param_axes(CFG)))
    named = _leaves_with_names(params)
    ts = [torch.nn.Parameter(torch.tensor(np.asarray(leaf))) for _, leaf in named]
    reference = lion_pytorch.Lion(
        [
            {"params": [t for t, d in zip(ts, decays) if d], "weight_decay": 1.0},
            {"params": [t for t, d in zip(ts, decays) if not d], "weight_decay": 0.0},
        ],
        lr=1e-4,
        betas=(0.9, 0.99),
    )
    for step, g in enumerate(grads):
        for t, (_, grad) in zip(ts, _leaves_with_names(g)):
            t.grad = torch.tensor(np.asarray(grad))
        reference.step()
        our_params, our_state = ours[step]
        lion_state = next(s for s in our_state if hasattr(s, "mu"))
        for t, (name, leaf), (_, mu) in zip(ts, _leaves_with_names(our_params), _leaves_with_names(lion_state.mu)):
            _close(leaf, t.detach().numpy(), f"step {step + 1} {name}")
            _close(mu, reference.state[t]["exp_avg"].numpy(), f"step {step + 1} {name} momentum")


@pytest.mark.parametrize("kind", ["adamw", "adafactor"])
def test_optax_kinds_equal_optax_itself(kind):
    """AdamW and Adafactor are optax's: the config's chain equals optax's alias on the same inputs (a constant
    learning rate; for Adafactor the lab applies the learning rate after momentum, which only differs from
    optax's order when the rate changes)."""
    config = OptimizerConfig(
        kind=kind, learning_rate=1e-3, weight_decay=0.1, schedule="constant", warmup=0, max_grad_norm=None
    )
    mask = config.decay_mask(param_axes(CFG))
    if kind == "adamw":
        reference = __import__("optax").adamw(1e-3, b1=0.9, b2=0.95, eps=1e-8, weight_decay=0.1, mask=mask)
    else:
        optax = __import__("optax")
        reference = optax.chain(
            optax.adafactor(learning_rate=1e-3, momentum=0.9, multiply_by_parameter_scale=False),
            optax.add_decayed_weights(-0.1 * 1e-3, mask=mask),
        )
    params, grads = _tree()
    ours, theirs = _run_ours(config, params, grads), _run(reference, params, grads)
    for step, ((mine, _), (p, _)) in enumerate(zip(ours, theirs)):
        for (name, a), (_, b) in zip(_leaves_with_names(mine), _leaves_with_names(p)):
            _close(a, b, f"{kind} step {step + 1} {name}")


def test_muon_treats_the_hidden_matrices_by_their_axes_not_their_shape():
    axes = param_axes(CFG)
    dims = jax.tree.map(matrix_dims, axes, is_leaf=is_axes)
    assert dims["embed"] is None and dims["lm_head"] is None and dims["final_norm"] is None
    assert dims["layers"]["attn_norm"] is None
    assert dims["layers"]["wq"] == MatrixDims((0,), (1,), (2, 3))  # x[embed] @ wq -> [heads, head_dim]
    assert dims["layers"]["wo"] == MatrixDims((0,), (1, 2), (3,))  # [heads, head_dim] -> embed
    assert dims["layers"]["w_down"] == MatrixDims((0,), (1,), (2,))
    # a square embedding-sized matrix is still AdamW's: it is the vocab axis, not the shape, that decides
    assert matrix_dims(("vocab", "embed")) is None and matrix_dims(("embed", "mlp")) == MatrixDims((), (0,), (1,))
    with pytest.raises(ValueError, match="'embed' must be the first or last"):
        matrix_dims(("heads", "embed", "mlp"))


@pytest.mark.parametrize("dtype", list(NS_DTYPES))
@pytest.mark.parametrize("shape", [(64, 24), (24, 64)])
def test_newton_schulz_makes_the_singular_values_near_one(shape, dtype):
    from marin.trainer.muon import NS_COEFFICIENTS, newton_schulz

    x = jax.random.normal(jax.random.key(1), shape)
    out = newton_schulz(x, 5, NS_COEFFICIENTS, 1e-7, NS_DTYPES[dtype])
    assert out.shape == shape and out.dtype == jnp.float32
    s = jnp.linalg.svd(out, compute_uv=False)
    assert float(s.min()) > 0.5 and float(s.max()) < 1.3, s  # Jordan's quintic: ~Uniform(0.5, 1.5), not exactly 1
    u, _, vt = jnp.linalg.svd(x, full_matrices=False)  # and it is U Vᵀ's direction: the polar factor's
    assert float(jnp.sum(out * (u @ vt)) / jnp.linalg.norm(out) / jnp.linalg.norm(u @ vt)) > 0.95


@pytest.mark.parametrize("dtype", list(NS_DTYPES))
def test_newton_schulz_orthogonalizes_a_tall_matrix_as_the_transpose_of_its_wide_one(dtype):
    """torch's and Jordan's convention: the Gram matrix is the smaller one."""
    from marin.trainer.muon import NS_COEFFICIENTS, newton_schulz

    tall = jax.random.normal(jax.random.key(2), (3, 64, 24))
    ns = jax.jit(lambda x: newton_schulz(x, 5, NS_COEFFICIENTS, 1e-7, NS_DTYPES[dtype]))
    out, wide = ns(tall), ns(jnp.swapaxes(tall, -1, -2))
    assert out.shape == tall.shape
    tol = 1e-5 if dtype == "float32" else 2e-2  # the norm sums in another order; in bf16 a last bit flips a cast
    np.testing.assert_allclose(np.asarray(out), np.swapaxes(np.asarray(wide), -1, -2), atol=tol)


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="XLA:CPU's layouts and kernels")
def test_newton_schulz_on_a_tall_stack_compiles_every_product_in_the_wide_row_major_form():
    """What makes bf16 Newton–Schulz fast on XLA:CPU (docs/optimizers.md, Step cost): every product contracts
    its left operand's last axis, and that operand is row-major. A product contracting the first axis (the
    ``Xᵀ X`` form) or reading a column-major (folded transpose) operand misses YNNPACK's bf16 kernel: on
    ``medium``'s ``w_down`` stack 1.10 s and 2.07 s against 0.49 s."""
    import re

    from marin.trainer.muon import NS_COEFFICIENTS, newton_schulz

    ns = jax.jit(lambda x: newton_schulz(x, 5, NS_COEFFICIENTS, 1e-7, jnp.bfloat16))
    hlo = ns.lower(jax.ShapeDtypeStruct((3, 64, 24), jnp.float32)).compile().as_text()
    layouts = dict(re.findall(r"(%[\w.-]+) = \w+\[[\d,]*\](\{[\d,]*\})", hlo))
    dots = re.findall(r"dot\((%[\w.-]+), %[\w.-]+\).*?lhs_contracting_dims=\{(\d+)\}", hlo)
    assert len(dots) >= 3, hlo  # three products per iteration (the loop's body, or each unrolled iteration)
    for lhs, contracting in dots:
        assert contracting == "2" and layouts[lhs] == "{2,1,0}", (lhs, contracting, layouts[lhs])


def test_unknown_kind_and_scaling_are_refused_by_name():
    with pytest.raises(ValueError, match="OptimizerConfig.kind must be one of"):
        OptimizerConfig(kind="sgd")
    with pytest.raises(ValueError, match="muon_lr_scaling"):
        OptimizerConfig(kind="muon", muon_lr_scaling="rms")
    with pytest.raises(ValueError, match="OptimizerConfig.muon_ns_dtype must be one of"):
        OptimizerConfig(kind="muon", muon_ns_dtype="float16")


def _treatment_rows(cfg) -> dict[str, str]:
    """docs/optimizers.md's row for each parameter of ``cfg``: logical axes, treatment under Muon, scales, decay."""
    from marin.trainer.model.llama import param_specs
    from marin.trainer.muon import shape_scale

    specs = param_specs(cfg)
    is_spec = lambda x: hasattr(x, "axes")  # noqa: E731
    decays = jax.tree.leaves(OptimizerConfig().decay_mask(jax.tree.map(lambda s: s.axes, specs, is_leaf=is_spec)))
    rows = {}
    for (path, spec), decay in zip(jax.tree.leaves_with_path(specs, is_leaf=is_spec), decays):
        name = "/".join(str(getattr(k, "key", k)) for k in path)
        d = matrix_dims(spec.axes)
        if d is None:
            treatment, jordan, moonlight = "AdamW", "", ""
        else:
            fan_in = math.prod(spec.shape[i] for i in d.reduction)
            fan_out = math.prod(spec.shape[i] for i in d.output)
            per = " and ".join({"layers": "layer", "experts": "expert"}[spec.axes[i]] for i in d.batch)
            treatment = f"Muon: {fan_in} × {fan_out} per {per}"
            jordan, moonlight = (
                f"{shape_scale(spec.shape, d, 'jordan'):.2f}",
                f"{shape_scale(spec.shape, d, 'moonlight'):.1f}",
            )
        axes = ", ".join(spec.axes)
        rows[name] = f"| `{name}` | `{axes}` | {treatment} | {jordan} | {moonlight} | {'yes' if decay else 'no'} |"
    return rows


def test_the_docs_tables_of_which_parameter_gets_what_are_the_code_s():
    """docs/optimizers.md lists, for llama_8b, each parameter's treatment under Muon, then the parameters whose
    axes a mixture of experts (mixtral_8x7b) changes or adds, the router among them: rebuilt here from the code."""
    from pathlib import Path

    from experiments.models import llama_8b
    from marin.trainer.model import model_preset

    def cells(row: str) -> list[str]:
        return [c.strip() for c in row.strip("|").split("|")]

    dense, moe = _treatment_rows(llama_8b()), _treatment_rows(model_preset("mixtral_8x7b"))
    changed = [row for name, row in moe.items() if name not in dense or cells(row)[1] != cells(dense[name])[1]]
    assert [cells(r)[0] for r in changed] == ["`layers/router`", "`layers/w_down`", "`layers/w_gate`", "`layers/w_up`"]
    doc = (Path(__file__).resolve().parents[2] / "docs" / "optimizers.md").read_text()
    shown = [cells(line) for line in doc.splitlines() if line.startswith("| `") and len(cells(line)) == 6]
    assert [cells(r) for r in [*dense.values(), *changed]] == shown


@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_soap_equals_the_authors_reference_and_adamw_on_the_rest(weight_decay):
    """SOAP's authors' ``soap.py`` (tests/trainer/references, commit a1e5535) on the hidden matrices, torch's
    AdamW on the rest; the eigenbases are refreshed every 3 steps so that ten steps cover three refreshes.
    The moments are compared in the parameter's basis (``Q_L m Q_R^T``: an eigenvector's sign is LAPACK's
    choice) and ``v`` in the eigenbasis (signs do not reach it). The reference decays the weights after its
    update and skips the decay at its first (preconditioner-only) step; the lab decays every step's weights
    before the update, as for every kind: with decay the tolerance is what that ordering leaves.

    Every hidden matrix is square here (kv heads = heads, mlp = hidden): after one step a non-square
    matrix's smaller-side preconditioner ``G G^T`` is rank-deficient, and the eigenbasis of its null space is
    whatever LAPACK returns; Adam's per-coordinate normalization depends on that basis, so two correct
    implementations part there (measured: 8% of the update at step 2). Square matrices have full rank."""
    torch = require_module("torch", "CPU torch (the export-test extra)")
    from tests.trainer.references.soap_reference import SOAP

    lr = 3e-3
    config = OptimizerConfig(
        kind="soap",
        learning_rate=lr,
        beta1=0.95,
        beta2=0.95,
        soap_precondition_frequency=3,
        weight_decay=weight_decay,
        schedule="constant",
        warmup=0,
        max_grad_norm=None,
    )
    square = dataclasses.replace(CFG, num_kv_heads=CFG.num_heads, mlp_dim=CFG.hidden_dim)
    params, grads = _tree(square)
    ours = _run_ours(config, params, grads, square)
    axes = param_axes(square)
    dims = _matrix_dims_per_leaf(axes)
    decays = jax.tree.leaves(config.decay_mask(axes))
    layout, matrices, adam_decay, adam_plain = [], [], [], []
    for (name, leaf), d, decay in zip(_leaves_with_names(params), dims, decays):
        views = [np.asarray(leaf)] if d is None else _matrix_views(np.asarray(leaf), d)
        ts = [torch.nn.Parameter(torch.tensor(np.ascontiguousarray(v))) for v in views]
        (matrices if d is not None else adam_decay if decay else adam_plain).extend(ts)
        layout.append((name, d, ts))
    soap = SOAP(matrices, lr=lr, betas=(0.95, 0.95), eps=1e-8, weight_decay=weight_decay, precondition_frequency=3)
    adam = torch.optim.AdamW(
        [{"params": adam_decay, "weight_decay": weight_decay}, {"params": adam_plain, "weight_decay": 0.0}],
        lr=lr,
        betas=(0.95, 0.95),
        eps=1e-8,
    )
    # SOAP in fp32 is only as exact as its eigensolver: the reference's own fp32 run differs from its fp64 run
    # by up to 2.1e-5 of a parameter after these ten steps, and the lab's (XLA's eigh and QR) from the
    # reference's fp32 run by up to 4.4e-5 (6.0e-5 with decay). The first moment, compared in the parameter's
    # basis, agrees within 4.5e-6; v, expressed in the eigenbasis that the two eigensolvers round differently
    # where eigenvalues are close, within 1.6e-4 (all measured).
    tolerance, v_tolerance = 1e-4, 5e-4
    for step, g in enumerate(grads):
        _set_grads(torch, layout, g)
        soap.step()
        adam.step()
        our_params, our_state = ours[step]
        inner = next(s for s in our_state if hasattr(s, "inner_states")).inner_states["matrix"].inner_state
        named = {k: dict(_leaves_with_names(getattr(inner, k))) for k in ("mu", "nu", "q_left", "q_right")}
        for (name, d, ts), (_, leaf) in zip(layout, _leaves_with_names(our_params)):
            views = [np.asarray(leaf)] if d is None else _matrix_views(np.asarray(leaf), d)
            for i, (t, view) in enumerate(zip(ts, views)):
                _close(view, t.detach().numpy(), f"step {step + 1} {name}[{i}]", tolerance)
                if d is None or step == 0:
                    continue
                state = soap.state[t]
                q_out, q_in = (q.numpy() for q in state["Q"])  # torch's layout: (out, in)
                m_ref = q_out @ state["exp_avg"].numpy() @ q_in.T
                ql, qr = np.asarray(named["q_left"][name])[i], np.asarray(named["q_right"][name])[i]
                m_ours = _matrix_views(np.asarray(named["mu"][name]), d)[i].T  # back to (fan_in, fan_out)
                _close((ql @ m_ours @ qr.T).T, m_ref, f"step {step + 1} {name}[{i}] first moment")
                _close(
                    _matrix_views(np.asarray(named["nu"][name]), d)[i],
                    state["exp_avg_sq"].numpy(),
                    f"step {step + 1} {name}[{i}] v",
                    v_tolerance,
                )


def test_schedule_free_adamw_equals_the_authors_reference_with_warmup():
    """Schedule-Free AdamW against ``schedulefree.AdamWScheduleFree`` (Defazio et al.'s package, 1.4.1): the
    parameters (y), z and the averaged x that is evaluated, over ten steps whose first three warm up, with
    weight decay on the matrices only."""
    torch = require_module("torch", "CPU torch (the export-test extra)")
    schedulefree = require_module("schedulefree", "schedulefree (the export-test extra)")
    import optax

    lr, warmup, b1, b2 = 3e-3, 3, 0.9, 0.95
    config = OptimizerConfig(
        kind="schedule_free_adamw",
        learning_rate=lr,
        beta1=b1,
        beta2=b2,
        weight_decay=0.1,
        schedule="constant",
        warmup=warmup,
        max_grad_norm=None,
    )
    params, grads = _tree()
    ours = _run_ours(config, params, grads)
    decays = jax.tree.leaves(config.decay_mask(param_axes(CFG)))
    ts = [torch.nn.Parameter(torch.tensor(np.asarray(leaf))) for _, leaf in _leaves_with_names(params)]
    reference = schedulefree.AdamWScheduleFree(
        [
            {"params": [t for t, d in zip(ts, decays) if d], "weight_decay": 0.1},
            {"params": [t for t, d in zip(ts, decays) if not d], "weight_decay": 0.0},
        ],
        lr=lr,
        betas=(b1, b2),
        eps=1e-8,
        warmup_steps=warmup,
    )
    reference.train()
    for step, g in enumerate(grads):
        for t, (_, grad) in zip(ts, _leaves_with_names(g)):
            t.grad = torch.tensor(np.asarray(grad))
        reference.step()
        y, state = ours[step]
        x = optax.contrib.schedule_free_eval_params(state, y)
        for t, (name, leaf), (_, z) in zip(ts, _leaves_with_names(y), _leaves_with_names(state.z)):
            _close(leaf, t.detach().numpy(), f"step {step + 1} {name} (y)")
            _close(z, reference.state[t]["z"].numpy(), f"step {step + 1} {name} (z)")
        reference.eval()  # the parameters become x
        for t, (name, leaf) in zip(ts, _leaves_with_names(x)):
            _close(leaf, t.detach().numpy(), f"step {step + 1} {name} (x)")
        reference.train()


def test_schedule_free_adamw_equals_optax_without_warmup():
    """Without warmup the learning rate is constant and optax's ``schedule_free_adamw`` (which weighs each z
    by the next step's rate) is the same algorithm: equal to it."""
    import optax

    config = OptimizerConfig(
        kind="schedule_free_adamw",
        learning_rate=3e-3,
        weight_decay=0.0,
        schedule="constant",
        warmup=0,
        max_grad_norm=None,
    )
    reference = optax.contrib.schedule_free_adamw(3e-3, b1=0.9, b2=0.95, eps=1e-8, weight_decay=0.0)
    params, grads = _tree()
    ours, theirs = _run_ours(config, params, grads), _run(reference, params, grads)
    for step, ((y, state), (p, ref_state)) in enumerate(zip(ours, theirs)):
        ours_x = optax.contrib.schedule_free_eval_params(state, y)
        ref_x = optax.contrib.schedule_free_eval_params(ref_state, p)
        for (name, a), (_, b) in zip(_leaves_with_names(y), _leaves_with_names(p)):
            _close(a, b, f"step {step + 1} {name} (y)")
        for (name, a), (_, b) in zip(_leaves_with_names(ours_x), _leaves_with_names(ref_x)):
            _close(a, b, f"step {step + 1} {name} (x)")


def test_muon_ns_dtype_at_its_default_leaves_the_identity_of_earlier_runs():
    """Runs before the option existed computed Newton–Schulz in fp32: at that default the field is not hashed."""
    from marin.identity import identity_fields

    def hashed(config):
        return {f.name for f in identity_fields(config)}

    assert "muon_ns_dtype" not in hashed(OptimizerConfig(kind="muon"))
    assert "muon_ns_dtype" in hashed(OptimizerConfig(kind="muon", muon_ns_dtype="bfloat16"))
