"""Llama model configs: one dataclass, size presets in a registry, parameter count and FLOPs per token.

    cfg = model_preset("llama_8b")             # hidden 4096, mlp 14336, 32 layers, 32/8 heads, seq 4096
    cfg.param_count                             # 8_030_261_248, Meta's published Llama-3-8B count
    cfg.flops_per_token()                       # 5.15e10 training FLOPs per token at seq_len 4096
    tiny = dataclasses.replace(model_preset("nano"), num_layers=1)

Presets are functions registered by name, and variants derive with ``dataclasses.replace``. The
hyperparameter vocabulary (``num_layers``, ``num_heads``, ``num_kv_heads``, ``hidden_dim``, ``mlp_dim``,
``seq_len``, ``vocab_size``) is the one used everywhere in the lab.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from marin.identity import added_field, runtime_field

_REMAT_POLICIES = ("none", "minimal", "full")
CONTEXT_ATTENTION = ("default", "ring", "all_gather")
QK_NORMS = ("none", "head", "full")
NORM_PLACEMENTS = ("pre", "post")
ROUTER_ORDERS = ("softmax_topk", "topk_softmax")
MOE_DISPATCHES = ("default", "ragged", "blocked", "dense")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Llama3RopeScaling:
    """Llama 3.1's frequency-dependent RoPE stretching (the "llama3" rope_type of HF transformers)."""

    factor: float = 8.0
    """How much longer the target context is than the original one."""
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position: int = 8192
    """The context length the unscaled model was trained at."""

    def __post_init__(self):
        if self.factor < 1:
            raise ValueError(f"Llama3RopeScaling.factor must be >= 1, got {self.factor}")
        if not 0 < self.low_freq_factor < self.high_freq_factor:
            raise ValueError(
                f"Llama3RopeScaling needs 0 < low_freq_factor < high_freq_factor, got "
                f"{self.low_freq_factor} and {self.high_freq_factor}"
            )


