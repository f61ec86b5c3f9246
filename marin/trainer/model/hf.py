"""Hugging Face checkpoints read into the trainer's format: a ``config.json`` + safetensors directory of a Llama,
Mistral, Qwen2, Qwen3, OLMo 2, Mixtral, Qwen3-MoE or OLMoE model as our ``LlamaConfig`` and parameter tree, and
the name/layout maps both ways.

    cfg, params = import_hf("path/to/Qwen3-0.6B")       # host (numpy) float32 arrays
    is_hf_directory(path)                                # what ``initialize_from`` and the engine accept too

The families are options of the one model (``LlamaConfig``): Qwen2 adds q/k/v biases, Qwen3 a per-head RMSNorm
of the queries and keys, OLMo 2 an RMSNorm of all heads' queries and keys and its norms on the sublayers'
outputs, Mistral a sliding attention window in every layer (``FAMILIES``). Sliding windows are read as each
family's transformers code applies them: Mistral's, Mixtral's and Qwen3-MoE's ``sliding_window`` in every layer
(Qwen3-MoE only under ``use_sliding_window``), Qwen2's and Qwen3's in the layers ``layer_types`` marks
``"sliding_attention"`` (or, without it, those from ``max_window_layers`` on). An HF config of another family,
or with a field that changes the math and is not implemented here (another rope scaling, a window where the
family has none, an output-projection or MLP bias, another activation), is refused naming the field, never
silently ignored.

Only numpy and the safetensors format are needed (no torch); bfloat16 checkpoints (most released models) are
read through ``ml_dtypes``, which numpy alone cannot represent, and converted to float32. Our weights are
stored ``[in, out]`` with heads as their own axes; HF stores ``nn.Linear`` weights ``[out, in]`` with heads
flattened, hence the transposes and reshapes below. Both use the same rotary layout (rotate halves, not
interleaved pairs), so q/k need no permutation. The trainer reads this (``initialize_from`` an HF
directory); writing an export (its config.json and tokenizer) is ``marin.inference.hf``'s.
"""

from __future__ import annotations

import dataclasses
import json
import struct
from typing import Any

import ml_dtypes
import numpy as np

from marin.storage import exists, join, read_bytes, read_text
from marin.trainer.model.config import Llama3RopeScaling, LlamaConfig

WEIGHTS_FILE = "model.safetensors"


def is_hf_directory(path: str) -> bool:
    """A Hugging Face checkpoint directory (``config.json`` beside safetensors), not a training run's output."""
    return exists(join(path, "config.json")) and (
        exists(join(path, WEIGHTS_FILE)) or exists(join(path, "model.safetensors.index.json"))
    )


@dataclasses.dataclass(frozen=True)
class Family:
    """An HF architecture as ``LlamaConfig`` options, and the HF names of a layer's two norms."""

    architecture: str
    qk_norm: str
    norm_placement: str
    attention_bias: bool
    attn_norm: str
    """HF name of the norm our ``attn_norm`` is (before attention, or on its output under OLMo 2)."""
    mlp_norm: str
    experts: str | None = None
    """A mixture-of-experts family's tensor names (``EXPERT_NAMES``); None for a dense one."""
    windows: str = "none"
    """Which sliding windows the family's transformers code can express: "none", "all" (one window in every
    layer: Mistral, Mixtral, Qwen3-MoE) or "layers" (any subset of layers: Qwen2, Qwen3's ``layer_types``)."""

    @property
    def options(self) -> tuple[str, str, bool, bool]:
        return (self.qk_norm, self.norm_placement, self.attention_bias, self.experts is not None)

    def expresses(self, cfg: LlamaConfig) -> bool:
        """Whether the family can say ``cfg``'s sliding windows."""
        if cfg.sliding_window is None:
            return True
        return self.windows == "layers" or (self.windows == "all" and cfg.sliding_window_layers is None)


