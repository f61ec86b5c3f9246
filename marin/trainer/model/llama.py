"""A Llama decoder as plain JAX: parameters are a dict of arrays, the forward pass is a function.

    params = init_params(cfg, jax.random.PRNGKey(0))      # {"embed": [vocab, embed], "layers": {...}, ...}
    axes = param_axes(cfg)                                  # same tree, logical axis names per leaf
    logits = forward(cfg, params, tokens)                   # tokens [batch, seq] -> [batch, seq, vocab]
    loss_sum, weight = next_token_loss(cfg, params, batch)  # summed so microbatches add up exactly
    next_token_loss(cfg, params, batch, matmul_dtype="float8")  # the same with q/k/v/o and gate/up/down in FP8

Every parameter is declared once in ``param_specs`` with its shape, logical axes and init, so shapes,
sharding names and initialisation cannot drift apart. Layer weights are stacked on a leading ``layers``
axis; ``jax.lax.scan`` runs one compiled block over them (or a Python loop, ``scan_layers=False``).

A block reads like the paper::

    x = x + attention(rms_norm(x))
    x = x + swiglu_mlp(rms_norm(x))

with the options of the Qwen and OLMo families by config: q/k/v biases (Qwen2), RMSNorm of the queries and
keys before RoPE per head (Qwen3) or over all heads (OLMo 2), the norms on the sublayers' outputs
(OLMo 2: ``x = x + rms_norm(attention(x))``), a sliding attention window in all or some layers (Mistral,
Qwen2/3's windowed layers: ``cfg.layer_window``), and a mixture of experts in place of the MLP (Mixtral,
Qwen3-MoE, OLMoE: ``moe.py``), whose router statistics every layer returns beside ``x`` for the router losses
(``training_loss``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from marin.trainer.attention import attention
from marin.trainer.attention.context import sequence_shards, zigzag_order
from marin.trainer.axes import (
    BATCH,
    EMBED,
    EXPERTS,
    HEAD_DIM,
    HEADS,
    KV_HEADS,
    LAYERS,
    MLP,
    SEQ,
    VOCAB,
    Axes,
    constrain,
    target_platform,
)
from marin.trainer.model.activations import swiglu_hidden
from marin.trainer.model.chunked_loss import chunked_token_loss
from marin.trainer.model.config import LlamaConfig
from marin.trainer.model.dense import dense
from marin.trainer.model.moe import RouterStats, empty_stats, moe_block, router_losses

Params = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class ParamSpec:
    shape: tuple[int, ...]
    axes: Axes
    init: str  # "normal" (std = initializer_range), "ones" or "zeros"


def param_specs(cfg: LlamaConfig) -> dict[str, Any]:
    """The model's parameters: shape, logical axes and initialiser of each, in one table."""
    d, m, v, n = cfg.hidden_dim, cfg.mlp_dim, cfg.vocab_size, cfg.num_layers
    h, kv, hd = cfg.num_heads, cfg.num_kv_heads, cfg.resolved_head_dim
    layers = {
        "attn_norm": ParamSpec((n, d), (LAYERS, EMBED), "ones"),
        "wq": ParamSpec((n, d, h, hd), (LAYERS, EMBED, HEADS, HEAD_DIM), "normal"),
        "wk": ParamSpec((n, d, kv, hd), (LAYERS, EMBED, KV_HEADS, HEAD_DIM), "normal"),
        "wv": ParamSpec((n, d, kv, hd), (LAYERS, EMBED, KV_HEADS, HEAD_DIM), "normal"),
        "wo": ParamSpec((n, h, hd, d), (LAYERS, HEADS, HEAD_DIM, EMBED), "normal"),
        "mlp_norm": ParamSpec((n, d), (LAYERS, EMBED), "ones"),
    }
    if cfg.is_moe:
        e, me = cfg.num_experts, cfg.resolved_expert_mlp_dim
        # experts: the router's output is a categorical axis like the head's vocab (Muon leaves it to AdamW,
        # undecayed: docs/optimizers.md), and expert parallelism's rule splits it with the experts
        layers["router"] = ParamSpec((n, d, e), (LAYERS, EMBED, EXPERTS), "normal")
        layers["w_gate"] = ParamSpec((n, e, d, me), (LAYERS, EXPERTS, EMBED, MLP), "normal")
        layers["w_up"] = ParamSpec((n, e, d, me), (LAYERS, EXPERTS, EMBED, MLP), "normal")
        layers["w_down"] = ParamSpec((n, e, me, d), (LAYERS, EXPERTS, MLP, EMBED), "normal")
        if cfg.shared_experts:
            ms = cfg.shared_experts * me
            layers["shared_gate"] = ParamSpec((n, d, ms), (LAYERS, EMBED, MLP), "normal")
            layers["shared_up"] = ParamSpec((n, d, ms), (LAYERS, EMBED, MLP), "normal")
            layers["shared_down"] = ParamSpec((n, ms, d), (LAYERS, MLP, EMBED), "normal")
    else:
        layers["w_gate"] = ParamSpec((n, d, m), (LAYERS, EMBED, MLP), "normal")
        layers["w_up"] = ParamSpec((n, d, m), (LAYERS, EMBED, MLP), "normal")
        layers["w_down"] = ParamSpec((n, m, d), (LAYERS, MLP, EMBED), "normal")
    if cfg.attention_bias:
        layers["bq"] = ParamSpec((n, h, hd), (LAYERS, HEADS, HEAD_DIM), "zeros")
        layers["bk"] = ParamSpec((n, kv, hd), (LAYERS, KV_HEADS, HEAD_DIM), "zeros")
        layers["bv"] = ParamSpec((n, kv, hd), (LAYERS, KV_HEADS, HEAD_DIM), "zeros")
    if cfg.qk_norm == "head":
        layers["q_norm"] = ParamSpec((n, hd), (LAYERS, HEAD_DIM), "ones")
        layers["k_norm"] = ParamSpec((n, hd), (LAYERS, HEAD_DIM), "ones")
    elif cfg.qk_norm == "full":
        layers["q_norm"] = ParamSpec((n, h, hd), (LAYERS, HEADS, HEAD_DIM), "ones")
        layers["k_norm"] = ParamSpec((n, kv, hd), (LAYERS, KV_HEADS, HEAD_DIM), "ones")
    specs: dict[str, Any] = {
        "embed": ParamSpec((v, d), (VOCAB, EMBED), "normal"),
        "layers": layers,
        "final_norm": ParamSpec((d,), (EMBED,), "ones"),
    }
    if not cfg.tie_embeddings:
        specs["lm_head"] = ParamSpec((d, v), (EMBED, VOCAB), "normal")
    return specs


