"""Text generation with a KV cache: one jitted function appends one token to every sequence of a batch.

    tokens = generate(cfg, params, prompt_ids, GenerationConfig(max_new_tokens=64, temperature=0.8, top_p=0.9))

The cache holds each layer's keys and values for every position so far ([layers, batch, max_len, kv_heads,
head_dim]); a step embeds one token per sequence, attends from it to the cached positions <= its own, and
writes its own key/value into the cache. The prompt is fed through the same step (under ``lax.scan``), so
prefill and decoding share one compiled program and one code path, the one the tests compare against
full recomputation without a cache.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from marin.trainer.model.config import LlamaConfig
from marin.trainer.model.llama import mlp_block, output_projection, rms_norm, rope_frequencies


@dataclasses.dataclass(frozen=True)
class GenerationConfig:
    max_new_tokens: int = 64
    temperature: float = 1.0
    """0 means greedy (argmax)."""
    top_k: int | None = None
    top_p: float | None = None
    seed: int = 0
    stop_tokens: tuple[int, ...] = ()
    """Generation of a sequence ends after it emits one of these (it is kept in the output)."""

    def __post_init__(self):
        if self.max_new_tokens < 1:
            raise ValueError(f"GenerationConfig.max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"GenerationConfig.temperature must be >= 0, got {self.temperature}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ValueError(f"GenerationConfig.top_p must be in (0, 1], got {self.top_p}")
        if self.top_k is not None and self.top_k < 1:
            raise ValueError(f"GenerationConfig.top_k must be >= 1, got {self.top_k}")


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


def sample(logits: jax.Array, key: jax.Array, gen: GenerationConfig) -> jax.Array:
    """Next tokens [batch] from logits [batch, vocab] under temperature, top-k and top-p."""
    if gen.temperature == 0:
        return jnp.argmax(logits, axis=-1)
    logits = logits / gen.temperature
    if gen.top_k is not None:
        kth = jax.lax.top_k(logits, gen.top_k)[0][:, -1:]
        logits = jnp.where(logits < kth, -jnp.inf, logits)
    if gen.top_p is not None:
        sorted_logits = jnp.sort(logits, axis=-1)[:, ::-1]
        cumulative = jnp.cumsum(jax.nn.softmax(sorted_logits, axis=-1), axis=-1)
        # smallest set whose probability reaches top_p: keep tokens whose preceding mass is < top_p
        cutoff_index = jnp.sum(cumulative - jax.nn.softmax(sorted_logits, axis=-1) < gen.top_p, axis=-1) - 1
        cutoff = jnp.take_along_axis(sorted_logits, cutoff_index[:, None], axis=-1)
        logits = jnp.where(logits < cutoff, -jnp.inf, logits)
    return jax.random.categorical(key, logits, axis=-1)


PROMPT_BUCKET = 16


def generate(cfg: LlamaConfig, params, prompts: Sequence[Sequence[int]], gen: GenerationConfig) -> list[list[int]]:
    """New tokens for each prompt (prompts may differ in length; each stops at a stop token or the limit)."""
    batch = len(prompts)
    lengths = np.asarray([len(p) for p in prompts])
    if lengths.min() < 1:
        raise ValueError("every prompt needs at least one token (e.g. the EOS/BOS token)")
    # The prompt width is rounded up to a multiple of PROMPT_BUCKET: one compiled program serves every batch
    # whose longest prompt falls in the bucket (the extra scan steps only emit tokens nobody reads).
    width = -(-int(lengths.max()) // PROMPT_BUCKET) * PROMPT_BUCKET
    max_len = width + gen.max_new_tokens
    padded = np.zeros((batch, width), np.int32)
    for i, p in enumerate(prompts):
        padded[i, : len(p)] = p
    out = _generate_jit(cfg, gen, max_len)(
        params, jnp.asarray(padded), jnp.asarray(lengths, jnp.int32), jax.random.PRNGKey(gen.seed)
    )
    results = []
    for row in np.asarray(out):
        tokens = []
        for t in row.tolist():
            tokens.append(t)
            if t in gen.stop_tokens:
                break
        results.append(tokens)
    return results


@functools.lru_cache(maxsize=16)
def _generate_jit(cfg: LlamaConfig, gen: GenerationConfig, max_len: int):
    """Prefill by scanning the step over prompt positions (sequences shorter than the longest prompt
    start sampling as soon as their prompt ends), then scan ``max_new_tokens`` decoding steps."""

    @jax.jit
    def run(params, padded, lengths, key):
        batch, prompt_len = padded.shape
        cache = init_cache(cfg, batch, max_len, params["embed"].dtype)

        def step(carry, t):
            cache, token, key = carry
            key, sub = jax.random.split(key)
            logits, cache = decode_step(cfg, params, cache, token, jnp.full((batch,), t))
            proposal = sample(logits, sub, gen)
            in_prompt = t + 1 < lengths
            next_prompt = padded[:, jnp.minimum(t + 1, prompt_len - 1)]
            nxt = jnp.where(in_prompt, next_prompt, proposal).astype(jnp.int32)
            return (cache, nxt, key), nxt

        total = prompt_len - 1 + gen.max_new_tokens
        _, emitted = jax.lax.scan(step, (cache, padded[:, 0], key), jnp.arange(total))
        emitted = emitted.T  # [batch, total]: emitted[:, t] is the token at position t + 1
        # Each sequence's generated tokens start right after its own prompt.
        idx = lengths[:, None] - 1 + jnp.arange(gen.max_new_tokens)[None, :]
        return jnp.take_along_axis(emitted, idx, axis=1)

    return run