_PRE = ("input_layernorm", "post_attention_layernorm")
FAMILIES = {
    "llama": Family("LlamaForCausalLM", "none", "pre", False, *_PRE),
    "mistral": Family("MistralForCausalLM", "none", "pre", False, *_PRE, windows="all"),
    "qwen2": Family("Qwen2ForCausalLM", "none", "pre", True, *_PRE, windows="layers"),
    "qwen3": Family("Qwen3ForCausalLM", "head", "pre", False, *_PRE, windows="layers"),
    "olmo2": Family(
        "Olmo2ForCausalLM", "full", "post", False, "post_attention_layernorm", "post_feedforward_layernorm"
    ),
    "mixtral": Family("MixtralForCausalLM", "none", "pre", False, *_PRE, experts="mixtral", windows="all"),
    "qwen3_moe": Family("Qwen3MoeForCausalLM", "head", "pre", False, *_PRE, experts="qwen", windows="all"),
    "olmoe": Family("OlmoeForCausalLM", "full", "pre", False, *_PRE, experts="qwen"),
}
"""``model_type`` -> family (a config without windows exports as the first family its options match: Llama,
not Mistral)."""

EXPERT_NAMES = {
    # (router, expert e's module prefix, gate, up, down) within ``model.layers.{i}``
    "mixtral": ("block_sparse_moe.gate", "block_sparse_moe.experts.{e}", "w1", "w3", "w2"),
    "qwen": ("mlp.gate", "mlp.experts.{e}", "gate_proj", "up_proj", "down_proj"),
}


def family_of(cfg: LlamaConfig) -> str:
    """The ``model_type`` whose architecture ``cfg``'s options are; a combination no family has is refused."""
    options = (cfg.qk_norm, cfg.norm_placement, cfg.attention_bias, cfg.is_moe)
    for name, f in FAMILIES.items():
        if f.options == options and f.expresses(cfg):
            if cfg.is_moe:
                _check_moe_exportable(cfg, name)
            return name
    windows = (
        ""
        if cfg.sliding_window is None
        else f", sliding_window={cfg.sliding_window}, sliding_window_layers={cfg.sliding_window_layers}"
    )
    raise ValueError(
        f"LlamaConfig(qk_norm={cfg.qk_norm!r}, norm_placement={cfg.norm_placement!r}, "
        f"attention_bias={cfg.attention_bias}, num_experts={cfg.num_experts}{windows}) is no Hugging Face "
        "architecture exported here: "
        + "; ".join(
            f"{n}: (qk_norm, norm_placement, attention_bias, moe) {f.options}, windows {f.windows}"
            for n, f in FAMILIES.items()
        )
    )


def _check_moe_exportable(cfg: LlamaConfig, model_type: str) -> None:
    """The router and expert options a MoE family's transformers code can express."""
    problems = []
    if cfg.shared_experts:
        problems.append(f"shared_experts={cfg.shared_experts} ({model_type} has no shared experts)")
    normalized = cfg.router_order == "topk_softmax" or cfg.normalize_topk
    if model_type == "mixtral" and not normalized:
        problems.append("normalize_topk=False (Mixtral always renormalizes the top-k weights)")
    if model_type in ("mixtral", "olmoe") and cfg.resolved_expert_mlp_dim != cfg.mlp_dim:
        problems.append(f"expert_mlp_dim={cfg.expert_mlp_dim} != mlp_dim={cfg.mlp_dim} ({model_type} has one width)")
    if problems:
        raise ValueError(f"LlamaConfig cannot be exported as {model_type}: " + "; ".join(problems))


