"""Hugging Face format: our Llama parameters to a ``LlamaForCausalLM`` directory, and back.

    export_hf(cfg, params, "gs://b/export/tiny", tokenizer="local_store/tokenizers/x")
    cfg, params = import_hf("path/to/Llama-3.2-1B")

Only numpy and ``safetensors`` are needed (no torch); bfloat16 checkpoints (most released Llamas) are read
through ``ml_dtypes``, which numpy alone cannot represent, and converted to float32. Our weights are stored
``[in, out]`` with heads as their own axes; HF stores ``nn.Linear`` weights ``[out, in]`` with heads
flattened, hence the transposes and reshapes below. Both use the same rotary layout (rotate halves, not
interleaved pairs), so q/k need no permutation. ``config.json`` carries both the transformers v5
``rope_parameters`` and the v4 ``rope_theta``/``rope_scaling`` keys, so either major version loads it.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import ml_dtypes
import numpy as np

from marin.storage import exists, join, read_bytes, read_text, write_atomic
from marin.trainer.model.config import Llama3RopeScaling, LlamaConfig

WEIGHTS_FILE = "model.safetensors"


def hf_config(cfg: LlamaConfig, *, bos_token_id: int | None, eos_token_id: int | None) -> dict[str, Any]:
    rope: dict[str, Any] = {"rope_type": "default", "rope_theta": cfg.rope_theta}
    legacy_scaling = None
    if cfg.rope_scaling is not None:
        s = cfg.rope_scaling
        legacy_scaling = {
            "rope_type": "llama3",
            "factor": s.factor,
            "low_freq_factor": s.low_freq_factor,
            "high_freq_factor": s.high_freq_factor,
            "original_max_position_embeddings": s.original_max_position,
        }
        rope.update(legacy_scaling)
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_dim,
        "intermediate_size": cfg.mlp_dim,
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads,
        "num_key_value_heads": cfg.num_kv_heads,
        "head_dim": cfg.resolved_head_dim,
        "max_position_embeddings": cfg.seq_len,
        "rms_norm_eps": cfg.norm_eps,
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": cfg.tie_embeddings,
        "rope_parameters": rope,
        "rope_theta": cfg.rope_theta,
        "rope_scaling": legacy_scaling,
        "bos_token_id": bos_token_id,
        "eos_token_id": eos_token_id,
        "initializer_range": cfg.initializer_range,
        "torch_dtype": "float32",
    }


def config_from_hf(doc: dict[str, Any]) -> LlamaConfig:
    rope = doc.get("rope_parameters") or {}
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
        vocab_size=doc["vocab_size"],
        hidden_dim=doc["hidden_size"],
        mlp_dim=doc["intermediate_size"],
        num_layers=doc["num_hidden_layers"],
        num_heads=doc["num_attention_heads"],
        num_kv_heads=doc.get("num_key_value_heads") or doc["num_attention_heads"],
        head_dim=doc.get("head_dim"),
        seq_len=doc.get("max_position_embeddings", 2048),
        rope_theta=theta,
        rope_scaling=scaling,
        norm_eps=doc.get("rms_norm_eps", 1e-5),
        tie_embeddings=doc.get("tie_word_embeddings", False),
    )


def to_hf_tensors(cfg: LlamaConfig, params: dict[str, Any]) -> dict[str, np.ndarray]:
    """Our parameter tree as HF-named float32 tensors."""
    p = {k: np.asarray(v, dtype=np.float32) for k, v in _flat(params).items()}
    d, h, kv, hd = cfg.hidden_dim, cfg.num_heads, cfg.num_kv_heads, cfg.resolved_head_dim
    out = {"model.embed_tokens.weight": p["embed"], "model.norm.weight": p["final_norm"]}
    for i in range(cfg.num_layers):
        pre = f"model.layers.{i}"
        out[f"{pre}.input_layernorm.weight"] = p["layers.attn_norm"][i]
        out[f"{pre}.post_attention_layernorm.weight"] = p["layers.mlp_norm"][i]
        out[f"{pre}.self_attn.q_proj.weight"] = p["layers.wq"][i].reshape(d, h * hd).T
        out[f"{pre}.self_attn.k_proj.weight"] = p["layers.wk"][i].reshape(d, kv * hd).T
        out[f"{pre}.self_attn.v_proj.weight"] = p["layers.wv"][i].reshape(d, kv * hd).T
        out[f"{pre}.self_attn.o_proj.weight"] = p["layers.wo"][i].reshape(h * hd, d).T
        out[f"{pre}.mlp.gate_proj.weight"] = p["layers.w_gate"][i].T
        out[f"{pre}.mlp.up_proj.weight"] = p["layers.w_up"][i].T
        out[f"{pre}.mlp.down_proj.weight"] = p["layers.w_down"][i].T
    if not cfg.tie_embeddings:
        out["lm_head.weight"] = p["lm_head"].T
    return {k: np.ascontiguousarray(v) for k, v in out.items()}


def from_hf_tensors(cfg: LlamaConfig, t: dict[str, np.ndarray]) -> dict[str, Any]:
    """HF-named tensors back to our parameter tree (float32 numpy arrays)."""
    d, h, kv, hd = cfg.hidden_dim, cfg.num_heads, cfg.num_kv_heads, cfg.resolved_head_dim

    def stack(name, fn):
        return np.stack([fn(t[f"model.layers.{i}.{name}"].astype(np.float32)) for i in range(cfg.num_layers)])

    params: dict[str, Any] = {
        "embed": t["model.embed_tokens.weight"].astype(np.float32),
        "final_norm": t["model.norm.weight"].astype(np.float32),
        "layers": {
            "attn_norm": stack("input_layernorm.weight", lambda w: w),
            "mlp_norm": stack("post_attention_layernorm.weight", lambda w: w),
            "wq": stack("self_attn.q_proj.weight", lambda w: w.T.reshape(d, h, hd)),
            "wk": stack("self_attn.k_proj.weight", lambda w: w.T.reshape(d, kv, hd)),
            "wv": stack("self_attn.v_proj.weight", lambda w: w.T.reshape(d, kv, hd)),
            "wo": stack("self_attn.o_proj.weight", lambda w: w.T.reshape(h, hd, d)),
            "w_gate": stack("mlp.gate_proj.weight", lambda w: w.T),
            "w_up": stack("mlp.up_proj.weight", lambda w: w.T),
            "w_down": stack("mlp.down_proj.weight", lambda w: w.T),
        },
    }
    if not cfg.tie_embeddings:
        params["lm_head"] = t["lm_head.weight"].astype(np.float32).T
    return params


def export_hf(cfg: LlamaConfig, params: dict[str, Any], output_path: str, *, tokenizer: str | None = None) -> None:
    """Write ``config.json``, ``model.safetensors`` and (if given) the tokenizer files to ``output_path``."""
    from safetensors.numpy import save

    bos = eos = None
    if tokenizer is not None:
        bos, eos = write_hf_tokenizer(tokenizer, output_path, cfg.seq_len)
    write_atomic(join(output_path, WEIGHTS_FILE), save(to_hf_tensors(cfg, params), metadata={"format": "pt"}))
    # config.json last: its presence marks a complete export.
    write_atomic(
        join(output_path, "config.json"), json.dumps(hf_config(cfg, bos_token_id=bos, eos_token_id=eos), indent=2)
    )


def write_hf_tokenizer(tokenizer: str, output_path: str, seq_len: int) -> tuple[int, int]:
    """The tokenizer files of an export; returns (bos, eos) ids. A chat tokenizer directory (marin.chat)
    keeps its chat template, begin-of-text and end-of-turn tokens, so ``apply_chat_template`` and generation
    stopping at the end of a turn work in ``transformers``; any other tokenizer's documents start after
    its EOS, which the exported tokenizer adds as its BOS (``document_start_tokenizer``)."""
    from marin.chat.template import ChatTokenizer
    from marin.tokenize import eos_id, load_tokenizer

    config_url = join(tokenizer, "tokenizer_config.json")
    if exists(config_url) and json.loads(read_text(config_url)).get("chat_template"):
        chat = ChatTokenizer.load(tokenizer)
        chat.save(output_path, model_max_length=seq_len)
        return chat.bos_id, chat.eot_id
    tok = document_start_tokenizer(load_tokenizer(tokenizer))
    eos = eos_id(tok)
    write_atomic(join(output_path, "tokenizer.json"), tok.to_str())
    eos_token = tok.id_to_token(eos)
    write_atomic(
        join(output_path, "tokenizer_config.json"),
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": eos_token,
                "eos_token": eos_token,
                "model_max_length": seq_len,
            },
            indent=2,
        ),
    )
    write_atomic(
        join(output_path, "special_tokens_map.json"),
        json.dumps({"bos_token": eos_token, "eos_token": eos_token}, indent=2),
    )
    return eos, eos


def document_start_tokenizer(tok):
    """``tok`` with a post-processor that puts its EOS before every encoded text (``add_special_tokens``,
    transformers' default), as Llama 3's tokenizer puts ``<|begin_of_text|>``: a training document always
    follows an EOS, so ``AutoTokenizer(...)(text)`` — and lm-eval's ``hf`` model with its defaults — conditions
    the model on the context it was trained with. Encoding with ``add_special_tokens=False`` (what the lab's
    own code does) is unchanged. A tokenizer whose post-processor already adds a BOS is returned as is."""
    from tokenizers import Tokenizer, processors

    from marin.tokenize import eos_id

    tok = Tokenizer.from_str(tok.to_str())
    if len(tok.encode("a", add_special_tokens=True).ids) > len(tok.encode("a", add_special_tokens=False).ids):
        return tok
    eos = eos_id(tok)
    name = tok.id_to_token(eos)
    template = processors.TemplateProcessing(single=f"{name} $A", pair=f"{name} $A $B:1", special_tokens=[(name, eos)])
    current = tok.post_processor
    tok.post_processor = template if current is None else processors.Sequence([current, template])
    return tok


def import_hf(path: str) -> tuple[LlamaConfig, dict[str, Any]]:
    """Load a HF Llama directory (single ``model.safetensors`` or sharded with an index) into our format."""
    doc = json.loads(read_text(join(path, "config.json")))
    if doc.get("model_type") != "llama":
        raise ValueError(f"{path}/config.json: model_type {doc.get('model_type')!r}, expected 'llama'")
    cfg = config_from_hf(doc)
    index_url = join(path, "model.safetensors.index.json")
    files = (
        sorted(set(json.loads(read_text(index_url))["weight_map"].values())) if exists(index_url) else [WEIGHTS_FILE]
    )
    tensors: dict[str, np.ndarray] = {}
    for name in files:
        tensors.update(load_safetensors(read_bytes(join(path, name))))
    return cfg, from_hf_tensors(cfg, tensors)


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
