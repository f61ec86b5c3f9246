"""Qwen2, Qwen3, OLMo 2, Mistral and the MoE families' checkpoints both ways: a directory transformers itself saved
(random weights from its own configuration classes, since no hub is reachable) imports with the same logits,
exports back to a directory transformers loads with the same logits again, and greedy generation through the
engine is transformers'. Sliding windows (``WINDOWED``) are checked the same way on sequences several windows
long, so a window applied wrongly (off by one, in the wrong layers, or not at all while decoding) shows."""

import dataclasses
import json

import jax
import numpy as np
import pytest

from marin.inference import SamplingParams, export_hf, import_hf
from marin.inference.engine import Engine, EngineConfig
from marin.trainer.model.llama import forward, init_params
from tests.export.hf_families import (
    FAMILIES,
    OPTIONS,
    SHAPE,
    WINDOWED,
    save,
    saved_by_transformers,
    torch,
    transformers,
)
from tests.requirements import require_module


def _their_logits(path, tokens) -> np.ndarray:
    model = transformers.AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    with torch.no_grad():
        return model(torch.tensor(tokens)).logits.numpy()


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_family_imports_and_exports_with_transformers_logits(family, tmp_path):
    saved_by_transformers(family, tmp_path / "theirs")
    cfg, params = import_hf(str(tmp_path / "theirs"))
    assert (cfg.qk_norm, cfg.norm_placement, cfg.attention_bias, cfg.num_experts) == OPTIONS[family]
    tokens = np.random.default_rng(1).integers(0, SHAPE["vocab_size"], size=(2, 40))
    theirs = _their_logits(tmp_path / "theirs", tokens)
    ours = np.asarray(forward(cfg, params, tokens))
    assert np.max(np.abs(theirs)) > 0.5
    assert np.max(np.abs(ours - theirs)) <= 1e-4

    export_hf(cfg, params, str(tmp_path / "ours"))
    doc = json.loads((tmp_path / "ours" / "config.json").read_text())
    assert doc["model_type"] == family and doc["architectures"] == [FAMILIES[family][1]]
    assert np.max(np.abs(_their_logits(tmp_path / "ours", tokens) - ours)) <= 1e-4
    again, params_again = import_hf(str(tmp_path / "ours"))
    assert again == cfg  # the same identity: a head_dim equal to width / heads is read as the default
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), b), params, params_again)


@pytest.mark.parametrize("name", sorted(WINDOWED))
def test_sliding_windows_both_ways_with_transformers_logits_and_generation(name, tmp_path):
    """40 tokens against windows of 5-9, so every later position's attention differs from full attention; then
    prompts and 20 generated tokens far past the window: the engine's cached decoding masks what transformers'
    sliding cache drops."""
    config_class, model_class, extra, (window, layers) = WINDOWED[name]
    save(config_class, model_class, extra, tmp_path / "theirs")
    cfg, params = import_hf(str(tmp_path / "theirs"))
    assert (cfg.sliding_window, cfg.sliding_window_layers) == (window, layers)
    tokens = np.random.default_rng(1).integers(0, SHAPE["vocab_size"], size=(2, 40))
    theirs = _their_logits(tmp_path / "theirs", tokens)
    ours = np.asarray(forward(cfg, params, tokens))
    assert np.max(np.abs(ours - theirs)) <= 1e-4
    full = np.asarray(
        forward(dataclasses.replace(cfg, sliding_window=None, sliding_window_layers=None), params, tokens)
    )
    assert np.max(np.abs(full - theirs)) > 1e-2  # the window matters at this length
    scanned = np.asarray(forward(dataclasses.replace(cfg, scan_layers=True), params, tokens))  # lax.cond per layer
    assert np.max(np.abs(scanned - theirs)) <= 1e-4

    export_hf(cfg, params, str(tmp_path / "ours"))
    assert np.max(np.abs(_their_logits(tmp_path / "ours", tokens) - ours)) <= 1e-4
    again, _ = import_hf(str(tmp_path / "ours"))
    assert (again.sliding_window, again.sliding_window_layers) == (window, layers)
    _assert_engine_generates_like_transformers(cfg, params, tmp_path / "theirs", max_new_tokens=20)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_greedy_generation_through_the_engine_is_transformers(family, tmp_path):
    saved_by_transformers(family, tmp_path / "theirs")
    cfg, params = import_hf(str(tmp_path / "theirs"))
    _assert_engine_generates_like_transformers(cfg, params, tmp_path / "theirs", max_new_tokens=12)