def config_from_hf(doc: dict[str, Any], where: str = "config.json") -> LlamaConfig:
    """Our config of an HF ``config.json`` of a family in ``FAMILIES``; anything it holds that would change the
    math and is not implemented is refused, naming the field (``where`` names the file)."""
    model_type = doc.get("model_type")
    if model_type not in FAMILIES:
        raise ValueError(f"{where}: model_type {model_type!r} is not supported; supported: {sorted(FAMILIES)}")
    family = FAMILIES[model_type]
    _refuse_unimplemented(doc, model_type, where)
    rope = doc.get("rope_parameters") or {}
    if rope.get("rope_type", "default") not in ("default", "llama3"):
        raise ValueError(
            f"{where}: rope_parameters.rope_type {rope['rope_type']!r} is not implemented (only 'default' and "
            "Llama 3's 'llama3')"
        )
    theta = rope.get("rope_theta", doc.get("rope_theta", 10_000.0))
    scaling_doc = doc.get("rope_scaling") or (rope if rope.get("rope_type") == "llama3" else None)
    scaling = None
    if scaling_doc and scaling_doc.get("rope_type", scaling_doc.get("type")) == "llama3":
        scaling = Llama3RopeScaling(
            factor=scaling_doc["factor"],
            low_freq_factor=scaling_doc["low_freq_factor"],
            high_freq_factor=scaling_doc["high_freq_factor"],
            original_max_position=scaling_doc["original_max_position_embeddings"],
        )
    elif scaling_doc:
        raise ValueError(f"unsupported rope scaling {scaling_doc!r}: only Llama 3's 'llama3' type is implemented")
    return LlamaConfig(
        **_moe_fields(doc, model_type),
        **_window_fields(doc, model_type, where),
        vocab_size=doc["vocab_size"],
        hidden_dim=doc["hidden_size"],
        mlp_dim=doc["intermediate_size"],
        num_layers=doc["num_hidden_layers"],
        num_heads=doc["num_attention_heads"],
        num_kv_heads=doc.get("num_key_value_heads") or doc["num_attention_heads"],
        head_dim=_head_dim(doc),
        seq_len=doc.get("max_position_embeddings", 2048),
        rope_theta=theta,
        rope_scaling=scaling,
        norm_eps=doc.get("rms_norm_eps", 1e-5),
        tie_embeddings=doc.get("tie_word_embeddings", False),
        qk_norm=family.qk_norm,
        norm_placement=family.norm_placement,
        attention_bias=family.attention_bias,
    )


def _head_dim(doc: dict[str, Any]) -> int | None:
    """``head_dim`` when it is independent of width / heads (Qwen3), else None: the exporter writes it always,
    so an exported model read back is the config it was exported from (the same identity, hence the same
    step hashes and checkpoint checks)."""
    head_dim = doc.get("head_dim")
    width, heads = doc["hidden_size"], doc["num_attention_heads"]
    return None if head_dim is not None and head_dim * heads == width else head_dim


def num_experts_of(doc: dict[str, Any]) -> int:
    """Routed experts of an HF MoE config: ``num_local_experts`` (Mixtral; transformers 5 for all) or
    ``num_experts`` (released Qwen3-MoE and OLMoE configs)."""
    return doc.get("num_local_experts") or doc.get("num_experts") or 0


def _moe_fields(doc: dict[str, Any], model_type: str) -> dict[str, Any]:
    if FAMILIES[model_type].experts is None:
        return {}
    fields = dict(
        num_experts=num_experts_of(doc),
        experts_per_token=doc.get("num_experts_per_tok", 2),
        router_aux_loss_coef=doc.get("router_aux_loss_coef", 0.001),
        # Mixtral renormalizes the top-k always; Qwen3-MoE and OLMoE by ``norm_topk_prob`` (false by default)
        normalize_topk=True if model_type == "mixtral" else bool(doc.get("norm_topk_prob", False)),
    )
    if model_type == "qwen3_moe":
        fields["expert_mlp_dim"] = doc["moe_intermediate_size"]
    return fields


_DEFAULT_WINDOWS = {"mistral": 4096}
"""A ``sliding_window`` transformers assumes when config.json has none (MistralConfig's default; the others'
is None or needs ``use_sliding_window``)."""


