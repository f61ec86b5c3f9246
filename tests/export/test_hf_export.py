"""Export to Hugging Face format and load it with transformers (CPU torch): same logits as our model."""

import dataclasses

import jax
import numpy as np
import pytest

from marin.export import export_hf, import_hf
from marin.trainer.model.config import Llama3RopeScaling, model_preset
from marin.trainer.model.llama import forward, init_params

torch = pytest.importorskip("torch", reason="needs CPU torch (the export-test extra, installed by make test)")
transformers = pytest.importorskip("transformers", reason="needs transformers (the export-test extra)")

CONFIGS = {
    "untied": dataclasses.replace(model_preset("nano"), vocab_size=512, num_layers=2, num_kv_heads=2, seq_len=64),
    "tied_rope_scaled": dataclasses.replace(model_preset("nano"), vocab_size=384, num_layers=2, num_kv_heads=1,
                                            tie_embeddings=True, seq_len=64,
                                            rope_scaling=Llama3RopeScaling(factor=8.0, original_max_position=16)),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_transformers_logits_match_ours(tmp_path, name):
    cfg = CONFIGS[name]
    params = init_params(cfg, jax.random.PRNGKey(0))
    # Norm weights perturbed away from 1 so that a swapped or misplaced norm would show. Logits come out
    # O(1), so any wrong transpose/reshape/rotary layout gives errors of O(1), far above the 1e-4 bound.
    params = jax.tree.map(lambda p: p if p.ndim > 1 else p + 0.1 * jax.random.normal(jax.random.PRNGKey(1), p.shape),
                          params)
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
    assert dataclasses.replace(cfg2, seq_len=cfg.seq_len) == dataclasses.replace(
        cfg, head_dim=cfg.resolved_head_dim, rope_theta=cfg.rope_theta)
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), b), params, params2)
    tokens = np.arange(20)[None, :] % cfg.vocab_size
    np.testing.assert_allclose(forward(cfg, params, tokens), forward(cfg2, params2, tokens), atol=1e-6)