def _assert_engine_generates_like_transformers(cfg, params, path, max_new_tokens: int) -> None:
    prompts = [[5, 17, 42, 7], [99, 3, 150, 11, 60, 2, 8, 31, 77, 140, 12, 9, 4, 66, 120, 21, 5, 88, 13, 101]]
    model = transformers.AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    want = []
    for prompt in prompts:
        with torch.no_grad():
            out = model.generate(
                torch.tensor([prompt]), max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=None
            )
        want.append(out[0, len(prompt) :].tolist())
    # chunks of 16: the longer prompt is prefilled in two, the second attending to the cached first
    engine = Engine(cfg, params, EngineConfig(slots=2, prefill_chunk=16, max_model_len=48))
    got = engine.generate(prompts, SamplingParams(max_tokens=max_new_tokens, temperature=0))
    assert [r.tokens for r in got] == want


@pytest.mark.parametrize("family", ["mixtral", "qwen3_moe", "olmoe"])
def test_the_load_balancing_loss_is_transformers(family, tmp_path):
    """transformers' ``load_balancing_loss_func`` over every layer's router logits (``output_router_logits``)."""
    from marin.trainer.model import training_loss

    saved_by_transformers(family, tmp_path / "theirs")
    cfg, params = import_hf(str(tmp_path / "theirs"))
    tokens = np.random.default_rng(2).integers(0, SHAPE["vocab_size"], size=(2, 40))
    model = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "theirs"), dtype=torch.float32).eval()
    with torch.no_grad():
        theirs = float(model(torch.tensor(tokens), output_router_logits=True).aux_loss)
    batch = dict(input_ids=tokens, targets=tokens, segment_ids=np.ones_like(tokens), loss_mask=np.ones(tokens.shape))
    _, weight, metrics = training_loss(cfg, params, batch)
    assert float(metrics["router_aux_loss"] / weight) == pytest.approx(theirs, rel=1e-5)
    assert cfg.router_aux_loss_coef == model.config.router_aux_loss_coef


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_greedy_completions_through_the_openai_server_are_transformers(family, tmp_path):
    """Our export of transformers' model, with a tokenizer, served; each completion is transformers' greedy
    continuation of the same prompt ids, decoded."""
    require_module("openai", "the openai client (the dev extra)")
    require_module("uvicorn", "uvicorn (the serve extra)")
    from tests.export.tiny_model import write_tiny_tokenizer
    from tests.inference.serving import client, serving

    saved_by_transformers(family, tmp_path / "theirs", vocab_size=320)  # the tiny tokenizer's 300 fit
    cfg, params = import_hf(str(tmp_path / "theirs"))
    tokenizer, _ = write_tiny_tokenizer(str(tmp_path / "tok"))
    export_hf(cfg, params, str(tmp_path / "ours"), tokenizer=tokenizer)
    theirs = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "theirs"), dtype=torch.float32).eval()
    texts = []
    with serving(str(tmp_path / "ours")) as (url, model, _):
        eos = model.engine.end_tokens[0]
        for prompt in ("Once upon a time", "The cow said"):
            got = client(url).completions.create(model=model.name, prompt=prompt, max_tokens=10, temperature=0)
            ids = [*model.prefix, *model.encode_text(prompt)]
            with torch.no_grad():
                out = theirs.generate(
                    torch.tensor([ids]), max_new_tokens=10, do_sample=False, eos_token_id=eos, pad_token_id=eos
                )
            assert got.choices[0].text == model.decode(out[0, len(ids) :].tolist())
            texts.append(got.choices[0].text)
    assert any(len(t) > 5 for t in texts), texts  # something was generated, not an immediate end


def test_our_options_train_and_count_their_parameters():
    """The options are parameters of the one model: initialised (norm weights 1, biases 0), counted, and
    neither weight-decayed nor given to Muon (they are vectors per head, not matrices of the residual stream)."""
    from marin.inference.hf import config_from_hf
    from marin.trainer.model import param_axes
    from marin.trainer.muon import is_axes, matrix_dims
    from marin.trainer.optim import OptimizerConfig

    doc = {**SHAPE, "model_type": "olmo2", "tie_word_embeddings": False}
    cfg = dataclasses.replace(config_from_hf(doc), attention_bias=True)
    params = init_params(cfg, jax.random.PRNGKey(0))
    layers = params["layers"]
    assert layers["q_norm"].shape == (2, 4, 16) and layers["k_norm"].shape == (2, 2, 16)
    assert float(layers["bq"].sum()) == 0 and float(layers["q_norm"].min()) == 1
    assert sum(p.size for p in jax.tree.leaves(params)) == cfg.param_count
    axes = param_axes(cfg)["layers"]
    decays = OptimizerConfig().decay_mask({"layers": axes})["layers"]
    assert not any(decays[k] for k in ("bq", "bk", "bv", "q_norm", "k_norm")) and decays["wq"]
    assert all(matrix_dims(axes[k]) is None for k in ("bq", "q_norm")) and is_axes(axes["bq"])