def _window_fields(doc: dict[str, Any], model_type: str, where: str) -> dict[str, Any]:
    """``sliding_window`` and ``sliding_window_layers`` as the family's transformers code applies them."""
    kind = FAMILIES[model_type].windows
    if kind == "none":
        return {}  # a window in such a config was refused by _refuse_unimplemented
    window = doc.get("sliding_window", _DEFAULT_WINDOWS.get(model_type))
    if model_type in ("qwen2", "qwen3", "qwen3_moe") and not doc.get("use_sliding_window"):
        window = None  # Qwen's configs drop the window unless use_sliding_window
    if window is None:
        return {}
    if kind == "all":
        return {"sliding_window": window}
    n = doc["num_hidden_layers"]
    types = doc.get("layer_types")
    if types is None:  # what Qwen2Config/Qwen3Config derive when layer_types is absent
        types = ["sliding_attention" if i >= doc.get("max_window_layers", 28) else "full_attention" for i in range(n)]
    if len(types) != n:
        raise ValueError(f"{where}: layer_types has {len(types)} entries for {n} layers")
    layers = tuple(i for i, t in enumerate(types) if t == "sliding_attention")
    if not layers:
        return {}
    return {"sliding_window": window, "sliding_window_layers": None if len(layers) == n else layers}


def _refuse_unimplemented(doc: dict[str, Any], model_type: str, where: str) -> None:
    """Fields of an HF config that change the math beyond what this model implements: refused by name."""
    problems = []
    if doc.get("hidden_act", "silu") != "silu":
        problems.append(f"hidden_act {doc['hidden_act']!r} (only 'silu': SwiGLU)")
    if doc.get("mlp_bias"):
        problems.append("mlp_bias true (MLP biases are not implemented)")
    if model_type != "qwen2" and doc.get("attention_bias"):
        problems.append("attention_bias true (biases on q/k/v *and* the output projection are not implemented)")
    kinds = ("full_attention", "sliding_attention") if FAMILIES[model_type].windows == "layers" else ("full_attention",)
    unknown = sorted({t for t in doc.get("layer_types") or () if t not in kinds})
    if unknown:
        problems.append(f"layer_types {unknown} (only {' and '.join(kinds)} layers are implemented for {model_type})")
    if FAMILIES[model_type].windows == "none" and (doc.get("sliding_window") or doc.get("use_sliding_window")):
        problems.append(
            f"sliding_window {doc.get('sliding_window')!r} / use_sliding_window {doc.get('use_sliding_window')!r} "
            f"({model_type}'s transformers code has no sliding window)"
        )
    if doc.get("attention_dropout"):
        problems.append(f"attention_dropout {doc['attention_dropout']!r} (dropout is not implemented)")
    if FAMILIES[model_type].experts is not None:
        problems.extend(_unimplemented_moe(doc))
    if problems:
        raise ValueError(
            f"{where} ({model_type}): not implemented, refusing rather than ignoring: " + "; ".join(problems)
        )


def _unimplemented_moe(doc: dict[str, Any]) -> list[str]:
    problems = []
    if doc.get("router_jitter_noise"):
        problems.append(f"router_jitter_noise {doc['router_jitter_noise']!r} (router noise is not implemented)")
    if doc.get("decoder_sparse_step", 1) != 1 or doc.get("mlp_only_layers"):
        problems.append(
            f"decoder_sparse_step {doc.get('decoder_sparse_step')!r} / mlp_only_layers {doc.get('mlp_only_layers')!r} "
            "(dense layers among the MoE ones are not implemented: every layer is MoE)"
        )
    if doc.get("clip_qkv") is not None:
        problems.append(f"clip_qkv {doc['clip_qkv']!r} (clipping q/k/v is not implemented)")
    if doc.get("shared_expert_intermediate_size") or doc.get("n_shared_experts"):
        problems.append("shared experts in an HF config (not implemented for these families)")
    if not num_experts_of(doc):
        problems.append("no num_local_experts / num_experts")
    return problems