@dataclasses.dataclass(frozen=True, kw_only=True)
class LlamaConfig:
    """A Llama-style decoder: RMSNorm pre-norm blocks, grouped-query attention with RoPE, SwiGLU MLP."""

    vocab_size: int
    hidden_dim: int
    """Width of the residual stream."""
    mlp_dim: int
    """Hidden width of the SwiGLU feed-forward layer."""
    num_layers: int
    num_heads: int
    num_kv_heads: int
    """Key/value heads; ``num_heads`` must be a multiple (grouped-query attention)."""
    seq_len: int
    """Training context length (also the default for FLOPs per token)."""
    head_dim: int | None = None
    """Features per head; ``hidden_dim // num_heads`` when None."""
    rope_theta: float = 10_000.0
    rope_scaling: Llama3RopeScaling | None = None
    norm_eps: float = 1e-5
    tie_embeddings: bool = False
    """Use the token embedding (transposed) as the output projection."""
    initializer_range: float = 0.02
    """Standard deviation of the normal init of every matrix."""
    # Options of the Qwen and OLMo families (added_field: at their defaults, Llama's, they leave every
    # existing step's identity as it was).
    qk_norm: str = added_field("none")
    """RMSNorm of the queries and keys before RoPE: "head" over each head's features (Qwen3), "full" over all
    heads' features together (OLMo 2), "none" (Llama)."""
    norm_placement: str = added_field("pre")
    """"pre": ``x + f(norm(x))`` (Llama, Qwen); "post": ``x + norm(f(x))``, the norms on the attention and MLP
    outputs (OLMo 2)."""
    attention_bias: bool = added_field(False)
    """Biases on the query, key and value projections (Qwen2); the output projection has none."""
    sliding_window: int | None = added_field(None)
    """Keys a query sees in a sliding-window layer, itself included, as HF's ``sliding_window`` counts
    (position t sees s with ``t - window < s <= t``; Mistral: 4096). None: full causal attention everywhere."""
    sliding_window_layers: tuple[int, ...] | None = added_field(None)
    """Indices of the layers that use ``sliding_window``; None: every layer (Mistral, Mixtral). Qwen2/3's
    ``max_window_layers`` (the layers from it on) and Gemma-style alternation are lists of indices here."""
    # Mixture-of-experts (``moe.py``): with ``num_experts > 0`` every layer's MLP is a routed set of SwiGLU
    # experts (Mixtral, Qwen3-MoE, OLMoE) instead of one dense SwiGLU.
    num_experts: int = added_field(0)
    """Routed experts per layer; 0 is the dense model."""
    experts_per_token: int = added_field(2)
    """Top-k: the experts each token is sent to."""
    expert_mlp_dim: int | None = added_field(None)
    """Hidden width of each expert (Qwen3-MoE's ``moe_intermediate_size``); ``mlp_dim`` when None."""
    shared_experts: int = added_field(0)
    """Experts every token passes through, unweighted, besides its routed ones (DeepSeek); one SwiGLU of
    ``shared_experts * expert_mlp_dim`` hidden units."""
    router_order: str = added_field("softmax_topk")
    """"softmax_topk": softmax over all experts, then the top k probabilities (Mixtral, Qwen3-MoE, OLMoE);
    "topk_softmax": the top k logits, then a softmax over them (equal to the former renormalized)."""
    normalize_topk: bool = added_field(True)
    """Under "softmax_topk", rescale the k chosen probabilities to sum to 1 (Mixtral; Qwen3-MoE's and OLMoE's
    ``norm_topk_prob``, false in both)."""
    router_aux_loss_coef: float = added_field(0.01)
    """Weight of the load-balancing loss (Switch Transformer's, as transformers' Mixtral computes it)."""
    router_z_loss_coef: float = added_field(0.0)
    """Weight of the router z-loss, the mean squared logsumexp of the router logits (ST-MoE; OLMoE: 0.001)."""
    capacity_factor: float | None = added_field(None)
    """None: dropless. A number: each expert takes at most ``ceil(capacity_factor * tokens * k / experts)`` of a
    batch's assignments (GShard), the rest are dropped (counted in the metrics)."""
    # How the model runs, not what it computes (``marin.identity``): never part of a step's identity, and not
    # stored with checkpoints, so a model trained with one setting is used with another.
    scan_layers: bool | None = runtime_field(None)
    """Run the layer stack with ``jax.lax.scan`` (one compiled block) instead of unrolling it. None: unroll
    on CPU and GPU, where XLA fuses across layers and skips the scan's per-layer slicing of stacked weights
    (measured faster on both: ~12% on CPU, 1.21x on an H200 at llama_1b's blocks, for twice the compile
    time; docs/trainer.md), scan on TPU (not measured there; compile time stays flat in depth)."""
    remat: str = runtime_field("none")
    """Rematerialisation per block: "none" (save everything), "minimal" (save matmul outputs, recompute
    the elementwise work), "full" (save only each block's input, recompute the whole block)."""
    attention_backend: str = runtime_field("default")
    """A name from ``marin.trainer.attention.ATTENTION_BACKENDS``; "default" picks one per platform."""
    context_attention: str = runtime_field("default")
    """How attention crosses a sequence split over the mesh's context axis (``attention/context.py``): "ring"
    (keys and values passed round), "all_gather" (gathered whole, Llama 3's way) or "default" (the platform's)."""
    moe_dispatch: str = runtime_field("default")
    """How a dropless MoE layer computes (the same result either way): "ragged" sorts the assignments by expert
    and runs grouped matmuls (``jax.lax.ragged_dot``), "blocked" pads the sorted groups to blocks of rows and
    runs one batched matmul over the blocks' gathered expert weights, "dense" runs every expert on every token
    and zeroes the unchosen (one-hot einsum; experts/k times the FLOPs). "default": "ragged" on TPU, "blocked"
    elsewhere (``moe.dispatch_name``; measured in docs/model_families.md)."""

    def __post_init__(self):
        for name in ("vocab_size", "hidden_dim", "mlp_dim", "num_layers", "num_heads", "num_kv_heads", "seq_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"LlamaConfig.{name} must be a positive int, got {value!r}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"LlamaConfig.num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})"
            )
        if self.head_dim is None and self.hidden_dim % self.num_heads:
            raise ValueError(
                f"LlamaConfig.hidden_dim ({self.hidden_dim}) is not divisible by num_heads ({self.num_heads}); "
                "set head_dim explicitly"
            )
        if self.resolved_head_dim % 2:
            raise ValueError(f"LlamaConfig.head_dim must be even for RoPE, got {self.resolved_head_dim}")
        if self.context_attention not in CONTEXT_ATTENTION:
            raise ValueError(
                f"LlamaConfig.context_attention must be one of {CONTEXT_ATTENTION}, got {self.context_attention!r}"
            )
        if self.remat not in _REMAT_POLICIES:
            raise ValueError(f"LlamaConfig.remat must be one of {_REMAT_POLICIES}, got {self.remat!r}")
        if self.initializer_range <= 0:
            raise ValueError(f"LlamaConfig.initializer_range must be > 0, got {self.initializer_range}")
        if self.qk_norm not in QK_NORMS:
            raise ValueError(f"LlamaConfig.qk_norm must be one of {QK_NORMS}, got {self.qk_norm!r}")
        if self.norm_placement not in NORM_PLACEMENTS:
            raise ValueError(
                f"LlamaConfig.norm_placement must be one of {NORM_PLACEMENTS}, got {self.norm_placement!r}"
            )
        self._check_sliding_window()
        self._check_moe()

    def _check_sliding_window(self) -> None:
        window, layers = self.sliding_window, self.sliding_window_layers
        if window is not None and (not isinstance(window, int) or isinstance(window, bool) or window < 1):
            raise ValueError(f"LlamaConfig.sliding_window must be a positive int (keys seen) or None, got {window!r}")
        if layers is None:
            return
        if window is None:
            raise ValueError(f"LlamaConfig.sliding_window_layers {layers!r} given without a sliding_window")
        bad = [i for i in layers if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < self.num_layers]
        if bad or len(set(layers)) != len(layers):
            raise ValueError(
                f"LlamaConfig.sliding_window_layers must be distinct layer indices in [0, {self.num_layers}), "
                f"got {layers!r}"
            )
        # a list from JSON (a stored checkpoint config) or draccus becomes a sorted tuple: one spelling per
        # model (the identity), and hashable (jit's static argument)
        object.__setattr__(self, "sliding_window_layers", tuple(sorted(layers)))

    def layer_window(self, layer: int) -> int | None:
        """The sliding window of layer ``layer`` (None: full causal attention)."""
        if self.sliding_window is None:
            return None
        if self.sliding_window_layers is None or layer in self.sliding_window_layers:
            return self.sliding_window
        return None

    @property
    def layer_windows(self) -> tuple[int | None, ...]:
        return tuple(self.layer_window(i) for i in range(self.num_layers))

    def _check_moe(self) -> None:
        if not isinstance(self.num_experts, int) or self.num_experts < 0:
            raise ValueError(f"LlamaConfig.num_experts must be an int >= 0 (0: dense), got {self.num_experts!r}")
        if not self.num_experts:
            return
        if not 1 <= self.experts_per_token <= self.num_experts:
            raise ValueError(
                f"LlamaConfig.experts_per_token (top-k) must be between 1 and num_experts ({self.num_experts}), "
                f"got {self.experts_per_token}"
            )
        if self.expert_mlp_dim is not None and self.expert_mlp_dim <= 0:
            raise ValueError(f"LlamaConfig.expert_mlp_dim must be positive, got {self.expert_mlp_dim}")
        if self.shared_experts < 0:
            raise ValueError(f"LlamaConfig.shared_experts must be >= 0, got {self.shared_experts}")
        if self.router_order not in ROUTER_ORDERS:
            raise ValueError(f"LlamaConfig.router_order must be one of {ROUTER_ORDERS}, got {self.router_order!r}")
        if self.router_aux_loss_coef < 0 or self.router_z_loss_coef < 0:
            raise ValueError(
                "LlamaConfig.router_aux_loss_coef and router_z_loss_coef must be >= 0, got "
                f"{self.router_aux_loss_coef} and {self.router_z_loss_coef}"
            )
        if self.capacity_factor is not None and not self.capacity_factor > 0:
            raise ValueError(f"LlamaConfig.capacity_factor must be > 0 or None (dropless), got {self.capacity_factor}")
        if self.moe_dispatch not in MOE_DISPATCHES:
            raise ValueError(f"LlamaConfig.moe_dispatch must be one of {MOE_DISPATCHES}, got {self.moe_dispatch!r}")

    @classmethod
    def from_dict(cls, fields: dict[str, Any]) -> LlamaConfig:
        """Inverse of ``dataclasses.asdict`` / ``marin.identity.result_dict`` (a checkpoint's stored config)."""
        fields = dict(fields)
        if fields.get("rope_scaling"):
            fields["rope_scaling"] = Llama3RopeScaling(**fields["rope_scaling"])
        return cls(**fields)

    @property
    def resolved_head_dim(self) -> int:
        return self.head_dim if self.head_dim is not None else self.hidden_dim // self.num_heads

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def resolved_expert_mlp_dim(self) -> int:
        return self.expert_mlp_dim if self.expert_mlp_dim is not None else self.mlp_dim

    def mlp_params_per_layer(self, *, active: bool = False) -> int:
        """A layer's feed-forward matrices: the dense SwiGLU's, or the router's, every expert's (``active``: the
        k a token uses) and the shared experts'."""
        d = self.hidden_dim
        if not self.is_moe:
            return 3 * d * self.mlp_dim
        m = self.resolved_expert_mlp_dim
        experts = self.experts_per_token if active else self.num_experts
        return d * self.num_experts + 3 * d * m * (experts + self.shared_experts)

    @property
    def vector_params_per_layer(self) -> int:
        """A layer's parameters that multiply nothing: its two norms, QK-norm weights and q/k/v biases."""
        hd, h, kv = self.resolved_head_dim, self.num_heads, self.num_kv_heads
        qk_norm = {"none": 0, "head": 2 * hd, "full": (h + kv) * hd}[self.qk_norm]
        return 2 * self.hidden_dim + qk_norm + ((h + 2 * kv) * hd if self.attention_bias else 0)

    @property
    def param_count(self) -> int:
        """Every trainable scalar, embeddings and norms included (the number model cards quote)."""
        d, hd = self.hidden_dim, self.resolved_head_dim
        attention = d * hd * (2 * self.num_heads + 2 * self.num_kv_heads)  # q, o and k, v
        per_layer = attention + self.mlp_params_per_layer() + self.vector_params_per_layer  # + gate/up/down, norms
        embeddings = self.vocab_size * d * (1 if self.tie_embeddings else 2)
        return embeddings + self.num_layers * per_layer + d  # + final norm

    @property
    def matmul_param_count(self) -> int:
        """Parameters that multiply activations: all but norms, biases and the embedding lookup (lm_head counts)."""
        d = self.hidden_dim
        vectors = self.num_layers * self.vector_params_per_layer + d
        return self.param_count - self.vocab_size * d * (0 if self.tie_embeddings else 1) - vectors

    @property
    def active_param_count(self) -> int:
        """Parameters one token uses: ``param_count`` with only k routed experts per layer (what MoE papers call
        active parameters; equal to ``param_count`` for a dense model)."""
        unused = self.mlp_params_per_layer() - self.mlp_params_per_layer(active=True)
        return self.param_count - self.num_layers * unused

    @property
    def active_matmul_param_count(self) -> int:
        return self.matmul_param_count - (self.param_count - self.active_param_count)

    def flops_per_token(self, seq_len: int | None = None) -> float:
        """Training FLOPs (forward + backward) per token, as in PaLM's appendix B: ``6N + 12·L·H·Q·T``.

        ``N`` is ``active_matmul_param_count`` (all matmul parameters of a dense model; a MoE's router, shared
        experts and k routed experts, whatever its dispatch actually computes); the attention term counts the
        full (non-causal) score and value matmuls, which is what an unmasked-block kernel and XLA's cost analysis
        both count, over ``min(seq, window)`` keys in a sliding-window layer.
        """
        seq = self.seq_len if seq_len is None else seq_len
        keys = sum(seq if w is None else min(seq, w) for w in self.layer_windows)
        attention = 12 * self.num_heads * self.resolved_head_dim * keys
        return float(6 * self.active_matmul_param_count + attention)