def _is_spec(x: Any) -> bool:
    return isinstance(x, ParamSpec)


def param_axes(cfg: LlamaConfig) -> Params:
    """Logical axis names of every parameter, as a tree shaped like ``init_params``'s result."""
    return jax.tree.map(lambda s: s.axes, param_specs(cfg), is_leaf=_is_spec)


def init_params(cfg: LlamaConfig, key: jax.Array, dtype: Any = jnp.float32) -> Params:
    """Fresh parameters; leaf ``i`` (in tree order) draws from ``fold_in(key, i)``.

    Called eagerly, the leaves come from as few small programs as possible: every normal leaf of up to
    ``_LARGEST_BUCKETED_DRAW`` values draws one power-of-two bucket (the model's largest such leaf's) and keeps
    its prefix (``_draw_normal``), and constant leaves are host arrays (no program at all). One fused init
    program for all leaves costs seconds to compile every run, and a draw program per shape ~0.3 s each;
    small programs are compiled once per process and shared by every model with the same bucket. Under
    ``jit`` it fuses as usual.
    """
    specs, treedef = jax.tree.flatten(param_specs(cfg), is_leaf=_is_spec)
    traced = isinstance(key, jax.core.Tracer)
    drawn = [math.prod(spec.shape) for spec in specs if spec.init not in ("ones", "zeros")]
    bucket = 1 << (max([_SMALLEST_DRAW, *(n for n in drawn if n <= _LARGEST_BUCKETED_DRAW)]) - 1).bit_length()
    leaves = []
    for i, spec in enumerate(specs):
        if spec.init in ("ones", "zeros"):
            fill = 1.0 if spec.init == "ones" else 0.0
            leaves.append(
                jnp.full(spec.shape, fill, dtype) if traced else jnp.asarray(np.full(spec.shape, fill, dtype))
            )
        else:
            key_i = jax.random.fold_in(key, i)
            leaves.append(_draw_normal(key_i, spec.shape, cfg.initializer_range, jnp.dtype(dtype), bucket))
    return jax.tree.unflatten(treedef, leaves)