def to_hf_tensors(cfg: LlamaConfig, params: dict[str, Any]) -> dict[str, np.ndarray]:
    """Our parameter tree as HF-named float32 tensors."""
    p = {k: np.asarray(v, dtype=np.float32) for k, v in _flat(params).items()}
    d, h, kv, hd = cfg.hidden_dim, cfg.num_heads, cfg.num_kv_heads, cfg.resolved_head_dim
    family = FAMILIES[family_of(cfg)]
    out = {"model.embed_tokens.weight": p["embed"], "model.norm.weight": p["final_norm"]}
    for i in range(cfg.num_layers):
        pre = f"model.layers.{i}"
        out[f"{pre}.{family.attn_norm}.weight"] = p["layers.attn_norm"][i]
        out[f"{pre}.{family.mlp_norm}.weight"] = p["layers.mlp_norm"][i]
        if cfg.attention_bias:
            for name in ("q", "k", "v"):
                out[f"{pre}.self_attn.{name}_proj.bias"] = p[f"layers.b{name}"][i].reshape(-1)
        if cfg.qk_norm != "none":  # [head_dim] per head (Qwen3) or [heads * head_dim] (OLMo 2)
            out[f"{pre}.self_attn.q_norm.weight"] = p["layers.q_norm"][i].reshape(-1)
            out[f"{pre}.self_attn.k_norm.weight"] = p["layers.k_norm"][i].reshape(-1)
        out[f"{pre}.self_attn.q_proj.weight"] = p["layers.wq"][i].reshape(d, h * hd).T
        out[f"{pre}.self_attn.k_proj.weight"] = p["layers.wk"][i].reshape(d, kv * hd).T
        out[f"{pre}.self_attn.v_proj.weight"] = p["layers.wv"][i].reshape(d, kv * hd).T
        out[f"{pre}.self_attn.o_proj.weight"] = p["layers.wo"][i].reshape(h * hd, d).T
        if family.experts is None:
            out[f"{pre}.mlp.gate_proj.weight"] = p["layers.w_gate"][i].T
            out[f"{pre}.mlp.up_proj.weight"] = p["layers.w_up"][i].T
            out[f"{pre}.mlp.down_proj.weight"] = p["layers.w_down"][i].T
            continue
        router, expert, gate, up, down = EXPERT_NAMES[family.experts]
        out[f"{pre}.{router}.weight"] = p["layers.router"][i].T  # [experts, embed]
        for e in range(cfg.num_experts):
            name = f"{pre}.{expert.format(e=e)}"
            out[f"{name}.{gate}.weight"] = p["layers.w_gate"][i, e].T
            out[f"{name}.{up}.weight"] = p["layers.w_up"][i, e].T
            out[f"{name}.{down}.weight"] = p["layers.w_down"][i, e].T
    if not cfg.tie_embeddings:
        out["lm_head.weight"] = p["lm_head"].T
    return {k: np.ascontiguousarray(v) for k, v in out.items()}


