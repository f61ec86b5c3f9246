"""Hugging Face format: our parameters to a ``LlamaForCausalLM`` (or Mistral, Qwen2, Qwen3, OLMo 2, Mixtral,
Qwen3-MoE, OLMoE) directory, and back.

    export_hf(cfg, params, "gs://b/export/tiny", tokenizer="local_store/tokenizers/x")
    cfg, params = import_hf("path/to/Llama-3.2-1B")     # or any family in FAMILIES: Mistral, Qwen2, Qwen3,
                                                        # OLMo 2, Mixtral, Qwen3-MoE, OLMoE

Reading a checkpoint and the name/layout maps live with the model (``marin.trainer.model.hf``: the trainer
starts from HF directories too); this module writes exports: the weights, a ``config.json`` for the family the
options make (a combination no family has is refused), and the tokenizer files. ``config.json`` carries both
the transformers v5 ``rope_parameters`` and the v4 ``rope_theta``/``rope_scaling`` keys, so either major
version loads it.
"""

from __future__ import annotations

import json
from typing import Any

from marin.storage import exists, join, read_bytes, read_text, write_atomic
from marin.trainer.model.config import LlamaConfig
from marin.trainer.model.hf import (
    FAMILIES,
    WEIGHTS_FILE,
    config_from_hf,
    family_of,
    from_hf_tensors,
    import_hf,
    is_hf_directory,
    load_safetensors,
    to_hf_tensors,
)

__all__ = [
    "FAMILIES",
    "config_from_hf",
    "document_start_tokenizer",
    "export_hf",
    "family_of",
    "from_hf_tensors",
    "hf_config",
    "import_hf",
    "is_hf_directory",
    "load_safetensors",
    "to_hf_tensors",
    "write_hf_tokenizer",
]


def hf_config(cfg: LlamaConfig, *, bos_token_id: int | None, eos_token_id: int | None) -> dict[str, Any]:
    model_type = family_of(cfg)
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
    extra: dict[str, Any] = {} if model_type == "qwen2" else {"attention_bias": False}  # Qwen2's biases are fixed
    extra.update(_window_config(cfg, model_type))
    if cfg.is_moe:
        extra.update(_moe_config(cfg, model_type))
    return {
        **extra,
        "architectures": [FAMILIES[model_type].architecture],
        "model_type": model_type,
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
        "mlp_bias": False,
        "tie_word_embeddings": cfg.tie_embeddings,
        "rope_parameters": rope,
        "rope_theta": cfg.rope_theta,
        "rope_scaling": legacy_scaling,
        "bos_token_id": bos_token_id,
        "eos_token_id": eos_token_id,
        "initializer_range": cfg.initializer_range,
        "torch_dtype": "float32",  # transformers 4's name; 5 reads dtype
        "dtype": "float32",
    }


def _window_config(cfg: LlamaConfig, model_type: str) -> dict[str, Any]:
    """The family's sliding-window fields (``family_of`` chose a family that can express ``cfg``'s windows)."""
    window = cfg.sliding_window
    if model_type in ("mistral", "mixtral"):
        return {"sliding_window": window}
    if model_type == "qwen3_moe":
        return {"use_sliding_window": window is not None, "sliding_window": window}
    if model_type in ("qwen2", "qwen3"):
        types = ["sliding_attention" if w is not None else "full_attention" for w in cfg.layer_windows]
        # transformers 4 reads max_window_layers (windows from that layer on), 5 reads layer_types
        first = types.index("sliding_attention") if window is not None else cfg.num_layers
        return {
            "use_sliding_window": window is not None,
            "sliding_window": window,
            "max_window_layers": first,
            "layer_types": types,
        }
    return {}


def _moe_config(cfg: LlamaConfig, model_type: str) -> dict[str, Any]:
    """A MoE family's router and expert fields (both names of the expert count: released configs use
    ``num_experts`` for Qwen3-MoE and OLMoE, transformers 5 writes ``num_local_experts``)."""
    fields: dict[str, Any] = {
        "num_local_experts": cfg.num_experts,
        "num_experts_per_tok": cfg.experts_per_token,
        "router_aux_loss_coef": cfg.router_aux_loss_coef,
        "output_router_logits": False,
    }
    if model_type == "mixtral":
        return {**fields, "router_jitter_noise": 0.0}
    fields.update(num_experts=cfg.num_experts, norm_topk_prob=cfg.normalize_topk or cfg.router_order == "topk_softmax")
    if model_type == "qwen3_moe":
        fields.update(moe_intermediate_size=cfg.resolved_expert_mlp_dim, decoder_sparse_step=1, mlp_only_layers=[])
    return fields


# Written by ``hf_config`` but not read back by ``config_from_hf``: an exported HF directory keeps its own value.
NOT_READ_BACK = ("initializer_range",)
SPECIAL_TOKEN_IDS = ("bos_token_id", "eos_token_id", "pad_token_id")
# An HF directory's tokenizer and generation files, copied unchanged by an export of it without a tokenizer.
SOURCE_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "chat_template.jinja",
    "generation_config.json",
)


def export_hf(
    cfg: LlamaConfig,
    params: dict[str, Any],
    output_path: str,
    *,
    tokenizer: str | None = None,
    source: str | None = None,
) -> None:
    """Write ``config.json``, ``model.safetensors`` and (if given) the tokenizer files to ``output_path``.

    ``source``: the HF directory ``cfg`` and ``params`` were imported from. The fields of its ``config.json``
    that the round trip does not read (``NOT_READ_BACK``, ``use_cache``, a field only its authors' code reads;
    without ``tokenizer`` its special token ids too) are kept as they were, and without ``tokenizer`` its
    tokenizer and generation files (``SOURCE_FILES``) are copied unchanged."""
    from safetensors.numpy import save

    bos = eos = None
    if tokenizer is not None:
        bos, eos = write_hf_tokenizer(tokenizer, output_path, cfg.seq_len)
    elif source is not None:
        for name in SOURCE_FILES:
            if exists(join(source, name)):
                write_atomic(join(output_path, name), read_bytes(join(source, name)))
    write_atomic(join(output_path, WEIGHTS_FILE), save(to_hf_tensors(cfg, params), metadata={"format": "pt"}))
    doc = hf_config(cfg, bos_token_id=bos, eos_token_id=eos)
    if source is not None:
        doc = _keep_unread_fields(doc, json.loads(read_text(join(source, "config.json"))), tokenizer is None)
    # config.json last: its presence marks a complete export.
    write_atomic(join(output_path, "config.json"), json.dumps(doc, indent=2))


def _keep_unread_fields(written: dict[str, Any], source: dict[str, Any], own_tokens: bool) -> dict[str, Any]:
    """``written`` with the fields of ``source`` that it does not define, or defines without reading them back."""
    kept = set(source) - set(written) | set(NOT_READ_BACK) | (set(SPECIAL_TOKEN_IDS) if own_tokens else set())
    return {**written, **{k: source[k] for k in source if k in kept}}


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