_SMALLEST_DRAW = 1 << 12
_LARGEST_BUCKETED_DRAW = 1 << 22
"""Leaves of up to 4M elements draw a power-of-two number of values (at least 4,096) and keep the first ones;
larger leaves draw exactly their own shape (their program's compile is nothing beside such a model's run, and
padding them could double a large transient)."""


def _draw_normal(key: jax.Array, shape: tuple[int, ...], std: float, dtype: Any, bucket: int = 0) -> jax.Array:
    """``normal(key, shape) * std`` as ``dtype``, bit for bit, from as few compiled programs as possible.

    XLA:CPU spends ~0.2-0.4 s compiling a threefry draw, once per distinct shape: a 2-layer model's init
    compiled ~10 of them (3 s, every training, eval or export process). With JAX's partitionable threefry
    (its default) the value at each flat index depends only on the key and the index, so the first ``n``
    values of a larger flat draw are exactly the ``n`` values of a draw of ``n``: a leaf draws ``bucket``
    values (default: its own power-of-two bucket) and keeps its prefix, so a model's leaves share one program
    and small models share a handful (also across processes, through a persistent compilation cache).
    Traced (under ``jit``/``eval_shape``), with another PRNG or with the old non-partitionable threefry, it
    draws the shape itself.
    """
    size = math.prod(shape)
    if isinstance(key, jax.core.Tracer) or size > _LARGEST_BUCKETED_DRAW or not _prefix_stable(key):
        return _normal(key, shape, std, dtype)
    bucket = max(bucket, _SMALLEST_DRAW, 1 << (size - 1).bit_length())
    return _leading(_normal(key, (bucket,), std, dtype), shape)


def _prefix_stable(key: jax.Array) -> bool:
    """Whether ``key``'s draws are prefixes of one another: partitionable threefry (typed or raw key)."""
    typed = jnp.issubdtype(key.dtype, jax.dtypes.prng_key)
    impl = str(jax.random.key_impl(key)) if typed else jax.config.jax_default_prng_impl
    return impl == "threefry2x32" and bool(jax.config.jax_threefry_partitionable)


@functools.partial(jax.jit, static_argnums=(1, 2, 3))
def _normal(key: jax.Array, shape: tuple[int, ...], std: float, dtype: Any) -> jax.Array:
    return (jax.random.normal(key, shape, jnp.float32) * std).astype(dtype)