def from_hf_tensors(cfg: LlamaConfig, t: dict[str, np.ndarray]) -> dict[str, Any]:
    """HF-named tensors back to our parameter tree (float32 numpy arrays)."""
    d, h, kv, hd = cfg.hidden_dim, cfg.num_heads, cfg.num_kv_heads, cfg.resolved_head_dim
    family = FAMILIES[family_of(cfg)]
    _check_tensors(cfg, t)

    def stack(name, fn):
        return np.stack([fn(t[f"model.layers.{i}.{name}"].astype(np.float32)) for i in range(cfg.num_layers)])

    def stack_experts(name):  # [layers, experts, in, out] of HF's per-expert [out, in]
        return np.stack([stack(f"{name.format(e=e)}.weight", lambda w: w.T) for e in range(cfg.num_experts)], axis=1)

    params: dict[str, Any] = {
        "embed": t["model.embed_tokens.weight"].astype(np.float32),
        "final_norm": t["model.norm.weight"].astype(np.float32),
        "layers": {
            "attn_norm": stack(f"{family.attn_norm}.weight", lambda w: w),
            "mlp_norm": stack(f"{family.mlp_norm}.weight", lambda w: w),
            "wq": stack("self_attn.q_proj.weight", lambda w: w.T.reshape(d, h, hd)),
            "wk": stack("self_attn.k_proj.weight", lambda w: w.T.reshape(d, kv, hd)),
            "wv": stack("self_attn.v_proj.weight", lambda w: w.T.reshape(d, kv, hd)),
            "wo": stack("self_attn.o_proj.weight", lambda w: w.T.reshape(h, hd, d)),
        },
    }
    layers = params["layers"]
    if family.experts is None:
        for ours, theirs in (("w_gate", "gate_proj"), ("w_up", "up_proj"), ("w_down", "down_proj")):
            layers[ours] = stack(f"mlp.{theirs}.weight", lambda w: w.T)
    else:
        router, expert, gate, up, down = EXPERT_NAMES[family.experts]
        layers["router"] = stack(f"{router}.weight", lambda w: w.T)
        for ours, theirs in (("w_gate", gate), ("w_up", up), ("w_down", down)):
            layers[ours] = stack_experts(f"{expert}.{theirs}")
    if cfg.attention_bias:
        layers["bq"] = stack("self_attn.q_proj.bias", lambda b: b.reshape(h, hd))
        layers["bk"] = stack("self_attn.k_proj.bias", lambda b: b.reshape(kv, hd))
        layers["bv"] = stack("self_attn.v_proj.bias", lambda b: b.reshape(kv, hd))
    if cfg.qk_norm == "head":
        layers["q_norm"] = stack("self_attn.q_norm.weight", lambda w: w)
        layers["k_norm"] = stack("self_attn.k_norm.weight", lambda w: w)
    elif cfg.qk_norm == "full":
        layers["q_norm"] = stack("self_attn.q_norm.weight", lambda w: w.reshape(h, hd))
        layers["k_norm"] = stack("self_attn.k_norm.weight", lambda w: w.reshape(kv, hd))
    if not cfg.tie_embeddings:
        params["lm_head"] = t["lm_head.weight"].astype(np.float32).T
    return params


def _check_tensors(cfg: LlamaConfig, t: dict[str, np.ndarray]) -> None:
    """Every tensor the config implies is present with the shape it implies (the first mismatch named with both
    shapes), and nothing is left over that the model would silently drop (an unexpected bias, say)."""
    expected = {k: v.shape for k, v in to_hf_tensors(cfg, _shapes_only(cfg)).items()}
    for name, shape in expected.items():
        if name not in t:
            raise ValueError(f"checkpoint has no tensor {name!r} (shape {tuple(shape)}), which its config implies")
        if tuple(t[name].shape) != tuple(shape):
            raise ValueError(
                f"checkpoint tensor {name!r} has shape {tuple(t[name].shape)}, its config implies {tuple(shape)}"
            )
    if cfg.tie_embeddings and "lm_head.weight" in t:  # some tied checkpoints store the head anyway
        if not np.array_equal(t["lm_head.weight"], t["model.embed_tokens.weight"]):
            raise ValueError("config.json ties the embeddings (tie_word_embeddings) but lm_head.weight differs")
        expected = {**expected, "lm_head.weight": t["lm_head.weight"].shape}
    extra = sorted(k for k in t if k not in expected and not k.endswith("rotary_emb.inv_freq"))
    if extra:
        raise ValueError(f"checkpoint tensors its config does not use (refusing to drop them): {extra[:5]}")