MODEL_PRESETS: dict[str, Callable[[], LlamaConfig]] = {}


def register_model_preset(name: str) -> Callable[[Callable[[], LlamaConfig]], Callable[[], LlamaConfig]]:
    def register(fn: Callable[[], LlamaConfig]) -> Callable[[], LlamaConfig]:
        if name in MODEL_PRESETS:
            raise ValueError(f"model preset {name!r} registered twice")
        MODEL_PRESETS[name] = fn
        return fn

    return register


def model_preset(name: str) -> LlamaConfig:
    try:
        return MODEL_PRESETS[name]()
    except KeyError:
        raise KeyError(f"unknown model preset {name!r}; known: {sorted(MODEL_PRESETS)}") from None


@register_model_preset("nano")
def nano() -> LlamaConfig:
    """5.8M parameters: trains in seconds on a laptop CPU (the benchmark's first config)."""
    return LlamaConfig(
        vocab_size=8192, hidden_dim=256, mlp_dim=688, num_layers=2, num_heads=4, num_kv_heads=4, seq_len=256
    )


@register_model_preset("small")
def small() -> LlamaConfig:
    """~26M parameters (the benchmark's second config)."""
    return LlamaConfig(
        vocab_size=8192, hidden_dim=512, mlp_dim=1376, num_layers=6, num_heads=8, num_kv_heads=4, seq_len=512
    )


