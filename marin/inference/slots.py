"""The jitted programs of the serving engine: a KV cache of fixed slots, chunked prefill into one slot, one
decoding step for every slot, and per-row sampling.

    cache = init_slot_cache(cfg, slots=16, chunk=256)
    out, cache = prefill_chunk(cfg, params, cache, slot, tokens[chunk], targets[chunk], start, valid, row)
    out, cache = decode_slots(cfg, params, cache, tokens[slots], positions[slots], rows)

The cache has ``seq_len + chunk`` positions per slot: a chunk written at any start below ``seq_len`` fits
(``dynamic_update_slice`` would otherwise shift it), and the last position is scratch space where slots that
are not decoding write the step's throw-away key/value, so a slot still in prefill is never touched by the
decoding step that runs beside it.

Every row samples with its own parameters (``SamplingRows``) and its own key, ``fold_in(key(seed), n)`` for
its n-th generated token: what a seeded request draws depends on its seed and its own history only, not on
which other requests share the batch or which slot it landed in. Each row's computation reads only its own
cache rows, and the programs' shapes are fixed (``slots``, a few chunk sizes), so greedy decoding of a
request gives the same tokens alone or in a full batch.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from marin.inference.sampling import decode_step
from marin.trainer.model.config import LlamaConfig
from marin.trainer.model.llama import apply_rope, mlp_block, output_projection, rms_norm, rope_frequencies

TOP_LOGPROBS = 5
"""Alternatives computed per position for ``logprobs``/``top_logprobs`` (OpenAI's completions API allows 5)."""


class SamplingRows(NamedTuple):
    """Per-row sampling parameters, one entry per row of the batch."""

    temperature: jax.Array  # float32; 0 means greedy
    top_k: jax.Array  # int32; 0 means off
    top_p: jax.Array  # float32; 1 means off
    seed: jax.Array  # uint32
    count: jax.Array  # int32: how many tokens this row generated before this one

    @staticmethod
    def of(rows: list[tuple[float, int, float, int, int]]) -> SamplingRows:
        t, k, p, s, c = zip(*rows) if rows else ((), (), (), (), ())
        return SamplingRows(
            np.asarray(t, np.float32),
            np.asarray(k, np.int32),
            np.asarray(p, np.float32),
            np.asarray(s, np.uint32),
            np.asarray(c, np.int32),
        )


class Sampled(NamedTuple):
    token: jax.Array  # [rows] the sampled next token
    logprob: jax.Array  # [rows] its log-probability under the model (before temperature and truncation)
    top_logprob: jax.Array  # [rows, TOP_LOGPROBS]
    top_token: jax.Array  # [rows, TOP_LOGPROBS]


def init_slot_cache(cfg: LlamaConfig, slots: int, chunk: int, dtype=jnp.float32) -> dict[str, jax.Array]:
    shape = (cfg.num_layers, slots, cfg.seq_len + chunk, cfg.num_kv_heads, cfg.resolved_head_dim)
    return {"k": jnp.zeros(shape, dtype), "v": jnp.zeros(shape, dtype)}


def sample_rows(logits: jax.Array, rows: SamplingRows) -> Sampled:
    """Next tokens for logits [rows, vocab], each row under its own temperature, top-k, top-p and key."""
    logits = logits.astype(jnp.float32)
    vocab = logits.shape[-1]
    logp = jax.nn.log_softmax(logits, axis=-1)
    top_logprob, top_token = jax.lax.top_k(logp, min(TOP_LOGPROBS, vocab))
    greedy = jnp.argmax(logits, axis=-1)

    scaled = logits / jnp.where(rows.temperature > 0, rows.temperature, 1.0)[:, None]
    ordered = jnp.sort(scaled, axis=-1)[:, ::-1]  # descending
    k = jnp.where(rows.top_k > 0, jnp.minimum(rows.top_k, vocab), vocab)
    kth = jnp.take_along_axis(ordered, (k - 1)[:, None], axis=-1)
    # top-p: the smallest prefix of the sorted distribution whose mass reaches top_p (within the top-k)
    ordered = jnp.where(jnp.arange(vocab)[None, :] < k[:, None], ordered, -jnp.inf)
    probs = jax.nn.softmax(ordered, axis=-1)
    before = jnp.cumsum(probs, axis=-1) - probs
    keep = jnp.sum(before < rows.top_p[:, None], axis=-1)
    cutoff = jnp.take_along_axis(ordered, (jnp.maximum(keep, 1) - 1)[:, None], axis=-1)
    threshold = jnp.maximum(kth, cutoff)
    masked = jnp.where(scaled >= threshold, scaled, -jnp.inf)
    keys = jax.vmap(lambda s, c: jax.random.fold_in(jax.random.key(s), c))(rows.seed, rows.count)
    drawn = jax.vmap(lambda key, row: jax.random.categorical(key, row))(keys, masked)
    token = jnp.where(rows.temperature > 0, drawn, greedy).astype(jnp.int32)
    logprob = jnp.take_along_axis(logp, token[:, None], axis=-1)[:, 0]
    return Sampled(token, logprob, top_logprob, top_token.astype(jnp.int32))


class PrefillOut(NamedTuple):
    target_logprob: jax.Array  # [chunk] log p(targets[i] | tokens[: i + 1])
    target_greedy: jax.Array  # [chunk] bool: targets[i] is the argmax there
    top_logprob: jax.Array  # [chunk, TOP_LOGPROBS]
    top_token: jax.Array  # [chunk, TOP_LOGPROBS]
    next: Sampled  # sampled from the logits at position valid - 1 (one row)


@functools.partial(jax.jit, static_argnums=0, donate_argnums=2)
def prefill_chunk(cfg: LlamaConfig, params, cache, slot, tokens, targets, start, valid, row: SamplingRows):
    """Feed ``tokens[:valid]`` at positions ``start...`` into cache slot ``slot``: queries attend to the
    slot's cached positions <= their own. Returns the log-probabilities of ``targets`` (the next prompt
    tokens, for echo/prompt logprobs) and a token sampled from the last valid position."""
    chunk = tokens.shape[0]
    h, kv, hd = cfg.num_heads, cfg.num_kv_heads, cfg.resolved_head_dim
    cache_len = cache["k"].shape[2]
    positions = start + jnp.arange(chunk)
    inv_freq = jnp.asarray(rope_frequencies(cfg), jnp.float32)
    angles = positions[:, None].astype(jnp.float32) * inv_freq[None, :]
    cos, sin = jnp.cos(angles), jnp.sin(angles)
    visible = jnp.arange(cache_len)[None, :] <= positions[:, None]  # [chunk, cache_len]
    x = params["embed"][tokens][None]  # [1, chunk, embed]

    def layer_fn(x, inputs):
        layer, k_cache, v_cache = inputs  # caches [slots, cache_len, kv, hd]
        y = rms_norm(x, layer["attn_norm"], cfg.norm_eps)
        q = apply_rope(jnp.einsum("bsd,dhk->bshk", y, layer["wq"]), cos, sin)[0]  # [chunk, heads, hd]
        k = apply_rope(jnp.einsum("bsd,dhk->bshk", y, layer["wk"]), cos, sin)  # [1, chunk, kv, hd]
        v = jnp.einsum("bsd,dhk->bshk", y, layer["wv"])
        k_cache = jax.lax.dynamic_update_slice(k_cache, k.astype(k_cache.dtype), (slot, start, 0, 0))
        v_cache = jax.lax.dynamic_update_slice(v_cache, v.astype(v_cache.dtype), (slot, start, 0, 0))
        keys = jax.lax.dynamic_index_in_dim(k_cache, slot, keepdims=False)  # [cache_len, kv, hd]
        values = jax.lax.dynamic_index_in_dim(v_cache, slot, keepdims=False)
        q = q.reshape(chunk, kv, h // kv, hd)
        scores = jnp.einsum("sgqd,tgd->gqst", q, keys).astype(jnp.float32) / np.sqrt(hd)
        scores = jnp.where(visible[None, None], scores, -jnp.inf)
        probs = jax.nn.softmax(scores, axis=-1).astype(values.dtype)
        attn = jnp.einsum("gqst,tgd->sgqd", probs, values).reshape(1, chunk, h, hd)
        x = x + jnp.einsum("bshk,hkd->bsd", attn, layer["wo"])
        y = rms_norm(x, layer["mlp_norm"], cfg.norm_eps)
        x = x + mlp_block(layer, y)
        return x, (k_cache, v_cache)

    x, (k_new, v_new) = jax.lax.scan(layer_fn, x, (params["layers"], cache["k"], cache["v"]))
    x = rms_norm(x[0], params["final_norm"], cfg.norm_eps)
    logits = jnp.einsum("sd,dv->sv", x, output_projection(cfg, params), preferred_element_type=jnp.float32)
    logp = jax.nn.log_softmax(logits, axis=-1)
    target_logprob = jnp.take_along_axis(logp, targets[:, None], axis=-1)[:, 0]
    target_greedy = jnp.argmax(logits, axis=-1) == targets
    top_logprob, top_token = jax.lax.top_k(logp, min(TOP_LOGPROBS, logits.shape[-1]))
    last = jax.lax.dynamic_slice_in_dim(logits, valid - 1, 1)  # [1, vocab]
    out = PrefillOut(target_logprob, target_greedy, top_logprob, top_token.astype(jnp.int32), sample_rows(last, row))
    return out, {"k": k_new, "v": v_new}


@functools.partial(jax.jit, static_argnums=0, donate_argnums=2)
def decode_slots(cfg: LlamaConfig, params, cache, tokens, positions, rows: SamplingRows):
    """One token for every slot: ``tokens[i]`` sits at ``positions[i]`` of slot i (slots not decoding pass
    the scratch position, the cache's last); returns what each row samples next and the updated cache."""
    logits, cache = decode_step(cfg, params, cache, tokens, positions)
    return sample_rows(logits, rows), cache