@functools.partial(jax.jit, static_argnums=1)
def _leading(flat: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """The first ``prod(shape)`` values of ``flat``, in ``shape``."""
    return flat[: math.prod(shape)].reshape(shape)


# ----------------------------------------------------------------------------------------------------------
# Layers


def rms_norm(x: jax.Array, weight: jax.Array, eps: float) -> jax.Array:
    """RMSNorm computed in fp32 whatever the compute dtype (Zhang & Sennrich 2019)."""
    x32 = x.astype(jnp.float32)
    x32 = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    return (x32 * weight.astype(jnp.float32)).astype(x.dtype)


def rope_frequencies(cfg: LlamaConfig) -> np.ndarray:
    """Inverse frequencies [head_dim / 2], with Llama 3.1's scaling when configured."""
    hd = cfg.resolved_head_dim
    inv_freq = 1.0 / (cfg.rope_theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
    s = cfg.rope_scaling
    if s is None:
        return inv_freq
    # Wavelengths longer than original/low_freq_factor are stretched by `factor`, shorter than
    # original/high_freq_factor kept, and those between interpolated (HF transformers' "llama3").
    wavelen = 2 * math.pi / inv_freq
    smooth = (s.original_max_position / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor)
    smooth = np.clip(smooth, 0.0, 1.0)
    return (1 - smooth) * inv_freq / s.factor + smooth * inv_freq


def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """Rotate feature pairs (i, i + head_dim/2) by position-dependent angles (the HF/Llama layout).

    ``cos``/``sin`` are fp32, so the rotation happens in fp32 even for bf16 activations."""
    x1, x2 = jnp.split(x, 2, axis=-1)  # [batch, seq, heads, head_dim/2] each
    cos, sin = cos[None, :, None, :], sin[None, :, None, :]  # [1, seq, 1, head_dim/2]
    rotated = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return rotated.astype(x.dtype)


def qk_norm(cfg: LlamaConfig, x: jax.Array, weight: jax.Array) -> jax.Array:
    """Queries or keys [..., heads, head_dim] normalised per head (weight [head_dim]) or over all heads
    together (weight [heads, head_dim]); unchanged when ``cfg.qk_norm`` is "none"."""
    if cfg.qk_norm == "head":
        return rms_norm(x, weight, cfg.norm_eps)
    if cfg.qk_norm == "full":
        flat = x.reshape(*x.shape[:-2], x.shape[-2] * x.shape[-1])
        return rms_norm(flat, weight.reshape(-1), cfg.norm_eps).reshape(x.shape)
    return x


def project_qkv(cfg: LlamaConfig, layer: Params, x, cos, sin, matmul_dtype="default"):
    """Queries [batch, seq, heads, head_dim], keys and values [batch, seq, kv_heads, head_dim] of the block's
    (normalised) input: the projections, their biases, QK-norm, then RoPE on q and k. The serving engine's
    cached attention computes them with this same function."""
    q = dense(x, layer["wq"], matmul_dtype=matmul_dtype)
    k = dense(x, layer["wk"], matmul_dtype=matmul_dtype)
    v = dense(x, layer["wv"], matmul_dtype=matmul_dtype)
    if cfg.attention_bias:
        q, k, v = (t + b.astype(t.dtype) for t, b in ((q, layer["bq"]), (k, layer["bk"]), (v, layer["bv"])))
    if cfg.qk_norm != "none":
        q, k = qk_norm(cfg, q, layer["q_norm"]), qk_norm(cfg, k, layer["k_norm"])
    return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v


def residual(cfg: LlamaConfig, x: jax.Array, sublayer: Callable[[jax.Array], jax.Array], norm: jax.Array):
    """``x + sublayer(norm(x))`` (pre-norm), or ``x + norm(sublayer(x))`` with ``norm_placement="post"``."""
    if cfg.norm_placement == "post":
        return x + rms_norm(sublayer(x), norm, cfg.norm_eps)
    return x + sublayer(rms_norm(x, norm, cfg.norm_eps))


def attention_block(
    cfg: LlamaConfig,
    layer: Params,
    x,
    cos,
    sin,
    segment_ids,
    matmul_dtype="default",
    window: int | None = None,
    positions: np.ndarray | None = None,
) -> jax.Array:
    """``positions``: the slots' global positions when the sequence is split over the context axis (zigzag)."""
    q, k, v = project_qkv(cfg, layer, x, cos, sin, matmul_dtype)
    q = constrain(q, (BATCH, SEQ, HEADS, HEAD_DIM))
    out = attention(
        q,
        k,
        v,
        segment_ids,
        backend=cfg.attention_backend,
        window=window,
        positions=positions,
        context_method=cfg.context_attention,
    )  # [batch, seq, heads, head_dim]
    return dense(out, layer["wo"], n_in=2, matmul_dtype=matmul_dtype)  # [batch, seq, embed]


def mlp_block(layer: Params, x: jax.Array, matmul_dtype: str = "default") -> jax.Array:
    """The dense SwiGLU (Shazeer 2020): down(silu(gate(x)) * up(x))."""
    gate = dense(x, layer["w_gate"], matmul_dtype=matmul_dtype)
    hidden = constrain(swiglu_hidden(gate, dense(x, layer["w_up"], matmul_dtype=matmul_dtype)), (BATCH, SEQ, MLP))
    return dense(hidden, layer["w_down"], matmul_dtype=matmul_dtype)  # [batch, seq, embed]


def feed_forward(cfg: LlamaConfig, layer: Params, x: jax.Array, matmul_dtype: str = "default"):
    """The layer's MLP, dense or mixture-of-experts (``moe.py``): output [batch, seq, embed] and the router's
    statistics (None for a dense model)."""
    if cfg.is_moe:
        return moe_block(cfg, layer, x, matmul_dtype)
    return mlp_block(layer, x, matmul_dtype), None


def decoder_block(
    cfg: LlamaConfig,
    layer: Params,
    x,
    cos,
    sin,
    segment_ids,
    matmul_dtype="default",
    window: int | None = None,
    positions: np.ndarray | None = None,
):
    """One layer (attending within ``window`` keys if given): ``(x, router stats or None)``."""
    attend = functools.partial(
        attention_block, cfg, layer, cos=cos, sin=sin, segment_ids=segment_ids, window=window, positions=positions
    )
    x = residual(cfg, x, lambda y: attend(y, matmul_dtype=matmul_dtype), layer["attn_norm"])
    stats = []

    def mlp(y):
        out, layer_stats = feed_forward(cfg, layer, y, matmul_dtype)
        stats.append(layer_stats)
        return out

    x = residual(cfg, x, mlp, layer["mlp_norm"])
    return constrain(x, (BATCH, SEQ, EMBED)), stats[0]


_REMAT: dict[str, Callable[..., bool] | None] = {
    "minimal": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
    "full": jax.checkpoint_policies.nothing_saveable,
}


def _layer_stack(cfg: LlamaConfig, layers: Params, x, cos, sin, segment_ids, matmul_dtype: str, positions=None):
    """The blocks in order: the last hidden states and the router statistics summed over layers (None: dense).

    A layer's attention window is static in its block (the kernels skip the key blocks it hides). Unrolled,
    each layer gets the block of its window; under ``scan`` one compiled block serves every layer, so a stack
    that mixes windowed and full layers scans a per-layer flag and ``lax.cond`` picks the variant."""
    windows = cfg.layer_windows
    scan = cfg.scan_layers if cfg.scan_layers is not None else target_platform() == "tpu"

    def block_with(window: int | None):
        def block(x, layer):
            return decoder_block(cfg, layer, x, cos, sin, segment_ids, matmul_dtype, window, positions)

        if cfg.remat != "none":
            block = jax.checkpoint(block, policy=_REMAT[cfg.remat], prevent_cse=not scan)
        return block

    if scan:
        if len(set(windows)) == 1:
            x, stats = jax.lax.scan(block_with(windows[0]), x, layers)
        else:
            full, windowed = block_with(None), block_with(cfg.sliding_window)
            flags = jnp.asarray([w is not None for w in windows])
            x, stats = jax.lax.scan(lambda x, xs: jax.lax.cond(xs[1], windowed, full, x, xs[0]), x, (layers, flags))
        return x, (jax.tree.map(lambda s: jnp.sum(s, axis=0), stats) if cfg.is_moe else None)
    blocks = {w: block_with(w) for w in set(windows)}
    total = empty_stats(cfg.num_experts) if cfg.is_moe else None
    leaves, treedef = jax.tree.flatten(layers)
    unstacked = [_unstack(leaf) for leaf in leaves]
    for i in range(cfg.num_layers):
        x, stats = blocks[windows[i]](x, treedef.unflatten([u[i] for u in unstacked]))
        if cfg.is_moe:
            total = jax.tree.map(jnp.add, total, stats)
    return x, total


@jax.custom_vjp
def _unstack(stacked: jax.Array) -> tuple[jax.Array, ...]:
    """The layers of a stacked parameter, for the unrolled stack; its gradient is the layers' gradients stacked.

    Indexed one layer at a time, the stack's gradient is the sum of every layer's gradient padded to the whole
    stack: XLA:CPU fuses those pads and adds into one loop over the stack per parameter that reads all the
    layers' gradients for every element (9 of them took 5.8 ms of the baby Shakespeare step's ~40 in bf16). A
    ``stack`` is a concatenation, a copy of each gradient: the same values, bit for bit, and the baby step 1.15x
    faster (benchmarks/trainer_bench.py --configs baby --dtype bfloat16, 2026-12-01, docs/trainer.md)."""
    return tuple(stacked[i] for i in range(stacked.shape[0]))


def _unstack_fwd(stacked):
    return _unstack(stacked), None


def _unstack_bwd(_, cotangents):
    return (jnp.stack(cotangents),)


_unstack.defvjp(_unstack_fwd, _unstack_bwd)


# ----------------------------------------------------------------------------------------------------------
# The model


def hidden_states(
    cfg: LlamaConfig,
    params: Params,
    tokens: jax.Array,
    segment_ids: jax.Array | None = None,
    *,
    matmul_dtype: str = "default",
):
    """Final normalised hidden states [batch, seq, embed] in the parameters' dtype.

    ``matmul_dtype`` is ``dense``'s, for the blocks' projections (``PrecisionPolicy.matmul_dtype``)."""
    return hidden_states_and_router_stats(cfg, params, tokens, segment_ids, matmul_dtype=matmul_dtype)[0]


def hidden_states_and_router_stats(
    cfg: LlamaConfig,
    params: Params,
    tokens: jax.Array,
    segment_ids: jax.Array | None = None,
    *,
    matmul_dtype: str = "default",
    positions: np.ndarray | None = None,
) -> tuple[jax.Array, RouterStats | None]:
    """``hidden_states`` and a MoE's router statistics summed over its layers (None for a dense model).

    ``positions`` [seq] (static): the global position of each slot when the tokens are not in order (the zigzag
    layout of context parallelism, ``attention/context.py``); RoPE and the attention masks follow them."""
    seq = tokens.shape[1]
    pos = np.arange(seq) if positions is None else np.asarray(positions)
    angles = pos[:, None] * rope_frequencies(cfg)[None, :]  # [seq, head_dim/2], built at trace time
    cos, sin = jnp.asarray(np.cos(angles), jnp.float32), jnp.asarray(np.sin(angles), jnp.float32)
    # Gather whole rows: the table's embed dimension is un-sharded first (what FSDP does to every weight
    # before use); a gather from a table split along embed cannot be re-split by batch without
    # replicating the result (XLA's "involuntary full rematerialization" under fsdp_tp).
    table = constrain(params["embed"], (VOCAB, None))  # [vocab, embed]
    x = constrain(table[tokens], (BATCH, SEQ, EMBED))  # [batch, seq, embed]
    x, stats = _layer_stack(cfg, params["layers"], x, cos, sin, segment_ids, matmul_dtype, positions)
    return rms_norm(x, params["final_norm"], cfg.norm_eps), stats


def output_projection(cfg: LlamaConfig, params: Params) -> jax.Array:
    return params["embed"].T if cfg.tie_embeddings else params["lm_head"]  # [embed, vocab]


def forward_and_router_stats(
    cfg: LlamaConfig,
    params: Params,
    tokens: jax.Array,
    segment_ids: jax.Array | None = None,
    *,
    matmul_dtype: str = "default",
    positions: np.ndarray | None = None,
) -> tuple[jax.Array, RouterStats | None]:
    """``forward``'s logits and a MoE's router statistics summed over its layers (None for a dense model): what
    an objective needs to add the router losses (``moe.router_losses``). ``positions``: as ``hidden_states``'s."""
    x, stats = hidden_states_and_router_stats(
        cfg, params, tokens, segment_ids, matmul_dtype=matmul_dtype, positions=positions
    )
    return dense(x, output_projection(cfg, params), out_dtype=jnp.float32), stats


def forward(
    cfg: LlamaConfig,
    params: Params,
    tokens: jax.Array,
    segment_ids: jax.Array | None = None,
    *,
    matmul_dtype: str = "default",
):
    """Logits [batch, seq, vocab] in fp32 for tokens [batch, seq].

    ``matmul_dtype="float8"`` runs the blocks' projections in FP8; the lm_head never (``fp8.py`` says why)."""
    return forward_and_router_stats(cfg, params, tokens, segment_ids, matmul_dtype=matmul_dtype)[0]


def next_token_loss(
    cfg: LlamaConfig,
    params: Params,
    batch: Mapping[str, jax.Array],
    *,
    z_loss: float = 0.0,
    matmul_dtype: str = "default",
    loss_block: int | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Summed cross-entropy (+ z-loss) over unmasked targets, and the number of those targets.

    ``batch`` holds ``input_ids``, ``targets``, ``segment_ids`` [batch, seq] and ``loss_mask`` (float).
    Sums, not means, so that microbatches add up to exactly the big batch's loss; the caller divides.
    The z-loss term ``z_loss * logsumexp(logits)**2`` keeps the softmax normaliser near 1 (PaLM).
    A mixture-of-experts' router losses are not included (``training_loss`` adds them). ``loss_block``: compute
    it ``loss_block`` positions at a time from the hidden states (``chunked_loss.py``), never the whole logits.
    """
    return _token_loss(cfg, params, batch, z_loss, matmul_dtype, loss_block)[:2]


def training_loss(
    cfg: LlamaConfig,
    params: Params,
    batch: Mapping[str, jax.Array],
    *,
    z_loss: float = 0.0,
    matmul_dtype: str = "default",
    loss_block: int | None = None,
) -> tuple[jax.Array, jax.Array, dict[str, jax.Array]]:
    """``next_token_loss`` plus a MoE's router losses (``moe.router_losses``: load balance and router z-loss,
    weighted by their config coefficients, added to the mean token loss), and summed metrics.

    Everything is summed as the step expects (``step.LossFn``): the router terms and metrics are multiplied by
    the number of targets, so that the step's division by the total gives their token-weighted mean over
    microbatches. Dense models: ``(loss_sum, weight, {})``."""
    loss_sum, weight, stats = _token_loss(cfg, params, batch, z_loss, matmul_dtype, loss_block)
    if stats is None:
        return loss_sum, weight, {}
    router = router_losses(cfg, stats)
    return loss_sum + router["router_loss"] * weight, weight, {k: v * weight for k, v in router.items()}


_SEQUENCE_LEAVES = ("input_ids", "targets", "segment_ids", "loss_mask")


def _token_loss(cfg, params, batch, z_loss, matmul_dtype, loss_block=None):
    # Context parallelism: the sequence in zigzag order (attention/context.py), so that every device of the context
    # axis does the same causal work; the loss is a sum over tokens, indifferent to their order.
    positions = zigzag_order(batch["input_ids"].shape[1], sequence_shards())
    if positions is not None:
        batch = {k: constrain(v[:, positions], (BATCH, SEQ)) if k in _SEQUENCE_LEAVES else v for k, v in batch.items()}
    if loss_block:  # the logits a block at a time (chunked_loss.py): same loss, never [batch, seq, vocab] whole
        x, stats = hidden_states_and_router_stats(
            cfg, params, batch["input_ids"], batch["segment_ids"], matmul_dtype=matmul_dtype, positions=positions
        )
        w = output_projection(cfg, params)
        loss_sum, weight = chunked_token_loss(
            x, w, batch["targets"], batch["loss_mask"], z_loss=z_loss, block=loss_block
        )
        return loss_sum, weight, stats
    logits, stats = forward_and_router_stats(
        cfg, params, batch["input_ids"], batch["segment_ids"], matmul_dtype=matmul_dtype, positions=positions
    )  # [batch, seq, vocab] fp32
    log_z = jax.nn.logsumexp(logits, axis=-1)  # [batch, seq]
    target_logit = jnp.take_along_axis(logits, batch["targets"][..., None], axis=-1)[..., 0]
    per_token = log_z - target_logit
    if z_loss:
        per_token = per_token + z_loss * jnp.square(log_z)
    mask = batch["loss_mask"].astype(jnp.float32)
    return jnp.sum(per_token * mask), jnp.sum(mask), stats