_LLAMA3_VOCAB = 128_256


@register_model_preset("llama_150m")
def llama_150m() -> LlamaConfig:
    """Marin's smallest scaling-ladder Llama (Llama 3 tokenizer)."""
    return LlamaConfig(
        vocab_size=_LLAMA3_VOCAB,
        hidden_dim=768,
        mlp_dim=2688,
        num_layers=12,
        num_heads=12,
        num_kv_heads=12,
        seq_len=4096,
        rope_theta=500_000.0,
    )


@register_model_preset("llama_1b")
def llama_1b() -> LlamaConfig:
    """Shaped like Llama-3.2-1B: tied embeddings, RoPE scaling factor 32."""
    return LlamaConfig(
        vocab_size=_LLAMA3_VOCAB,
        hidden_dim=2048,
        mlp_dim=8192,
        num_layers=16,
        num_heads=32,
        num_kv_heads=8,
        seq_len=4096,
        rope_theta=500_000.0,
        rope_scaling=Llama3RopeScaling(factor=32.0),
        tie_embeddings=True,
    )


@register_model_preset("llama_8b")
def llama_8b() -> LlamaConfig:
    """Shaped like Llama-3.1-8B (Marin's Tootsie 8B run)."""
    return LlamaConfig(
        vocab_size=_LLAMA3_VOCAB,
        hidden_dim=4096,
        mlp_dim=14336,
        num_layers=32,
        num_heads=32,
        num_kv_heads=8,
        seq_len=4096,
        rope_theta=500_000.0,
        rope_scaling=Llama3RopeScaling(),
        remat="full",
    )


