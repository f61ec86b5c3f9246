"""Hugging Face checkpoints of each family, saved by transformers itself: random weights from its own
configuration classes (no hub is reachable here), norms and biases perturbed away from 1 and 0 so that a swapped
or skipped one shows. Shared by the family parity tests (export, lm-eval)."""

from tests.requirements import require_module

torch = require_module("torch", "CPU torch (the export-test extra, installed by make test)")
transformers = require_module("transformers", "transformers (the export-test extra)")

SHAPE = dict(
    vocab_size=160,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    initializer_range=0.3,  # wide init: logits O(1), so a wrong layout shows far above 1e-4
)
FAMILIES = {
    # Qwen3 with a head dimension independent of width / heads, and tied embeddings (as Qwen3-0.6B)
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(head_dim=24, tie_word_embeddings=True)),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(tie_word_embeddings=False)),
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM", dict(tie_word_embeddings=False, pad_token_id=0, eos_token_id=1)),
    # Mixture-of-experts: Mixtral renormalizes the top-k weights, OLMoE does not (norm_topk_prob=False, its
    # default), Qwen3-MoE here does (as the released models) with experts narrower than intermediate_size.
    "mixtral": ("MixtralConfig", "MixtralForCausalLM", dict(num_local_experts=4, num_experts_per_tok=2)),
    "qwen3_moe": (
        "Qwen3MoeConfig",
        "Qwen3MoeForCausalLM",
        dict(num_experts=6, num_experts_per_tok=2, moe_intermediate_size=40, norm_topk_prob=True, head_dim=24),
    ),
    "olmoe": (
        "OlmoeConfig",
        "OlmoeForCausalLM",
        dict(num_experts=4, num_experts_per_tok=3, pad_token_id=0, eos_token_id=1),
    ),
}
OPTIONS = {
    "qwen3": ("head", "pre", False, 0),
    "qwen2": ("none", "pre", True, 0),
    "olmo2": ("full", "post", False, 0),
    "mixtral": ("none", "pre", False, 4),
    "qwen3_moe": ("head", "pre", False, 6),
    "olmoe": ("full", "pre", False, 4),
}


WINDOWED = {
    # name: (config class, model class, options, our (sliding_window, sliding_window_layers))
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(sliding_window=8), (8, None)),
    "qwen3": (  # the window in the layers from max_window_layers on: layer 1 of 2
        "Qwen3Config",
        "Qwen3ForCausalLM",
        dict(head_dim=24, use_sliding_window=True, sliding_window=6, max_window_layers=1),
        (6, (1,)),
    ),
    "qwen2": (  # an explicit layer_types: the window in layer 0 only
        "Qwen2Config",
        "Qwen2ForCausalLM",
        dict(use_sliding_window=True, sliding_window=5, layer_types=["sliding_attention", "full_attention"]),
        (5, (0,)),
    ),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM", dict(num_local_experts=4, sliding_window=7), (7, None)),
    "qwen3_moe": (
        "Qwen3MoeConfig",
        "Qwen3MoeForCausalLM",
        dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=40, use_sliding_window=True, sliding_window=9),
        (9, None),
    ),
}


def saved_by_transformers(family: str, path, **shape) -> None:
    save(*FAMILIES[family], path, **shape)


def save(config_class: str, model_class: str, extra: dict, path, **shape) -> None:
    config = getattr(transformers, config_class)(**{**SHAPE, **shape}, **extra)
    torch.manual_seed(0)
    model = getattr(transformers, model_class)(config).eval()
    with torch.no_grad():  # norms away from 1 and biases away from 0, so a swapped or skipped one shows
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.2 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.5 * torch.randn_like(p))
    model.save_pretrained(str(path))