def _shapes_only(cfg: LlamaConfig) -> dict[str, Any]:
    """Zero-strided placeholder arrays of every parameter's shape (what ``to_hf_tensors`` needs to name them)."""
    from marin.trainer.model.llama import param_specs  # noqa: PLC0415 (llama imports nothing of this module)

    def placeholder(spec):
        return np.lib.stride_tricks.as_strided(np.zeros((), np.float32), spec.shape, (0,) * len(spec.shape))

    return _tree_map_specs(param_specs(cfg), placeholder)


def _tree_map_specs(tree: dict[str, Any], fn) -> dict[str, Any]:
    return {k: _tree_map_specs(v, fn) if isinstance(v, dict) else fn(v) for k, v in tree.items()}


def import_hf(path: str) -> tuple[LlamaConfig, dict[str, Any]]:
    """Load a HF directory of any family in ``FAMILIES`` (Llama, Mistral, Qwen2, Qwen3, OLMo 2, Mixtral,
    Qwen3-MoE, OLMoE; a single ``model.safetensors`` or shards with an index) into our format."""
    doc = json.loads(read_text(join(path, "config.json")))
    cfg = config_from_hf(doc, where=f"{path}/config.json")
    index_url = join(path, "model.safetensors.index.json")
    files = (
        sorted(set(json.loads(read_text(index_url))["weight_map"].values())) if exists(index_url) else [WEIGHTS_FILE]
    )
    tensors: dict[str, np.ndarray] = {}
    for name in files:
        tensors.update(load_safetensors(read_bytes(join(path, name))))
    return cfg, from_hf_tensors(cfg, tensors)


def check_same_model(path: str, found: LlamaConfig, model: LlamaConfig) -> None:
    """A run that starts from the checkpoint at ``path`` (whose config is ``found``) must declare its architecture
    as ``model``: every field that defines the result, but the context length, the same (named if not)."""
    from marin.identity import result_fields  # noqa: PLC0415 (identity imports nothing of the lab)

    def fields(cfg: LlamaConfig) -> dict[str, Any]:
        values = {f.name: getattr(cfg, f.name) for f in result_fields(cfg)}
        return {**values, "head_dim": cfg.resolved_head_dim, "seq_len": None, "initializer_range": None}

    ours, theirs = fields(model), fields(found)
    differ = [f"{k}: {theirs[k]!r} there, {ours[k]!r} here" for k in ours if ours[k] != theirs[k]]
    if differ:
        raise ValueError(f"{path}: the checkpoint's model differs from the run's LlamaConfig: " + "; ".join(differ))


_SAFETENSORS_DTYPES = {
    "F64": np.float64,
    "F32": np.float32,
    "F16": np.float16,
    "BF16": ml_dtypes.bfloat16,
    "I64": np.int64,
    "I32": np.int32,
    "I16": np.int16,
    "I8": np.int8,
    "U8": np.uint8,
    "BOOL": np.bool_,
}


def load_safetensors(data: bytes) -> dict[str, np.ndarray]:
    """Tensors of a ``.safetensors`` file. ``safetensors.numpy.load`` rejects bfloat16 (numpy has no such
    dtype), so the format is read directly: an 8-byte little-endian header length, a JSON header of
    ``{name: {dtype, shape, data_offsets}}``, then the raw little-endian bytes."""
    (header_len,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + header_len])
    header.pop("__metadata__", None)
    body = memoryview(data)[8 + header_len :]
    tensors = {}
    for name, info in header.items():
        if info["dtype"] not in _SAFETENSORS_DTYPES:
            raise ValueError(f"tensor {name}: unsupported safetensors dtype {info['dtype']}")
        start, end = info["data_offsets"]
        dtype = np.dtype(_SAFETENSORS_DTYPES[info["dtype"]]).newbyteorder("<")
        tensors[name] = np.frombuffer(body[start:end], dtype=dtype).reshape(info["shape"])
    return tensors


def _flat(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in tree.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flat(v, key + "."))
        else:
            out[key] = v
    return out