# Other families' published shapes (their HF config.json files), as options of the one model.
_QWEN3_VOCAB = 151_936


@register_model_preset("qwen3_0_6b")
def qwen3_0_6b() -> LlamaConfig:
    """Shaped like Qwen3-0.6B: QK-norm per head, head_dim 128 independent of width, tied embeddings
    (596M parameters, 440M without the embedding, as its model card says)."""
    return LlamaConfig(
        vocab_size=_QWEN3_VOCAB,
        hidden_dim=1024,
        mlp_dim=3072,
        num_layers=28,
        num_heads=16,
        num_kv_heads=8,
        head_dim=128,
        seq_len=4096,
        rope_theta=1_000_000.0,
        norm_eps=1e-6,
        tie_embeddings=True,
        qk_norm="head",
    )


@register_model_preset("qwen3_32b")
def qwen3_32b() -> LlamaConfig:
    """Shaped like Qwen3-32B, the architecture of Marin's 32B run (32.8B parameters)."""
    return LlamaConfig(
        vocab_size=_QWEN3_VOCAB,
        hidden_dim=5120,
        mlp_dim=25600,
        num_layers=64,
        num_heads=64,
        num_kv_heads=8,
        head_dim=128,
        seq_len=4096,
        rope_theta=1_000_000.0,
        norm_eps=1e-6,
        qk_norm="head",
        remat="full",
    )


@register_model_preset("olmo2_1b")
def olmo2_1b() -> LlamaConfig:
    """Shaped like OLMo-2-0425-1B: QK-norm over all heads, norms on the sublayers' outputs (1.48B)."""
    return LlamaConfig(
        vocab_size=100_352,
        hidden_dim=2048,
        mlp_dim=8192,
        num_layers=16,
        num_heads=16,
        num_kv_heads=16,
        seq_len=4096,
        rope_theta=500_000.0,
        norm_eps=1e-6,
        qk_norm="full",
        norm_placement="post",
    )


@register_model_preset("olmoe_1b_7b")
def olmoe_1b_7b() -> LlamaConfig:
    """Shaped like OLMoE-1B-7B: 64 experts of width 1024, top-8 without renormalization, load-balancing loss
    0.01 and router z-loss 0.001 (6.9B parameters, 1.3B active)."""
    return LlamaConfig(
        vocab_size=50_304,
        hidden_dim=2048,
        mlp_dim=1024,
        num_layers=16,
        num_heads=16,
        num_kv_heads=16,
        seq_len=4096,
        qk_norm="full",
        num_experts=64,
        experts_per_token=8,
        normalize_topk=False,
        router_aux_loss_coef=0.01,
        router_z_loss_coef=0.001,
    )


@register_model_preset("mixtral_8x7b")
def mixtral_8x7b() -> LlamaConfig:
    """Shaped like Mixtral-8x7B: 8 experts of width 14336, top-2 renormalized (46.7B parameters, 12.9B
    active)."""
    return LlamaConfig(
        vocab_size=32_000,
        hidden_dim=4096,
        mlp_dim=14336,
        num_layers=32,
        num_heads=32,
        num_kv_heads=8,
        seq_len=4096,
        rope_theta=1_000_000.0,
        num_experts=8,
        experts_per_token=2,
        router_aux_loss_coef=0.02,
        remat="full",
    )
