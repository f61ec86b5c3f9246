"""Export to Hugging Face format and load it with transformers (CPU torch): same logits as our model."""

import dataclasses

import jax
import numpy as np
import pytest

from marin.inference import export_hf, import_hf
from marin.trainer.model.config import Llama3RopeScaling, model_preset
from marin.trainer.model.llama import forward, init_params
from tests.requirements import require_module

torch = require_module("torch", "CPU torch (the export-test extra, installed by make test)")
transformers = require_module("transformers", "transformers (the export-test extra)")

CONFIGS = {
    "untied": dataclasses.replace(model_preset("nano"), vocab_size=512, num_layers=2, num_kv_heads=2, seq_len=64),
    "tied_rope_scaled": dataclasses.replace(
        model_preset("nano"),
        vocab_size=384,
        num_layers=2,
        num_kv_heads=1,
        tie_embeddings=True,
        seq_len=64,
        rope_scaling=Llama3RopeScaling(factor=8.0, original_max_position=16),
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_transformers_logits_match_ours(tmp_path, name):
    cfg = CONFIGS[name]
    params = init_params(cfg, jax.random.PRNGKey(0))
    # Norm weights perturbed away from 1 so that a swapped or misplaced norm would show. Logits come out
    # O(1), so any wrong transpose/reshape/rotary layout gives errors of O(1), far above the 1e-4 bound.
    params = jax.tree.map(
        lambda p: p if p.ndim > 1 else p + 0.1 * jax.random.normal(jax.random.PRNGKey(1), p.shape), params
    )
    export_hf(cfg, params, str(tmp_path / "hf"))
    model = transformers.LlamaForCausalLM.from_pretrained(str(tmp_path / "hf"), torch_dtype=torch.float32)
    model.eval()
    tokens = np.random.default_rng(0).integers(0, cfg.vocab_size, size=(2, 48))
    ours = np.asarray(forward(cfg, params, tokens))
    with torch.no_grad():
        theirs = model(torch.tensor(tokens)).logits.numpy()
    assert np.max(np.abs(ours)) > 0.5
    assert np.max(np.abs(ours - theirs)) <= 1e-4


def test_import_round_trip(tmp_path):
    cfg = CONFIGS["untied"]
    params = init_params(cfg, jax.random.PRNGKey(2))
    export_hf(cfg, params, str(tmp_path / "hf"))
    cfg2, params2 = import_hf(str(tmp_path / "hf"))
    assert dataclasses.replace(cfg2, seq_len=cfg.seq_len) == cfg  # head_dim = width / heads is read as the default
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), b), params, params2)
    tokens = np.arange(20)[None, :] % cfg.vocab_size
    np.testing.assert_allclose(forward(cfg, params, tokens), forward(cfg2, params2, tokens), atol=1e-6)


# Directories written by transformers itself (`save_pretrained`, safetensors), not by our exporter: the
# import must read whatever config keys and tensor names/dtypes transformers writes today.
SAVED_BY_TRANSFORMERS = {
    "untied_gqa_fp32": ({"num_key_value_heads": 2, "tie_word_embeddings": False}, "float32"),
    "tied_llama3_rope_fp32": (
        {
            "num_key_value_heads": 1,
            "tie_word_embeddings": True,
            "rope_parameters": {
                "rope_type": "llama3",
                "rope_theta": 50_000.0,
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 16,
            },
        },
        "float32",
    ),
    # released Llama checkpoints are bfloat16, which numpy alone cannot read
    "untied_bf16": ({"num_key_value_heads": 2, "tie_word_embeddings": False}, "bfloat16"),
}


@pytest.mark.parametrize("name", sorted(SAVED_BY_TRANSFORMERS))
def test_import_of_a_transformers_save_pretrained_directory(tmp_path, name):
    overrides, dtype = SAVED_BY_TRANSFORMERS[name]
    hf_cfg = transformers.LlamaConfig(
        vocab_size=160,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=64,
        rms_norm_eps=1e-5,
        initializer_range=0.3,
        **overrides,
    )  # wide init: logits O(1)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(hf_cfg).eval()
    with torch.no_grad():  # norms away from 1, so a swapped or skipped norm shows
        for module_name, p in model.named_parameters():
            if "norm" in module_name:
                p.add_(0.1 * torch.randn_like(p))
    model.to(getattr(torch, dtype)).save_pretrained(str(tmp_path / "hf"))
    assert (tmp_path / "hf" / "model.safetensors").exists()

    cfg, params = import_hf(str(tmp_path / "hf"))
    assert (cfg.num_kv_heads, cfg.tie_embeddings, cfg.vocab_size) == (
        overrides["num_key_value_heads"],
        overrides["tie_word_embeddings"],
        160,
    )
    assert (cfg.rope_scaling is not None) == ("rope_parameters" in overrides)
    # The reference: transformers loading the same directory, computing in fp32 from the same (possibly
    # bf16-rounded) weights. (Not `model.to(float32)`: that would keep rotary frequencies rounded to bf16.)
    model = transformers.LlamaForCausalLM.from_pretrained(str(tmp_path / "hf"), dtype=torch.float32).eval()
    tokens = np.random.default_rng(1).integers(0, 160, size=(2, 40))
    with torch.no_grad():
        theirs = model(torch.tensor(tokens)).logits.numpy()
    ours = np.asarray(forward(cfg, params, tokens))
    assert np.max(np.abs(theirs)) > 0.5
    assert np.max(np.abs(ours - theirs)) <= 1e-4
