"""The serving benchmark's one-at-a-time peer: greedy generation with a plain KV cache, one jitted function
appending one token to every sequence of a batch.

    tokens = generate(cfg, params, prompt_ids, max_new_tokens=64)

The cache holds each layer's keys and values for every position so far ([layers, batch, max_len, kv_heads,
head_dim]); a step embeds one token per sequence, attends from it to the cached positions <= its own, and
writes its own key/value into the cache. The prompt is fed through the same step (under ``lax.scan``), so
prefill and decoding share one compiled program. This was the lab's first generator; the serving engine
(``marin.inference.engine``) replaced it everywhere else, and ``benchmarks/serving_bench.py`` keeps it as
the peer that serves requests one at a time.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from marin.trainer.model.config import LlamaConfig
from marin.trainer.model.llama import mlp_block, output_projection, rms_norm, rope_frequencies


def init_cache(cfg: LlamaConfig, batch: int, max_len: int, dtype=jnp.float32) -> dict[str, jax.Array]:
    shape = (cfg.num_layers, batch, max_len, cfg.num_kv_heads, cfg.resolved_head_dim)
    return {"k": jnp.zeros(shape, dtype), "v": jnp.zeros(shape, dtype)}


def _rope_one(x, cos, sin):
    """Rotate [batch, heads, head_dim] at one position per sequence (cos/sin [batch, head_dim/2])."""
    x1, x2 = jnp.split(x, 2, axis=-1)
    cos, sin = cos[:, None, :], sin[:, None, :]
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(x.dtype)


def decode_step(cfg: LlamaConfig, params, cache, tokens: jax.Array, positions: jax.Array):
    """Logits [batch, vocab] for ``tokens`` [batch] at ``positions`` [batch], and the updated cache."""
    h, kv, hd = cfg.num_heads, cfg.num_kv_heads, cfg.resolved_head_dim
    max_len = cache["k"].shape[2]
    inv_freq = jnp.asarray(rope_frequencies(cfg), jnp.float32)
    angles = positions[:, None].astype(jnp.float32) * inv_freq[None, :]  # [batch, head_dim/2]
    cos, sin = jnp.cos(angles), jnp.sin(angles)
    visible = jnp.arange(max_len)[None, :] <= positions[:, None]  # [batch, max_len]
    x = params["embed"][tokens]  # [batch, embed]

    def layer_fn(x, inputs):
        layer, k_cache, v_cache = inputs
        y = rms_norm(x, layer["attn_norm"], cfg.norm_eps)
        q = _rope_one(jnp.einsum("bd,dhk->bhk", y, layer["wq"]), cos, sin)  # [batch, heads, head_dim]
        k = _rope_one(jnp.einsum("bd,dhk->bhk", y, layer["wk"]), cos, sin)  # [batch, kv_heads, head_dim]
        v = jnp.einsum("bd,dhk->bhk", y, layer["wv"])
        rows = jnp.arange(k.shape[0])
        k_cache = k_cache.at[rows, positions].set(k.astype(k_cache.dtype))  # [batch, max_len, kv, hd]
        v_cache = v_cache.at[rows, positions].set(v.astype(v_cache.dtype))
        q = q.reshape(q.shape[0], kv, h // kv, hd)  # [batch, kv_heads, group, head_dim]
        scores = jnp.einsum("bgqd,btgd->bgqt", q, k_cache).astype(jnp.float32) / np.sqrt(hd)
        scores = jnp.where(visible[:, None, None, :], scores, -jnp.inf)
        probs = jax.nn.softmax(scores, axis=-1).astype(v_cache.dtype)
        attn = jnp.einsum("bgqt,btgd->bgqd", probs, v_cache).reshape(x.shape[0], h, hd)  # [batch, heads, hd]
        x = x + jnp.einsum("bhk,hkd->bd", attn, layer["wo"])
        y = rms_norm(x, layer["mlp_norm"], cfg.norm_eps)
        x = x + mlp_block(layer, y[:, None, :])[:, 0, :]
        return x, (k_cache, v_cache)

    x, (k_new, v_new) = jax.lax.scan(layer_fn, x, (params["layers"], cache["k"], cache["v"]))
    x = rms_norm(x, params["final_norm"], cfg.norm_eps)
    logits = jnp.einsum("bd,dv->bv", x, output_projection(cfg, params), preferred_element_type=jnp.float32)
    return logits, {"k": k_new, "v": v_new}


PROMPT_BUCKET = 16


def generate(cfg: LlamaConfig, params, prompts: Sequence[Sequence[int]], max_new_tokens: int) -> list[list[int]]:
    """``max_new_tokens`` greedy tokens for each prompt (prompts may differ in length)."""
    batch = len(prompts)
    lengths = np.asarray([len(p) for p in prompts])
    if lengths.min() < 1:
        raise ValueError("every prompt needs at least one token (e.g. the EOS/BOS token)")
    # The prompt width is rounded up to a multiple of PROMPT_BUCKET: one compiled program serves every batch
    # whose longest prompt falls in the bucket (the extra scan steps only emit tokens nobody reads).
    width = -(-int(lengths.max()) // PROMPT_BUCKET) * PROMPT_BUCKET
    max_len = width + max_new_tokens
    padded = np.zeros((batch, width), np.int32)
    for i, p in enumerate(prompts):
        padded[i, : len(p)] = p
    out = _generate_jit(cfg, max_new_tokens, max_len)(params, jnp.asarray(padded), jnp.asarray(lengths, jnp.int32))
    return np.asarray(out).tolist()


@functools.lru_cache(maxsize=16)
def _generate_jit(cfg: LlamaConfig, max_new_tokens: int, max_len: int):
    """Prefill by scanning the step over prompt positions (sequences shorter than the longest prompt
    start generating as soon as their prompt ends), then scan ``max_new_tokens`` decoding steps."""

    @jax.jit
    def run(params, padded, lengths):
        batch, prompt_len = padded.shape
        cache = init_cache(cfg, batch, max_len, params["embed"].dtype)

        def step(carry, t):
            cache, token = carry
            logits, cache = decode_step(cfg, params, cache, token, jnp.full((batch,), t))
            proposal = jnp.argmax(logits, axis=-1)
            in_prompt = t + 1 < lengths
            next_prompt = padded[:, jnp.minimum(t + 1, prompt_len - 1)]
            nxt = jnp.where(in_prompt, next_prompt, proposal).astype(jnp.int32)
            return (cache, nxt), nxt

        total = prompt_len - 1 + max_new_tokens
        _, emitted = jax.lax.scan(step, (cache, padded[:, 0]), jnp.arange(total))
        emitted = emitted.T  # [batch, total]: emitted[:, t] is the token at position t + 1
        # Each sequence's generated tokens start right after its own prompt.
        idx = lengths[:, None] - 1 + jnp.arange(max_new_tokens)[None, :]
        return jnp.take_along_axis(emitted, idx, axis=1)

    return run