@pytest.mark.parametrize(
    "family, change, field",
    [
        ("olmo2", {"sliding_window": 16}, "sliding_window 16 .*olmo2's transformers code has no sliding window"),
        ("qwen3", {"layer_types": ["chunked_attention", "full_attention"]}, r"layer_types \['chunked_attention'\]"),
        ("qwen3", {"attention_bias": True}, "attention_bias"),
        ("olmo2", {"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 2.0}}, "rope_type 'yarn'"),
        ("qwen2", {"hidden_act": "gelu"}, "hidden_act 'gelu'"),
        ("gemma2", {}, "model_type 'gemma2' is not supported"),
        ("mixtral", {"router_jitter_noise": 0.1}, "router_jitter_noise 0.1"),
        ("qwen3_moe", {"decoder_sparse_step": 2}, "decoder_sparse_step 2"),
        ("qwen3_moe", {"mlp_only_layers": [0]}, r"mlp_only_layers \[0\]"),
        ("olmoe", {"clip_qkv": 8.0}, "clip_qkv 8.0"),
        ("mixtral", {"num_experts_per_tok": 5}, r"experts_per_token \(top-k\) must be between 1 and num_experts \(4\)"),
    ],
)
def test_a_config_with_unimplemented_math_is_refused_naming_the_field(family, change, field, tmp_path):
    if family == "gemma2":
        doc = {**SHAPE, "model_type": "gemma2"}
    else:
        saved_by_transformers(family, tmp_path / "hf")
        doc = json.loads((tmp_path / "hf" / "config.json").read_text())
    (tmp_path / "hf").mkdir(exist_ok=True)
    (tmp_path / "hf" / "config.json").write_text(json.dumps({**doc, **change}))
    with pytest.raises(ValueError, match=field):
        import_hf(str(tmp_path / "hf"))


def test_a_tensor_that_does_not_match_its_config_is_named_with_both_shapes(tmp_path):
    saved_by_transformers("qwen3", tmp_path / "hf")
    doc = json.loads((tmp_path / "hf" / "config.json").read_text())
    (tmp_path / "hf" / "config.json").write_text(json.dumps({**doc, "head_dim": 16}))
    named = r"tensor 'model.layers.0.self_attn.q_\w+.weight' has shape \(24,\), its config implies \(16,\)"
    with pytest.raises(ValueError, match=named):  # q_norm's [head_dim], the first tensor the config sizes
        import_hf(str(tmp_path / "hf"))


def test_an_expert_tensor_that_does_not_match_its_config_is_named(tmp_path):
    saved_by_transformers("qwen3_moe", tmp_path / "hf")
    doc = json.loads((tmp_path / "hf" / "config.json").read_text())
    (tmp_path / "hf" / "config.json").write_text(json.dumps({**doc, "moe_intermediate_size": 32}))
    named = (
        r"tensor 'model.layers.0.mlp.experts.0.gate_proj.weight' has shape \(40, 64\), its config implies \(32, 64\)"
    )
    with pytest.raises(ValueError, match=named):
        import_hf(str(tmp_path / "hf"))


def test_a_moe_option_no_family_has_is_refused_on_export():
    from marin.inference.hf import hf_config
    from marin.trainer.model import model_preset

    with pytest.raises(ValueError, match=r"cannot be exported as mixtral: shared_experts=1"):
        hf_config(dataclasses.replace(model_preset("mixtral_8x7b"), shared_experts=1), bos_token_id=1, eos_token_id=2)
    olmoe = hf_config(model_preset("olmoe_1b_7b"), bos_token_id=None, eos_token_id=1)
    assert olmoe["model_type"] == "olmoe" and olmoe["num_experts"] == 64 and olmoe["norm_topk_prob"] is False


def test_a_window_no_family_can_say_is_refused_on_export():
    """Mistral's and Mixtral's configs put one window in every layer: a Llama-shaped model with windowed and
    full layers has no Hugging Face family; OLMo 2 has no window at all. A windowed Llama-shaped model is
    Mistral, and Qwen3 says any subset of layers."""
    from marin.inference.hf import hf_config
    from marin.trainer.model import model_preset

    def config(preset, **change):
        return hf_config(dataclasses.replace(model_preset(preset), **change), bos_token_id=1, eos_token_id=2)

    with pytest.raises(ValueError, match=r"sliding_window=64, sliding_window_layers=\(0, 2\)\) is no Hugging Face"):
        config("llama_1b", sliding_window=64, sliding_window_layers=(2, 0))
    with pytest.raises(ValueError, match=r"sliding_window=64, sliding_window_layers=None\) is no Hugging Face"):
        config("olmo2_1b", sliding_window=64)
    mistral = config("llama_1b", sliding_window=64)
    assert (mistral["model_type"], mistral["sliding_window"]) == ("mistral", 64)
    qwen3 = config("qwen3_0_6b", sliding_window=64, sliding_window_layers=[27, 26])
    assert qwen3["layer_types"] == ["full_attention"] * 26 + ["sliding_attention"] * 2
    assert (qwen3["use_sliding_window"], qwen3["max_window_layers"]) == (True, 26)
    assert config("llama_1b")["model_type"] == "llama"
