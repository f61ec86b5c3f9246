"""A tiny random Llama exported in Hugging Face format with a tiny byte-level BPE tokenizer beside it:
a complete checkpoint directory for CLI and eval-step tests, built in about a second, no hub, no training."""

import dataclasses

import jax
import numpy as np

from marin.chat.template import ChatTokenizer, with_chat_tokens
from marin.inference import export_hf
from marin.tokenize import eos_id
from marin.tokenize.tokenizer import TrainTokenizerConfig, build_bpe_tokenizer
from marin.trainer.model.config import model_preset
from marin.trainer.model.llama import init_params

TEXTS = [
    "Once upon a time there was a little dog. The dog ran to the farm.",
    "The cow said moo and the crow said caw. Then they all slept.",
] * 20
CFG = dataclasses.replace(
    model_preset("nano"),
    vocab_size=320,
    hidden_dim=64,
    mlp_dim=128,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    seq_len=128,
)


def write_tiny_tokenizer(path: str, chat: bool = False):
    """The tiny byte-level BPE (300 tokens; the chat tokens too with ``chat``) saved beside ``path``: returns
    (its path, the tokenizer)."""
    tokenizer = build_bpe_tokenizer(
        iter(TEXTS), TrainTokenizerConfig(input_paths=["-"], output_path="-", vocab_size=300, min_frequency=1)
    )
    if chat:
        tokenizer = with_chat_tokens(tokenizer)
    assert tokenizer.get_vocab_size() <= CFG.vocab_size
    if chat:
        tok_path = f"{path}-chat-tokenizer"
        ChatTokenizer(tokenizer).save(tok_path)
    else:
        tok_path = f"{path}-tokenizer.json"
        with open(tok_path, "w") as f:
            f.write(tokenizer.to_str())
    return tok_path, tokenizer


def make_tiny_export(path: str, chat: bool = False, eos_scale: float = 1.0):
    """Write ``tokenizer.json``, ``config.json`` and ``model.safetensors`` to ``path``; return (cfg, params).
    ``chat``: the tokenizer has the chat tokens and the export carries the chat template. ``eos_scale``
    multiplies the end-of-text token's output weights: at 3 the model's greedy token is end-of-text at about
    one position in eight (at 1, almost never), as a trained model's is after a document."""
    tok_path, tokenizer = write_tiny_tokenizer(path, chat)
    # numpy draws (nothing to compile, unlike init_params's draws); matrices at 3x
    # the usual scale for peakier logits (argmax well separated), norms at 1
    rng = np.random.default_rng(0)
    shapes = jax.eval_shape(lambda: init_params(CFG, jax.random.PRNGKey(0)))
    params = jax.tree.map(
        lambda s: (
            rng.normal(size=s.shape) * 3 * CFG.initializer_range if len(s.shape) > 1 else np.ones(s.shape)
        ).astype(np.float32),
        shapes,
    )
    params["lm_head"][:, eos_id(tokenizer)] *= eos_scale
    export_hf(CFG, params, path, tokenizer=tok_path)
    return CFG, jax.tree.map(jax.numpy.asarray, params)
