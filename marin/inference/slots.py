"""The jitted programs of the serving engine: a KV cache of fixed slots, chunked prefill into one slot (or
several whole prompts packed into one chunk), one decoding step for every slot, and per-row sampling.

    cache = init_slot_cache(cfg, slots=16, chunk=256)
    out, cache = prefill_chunk(cfg, params, cache, slot, tokens[chunk], targets[chunk], start, valid, row)
    out, cache = prefill_packed(cfg, params, cache, slots[r], tokens[chunk], segments[chunk], positions[chunk],
                                last[r], rows)
    out, cache = decode_slots(cfg, params, cache, tokens[slots], positions[slots], rows)

A full-attention layer's cache has ``seq_len + chunk`` positions per slot: a chunk written at any start below
``seq_len`` fits (``dynamic_update_slice`` would otherwise shift it), and the last position is scratch space
where slots that are not decoding write the step's throw-away key/value, so a slot still in prefill is never
touched by the decoding step that runs beside it. A sliding-window layer keeps a ring of ``window - 1 + chunk``
positions (``ring_length``): position p lives at p mod that, and writes at or past ``seq_len`` (the scratch,
padding) are dropped. A step writes at most ``chunk`` positions into a slot, and its queries need at most
``window - 1`` before their first, so nothing a query attends to is overwritten while it is still visible.

Every row samples with its own parameters (``SamplingRows``) and its own key, ``fold_in(key(seed), n)`` for
its n-th generated token: what a seeded request draws depends on its seed and its own history only, not on
which other requests share the batch or which slot it landed in. Each row's computation reads only its own
cache rows, and the programs' shapes are fixed (``slots``, a few chunk sizes), so greedy decoding of a
request gives the same tokens alone or in a full batch.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from marin.inference.sampling_params import TOP_LOGPROBS
from marin.trainer.model.config import LlamaConfig
from marin.trainer.model.llama import (
    feed_forward,
    output_projection,
    project_qkv,
    residual,
    rms_norm,
    rope_frequencies,
)


class SamplingRows(NamedTuple):
    """Per-row sampling parameters, one entry per row of the batch (each request's row is packed, and its
    values checked, when it is submitted: ``sampling_params.packed_row``)."""

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


def segment_bounds(positions: int) -> list[int]:
    """Where the cache's segments start and end: [0, 128, 256, 512, ...] up to ``positions``. Every
    attention span (``attention_span``) is a whole number of segments."""
    bounds, size = [0], 128
    while size < positions:
        bounds.append(size)
        size *= 2
    return [*bounds, positions]


@functools.partial(jax.tree_util.register_dataclass, data_fields=["k", "v"], meta_fields=["ring"])
@dataclasses.dataclass(frozen=True)
class LayerCache:
    """One layer's keys and values for every slot, as segments (``segment_bounds`` of its positions): keys
    [slots, kv_heads, head_dim, length] (transposed), values [slots, kv_heads, length, head_dim]."""

    k: list
    v: list
    ring: int | None
    """Positions of a ring (a sliding-window layer: position p at index p mod ring), or None: position p at
    index p. Static: each program is compiled for its layers' layout."""

    @property
    def positions(self) -> int:
        return sum(values.shape[2] for values in self.v)


def ring_length(window: int | None, seq_len: int, chunk: int) -> int | None:
    """Positions a layer with this sliding ``window`` keeps per slot, writing at most ``chunk`` positions a step:
    the ``window - 1`` keys before a step's first query and the step's own. None where the layer needs the
    whole context (no window, or one that covers it)."""
    if window is None or window >= seq_len:
        return None
    return window - 1 + chunk


def init_slot_cache(
    cfg: LlamaConfig, slots: int, chunk: int, dtype=jnp.float32, rolling: bool = True
) -> list[LayerCache]:
    """Per layer, a ``LayerCache`` of ``seq_len + chunk`` positions per slot, or of ``ring_length`` positions
    for a sliding-window layer (unless ``rolling`` is False: then every layer keeps the whole context and the
    windowed ones mask it, full attention's memory).

    Separate arrays (not one stacked array scanned over) so that a donated step updates them in place: a
    scan's outputs are new buffers, which made every step copy the whole cache. Head-major: a head's
    positions are contiguous, so attention is plain batched matrix products (position-major made XLA's CPU
    dots ~2x slower). Keys transposed: q·kᵀ multiplies k as stored; contracting its minor dim ran XLA's CPU
    dot at a third of the speed. Segments: a step attends over whole segments, arrays read where they lie;
    a span sliced out of one array was copied first (at ~7 GB/s: a quarter of a 16-row decoding step)."""
    kv, hd = cfg.num_kv_heads, cfg.resolved_head_dim
    caches = []
    for window in cfg.layer_windows:
        ring = ring_length(window, cfg.seq_len, chunk) if rolling else None
        bounds = segment_bounds(cfg.seq_len + chunk if ring is None else ring)
        lengths = [b - a for a, b in zip(bounds, bounds[1:])]
        k = [jnp.zeros((slots, kv, hd, n), dtype) for n in lengths]
        caches.append(LayerCache(k, [jnp.zeros((slots, kv, n, hd), dtype) for n in lengths], ring))
    return caches


def cache_positions(cache: list[LayerCache]) -> list[int]:
    """Positions per slot of each layer of a cache made by ``init_slot_cache``."""
    return [layer.positions for layer in cache]


def split_layers(params):
    """The trainer's stacked layer weights ([layers, ...] arrays) as one dict per layer: inside the step,
    slicing a layer out of the stack copied its weights on every call (a decoding step is memory-bound:
    reading each weight once is its whole cost). Gate and up concatenated into one matrix made a one-row
    step 7-9% slower (XLA's matrix-vector product over the wider matrix) and 4-16 rows no faster; q|k|v
    concatenated made 1-4 row steps ~5% slower (the split outputs are copied): the weights stay apart."""
    layers = params["layers"]
    if isinstance(layers, (list, tuple)):  # split already (another engine's params)
        return params
    count = jax.tree.leaves(layers)[0].shape[0]
    return {**params, "layers": [jax.tree.map(lambda x, i=i: x[i], layers) for i in range(count)]}


def sample_rows(logits: jax.Array, rows: SamplingRows) -> Sampled:
    """Next tokens for logits [rows, vocab], each row under its own temperature, top-k, top-p and key.

    Sorting the vocabulary (for top-k/top-p) and drawing (Gumbel noise over the vocabulary) cost more than
    a small model's decoding step on a CPU; each runs only when some row of the batch needs it."""
    logits = logits.astype(jnp.float32)
    vocab = logits.shape[-1]
    logp = jax.nn.log_softmax(logits, axis=-1)
    top_logprob, top_token = jax.lax.top_k(logp, min(TOP_LOGPROBS, vocab))
    greedy = jnp.argmax(logits, axis=-1).astype(jnp.int32)
    sampled = rows.temperature > 0
    scaled = logits / jnp.where(sampled, rows.temperature, 1.0)[:, None]

    def truncate(scaled):
        ordered = jnp.sort(scaled, axis=-1)[:, ::-1]  # descending
        k = jnp.where(rows.top_k > 0, jnp.minimum(rows.top_k, vocab), vocab)
        kth = jnp.take_along_axis(ordered, (k - 1)[:, None], axis=-1)
        # top-p: the smallest prefix of the sorted distribution whose mass reaches top_p (within the top-k)
        ordered = jnp.where(jnp.arange(vocab)[None, :] < k[:, None], ordered, -jnp.inf)
        probs = jax.nn.softmax(ordered, axis=-1)
        before = jnp.cumsum(probs, axis=-1) - probs
        keep = jnp.sum(before < rows.top_p[:, None], axis=-1)
        cutoff = jnp.take_along_axis(ordered, (jnp.maximum(keep, 1) - 1)[:, None], axis=-1)
        return jnp.where(scaled >= jnp.maximum(kth, cutoff), scaled, -jnp.inf)

    def draw(scaled):
        filtered = sampled & ((rows.top_k > 0) | (rows.top_p < 1))
        masked = jax.lax.cond(jnp.any(filtered), truncate, lambda x: x, scaled)
        keys = jax.vmap(lambda s, c: jax.random.fold_in(jax.random.key(s), c))(rows.seed, rows.count)
        drawn = jax.vmap(lambda key, row: jax.random.categorical(key, row))(keys, masked)
        return jnp.where(sampled, drawn, greedy).astype(jnp.int32)

    token = jax.lax.cond(jnp.any(sampled), draw, lambda _: greedy, scaled)
    logprob = jnp.take_along_axis(logp, token[:, None], axis=-1)[:, 0]
    return Sampled(token, logprob, top_logprob, top_token.astype(jnp.int32))


class PrefillOut(NamedTuple):
    target_logprob: jax.Array  # [chunk] log p(targets[i] | tokens[: i + 1])
    target_greedy: jax.Array  # [chunk] bool: targets[i] is the argmax there
    top_logprob: jax.Array  # [chunk, TOP_LOGPROBS]
    top_token: jax.Array  # [chunk, TOP_LOGPROBS]
    next: Sampled  # sampled from the logits at position valid - 1 (one row)


def _rope_at(cfg: LlamaConfig, positions: jax.Array):
    inv_freq = jnp.asarray(rope_frequencies(cfg), jnp.float32)
    angles = positions[:, None].astype(jnp.float32) * inv_freq[None, :]
    return jnp.cos(angles), jnp.sin(angles)  # [n, head_dim / 2]


def _scores(spec: str, q, k):
    """q·k in fp32 whatever the cache's dtype (a bf16 score would round a logit of 30 by up to 0.06). XLA:CPU
    has no batched bf16 product with an fp32 result, so there the operands are widened first."""
    if q.dtype != jnp.float32 and jax.default_backend() == "cpu":
        q, k = q.astype(jnp.float32), k.astype(jnp.float32)
    return jnp.einsum(spec, q, k, preferred_element_type=jnp.float32)


def _attention(cfg: LlamaConfig, q, keys: list, values: list, visible, query_axis: str):
    """Grouped-query attention of q [n, heads, hd] over the cache segments' keys [.., kv, hd, t_i] and values
    [.., kv, t_i, hd] (in position order) under visible [n, sum t_i]. ``query_axis`` "n" means each query
    has its own key rows (decoding: one query per slot); "" means all queries share one slot's keys
    (prefill)."""
    h, kv, hd = cfg.num_heads, cfg.num_kv_heads, cfg.resolved_head_dim
    q = q.reshape(q.shape[0], kv, h // kv, hd)
    scores = [_scores(f"ngqd,{query_axis}gdt->ngqt", q, k) for k in keys]
    scores = jnp.concatenate(scores, axis=-1) / np.sqrt(hd)
    scores = jnp.where(visible[:, None, None, :], scores, -jnp.inf)
    probs = jax.nn.softmax(scores, axis=-1).astype(values[0].dtype)
    out, start = 0, 0
    for v in values:
        length = v.shape[-2]
        out = out + jnp.einsum(f"ngqt,{query_axis}gtd->ngqd", probs[..., start : start + length], v)
        start += length
    return out.reshape(q.shape[0], h, hd)


def _block(cfg: LlamaConfig, layer, x, cos, sin, update):
    """One decoder layer for tokens x [n, embed]. ``update(q, k, v)`` stores the new keys/values in the
    cache and attends; it returns (attention output [n, heads, hd], the layer's updated cache)."""
    updated = []

    def attend(y):
        q, k, v = (t[0] for t in project_qkv(cfg, layer, y[None], cos, sin))
        attn, cache = update(q, k, v)
        updated.append(cache)
        return jnp.einsum("nhk,hkd->nd", attn, layer["wo"])

    x = residual(cfg, x, attend, layer["attn_norm"])
    # A MoE serves dropless: capacity limits are a training-time device (transformers never drops either).
    serving = dataclasses.replace(cfg, capacity_factor=None) if cfg.capacity_factor is not None else cfg
    x = residual(cfg, x, lambda y: feed_forward(serving, layer, y[None])[0][0], layer["mlp_norm"])
    return x, updated[0]


def _layers(cfg: LlamaConfig, params, cache, x, cos, sin, attend):
    """x through every layer. ``attend(layer_cache, window, q, k, v)`` stores a layer's new keys/values in its
    cache and attends (within the layer's sliding ``window`` of keys, if it has one); returns (x, the updated
    cache)."""
    new_cache = []
    for i, (layer, layer_cache) in enumerate(zip(params["layers"], cache)):
        update = functools.partial(attend, layer_cache, cfg.layer_window(i))
        x, layer_cache = _block(cfg, layer, x, cos, sin, update)
        new_cache.append(layer_cache)
    return x, new_cache


def visible_keys(positions, span: int, window: int | None):
    """[n, span] bool: which cached positions the query at ``positions[i]`` attends to: those <= it, and
    within ``window`` keys of it in a sliding-window layer whose cache keeps the whole context."""
    keys = jnp.arange(span)[None, :]
    visible = keys <= positions[:, None]
    return visible if window is None else visible & (keys > positions[:, None] - window)


def _view(cfg: LlamaConfig, layer_cache: LayerCache, window: int | None, positions, span: int):
    """The entries a layer attends over (its first ``span``; all of a ring once positions wrap past it) and
    which of them the query at ``positions[i]`` sees ([n, span] bool). Ring entry j holds the latest position
    p <= the query with p = j mod ring, ``distance`` = query - p behind it: seen if p exists (distance <=
    query) and is inside the window. A row at or past ``seq_len`` (a slot that is not decoding, at the scratch
    position) sees every entry: its output is thrown away, and a row that saw nothing would be NaN."""
    ring = layer_cache.ring
    if ring is None:
        visible = visible_keys(positions, span, window)
    else:
        span = min(span, ring)
        distance = (positions[:, None] - jnp.arange(span)[None, :]) % ring
        visible = (distance <= positions[:, None]) & (distance < window)
    if window is None:
        return span, visible  # the scratch position is the cache's last: every entry is <= it
    return span, visible | (positions >= cfg.seq_len)[:, None]


def _check_chunk(layer_cache: LayerCache, window: int | None, chunk: int) -> None:
    """A ring holds ``window - 1`` positions before a step's first and the step's own: a chunk longer than it
    was made for (``init_slot_cache``'s ``chunk``) would overwrite keys its own queries still see."""
    if layer_cache.ring is not None and chunk > layer_cache.ring - window + 1:
        raise ValueError(
            f"a chunk of {chunk} tokens does not fit a ring of {layer_cache.ring} positions for window {window} "
            f"(made for chunks of at most {layer_cache.ring - window + 1}: init_slot_cache's chunk)"
        )


def _store(cfg: LlamaConfig, layer_cache: LayerCache, rows, positions, k, v) -> LayerCache:
    """``_write`` at the positions' entries: in a ring p mod its length, and nothing at or past ``seq_len``
    (the scratch position and padding, which in a ring would land on entries other slots' queries read)."""
    if layer_cache.ring is not None:
        positions = jnp.where(positions < cfg.seq_len, positions % layer_cache.ring, layer_cache.positions)
    return _write(layer_cache, rows, positions, k, v)


def decode_rows(needed: int, slots: int) -> int:
    """Slots a decoding step computes: a power of four covering the highest busy slot (requests take the
    lowest free slot), at most all of them: one client does not pay for sixteen rows."""
    size = 1
    while size < needed:
        size *= 4
    return min(size, slots)


def attention_span(needed: int, cache_len: int) -> int:
    """Cache positions a step attends over: a power of two >= 128 covering ``needed``, at most the cache.
    Reading every slot's whole cache made attention most of a step's time on short requests."""
    size = 128
    while size < needed:
        size *= 2
    return min(size, cache_len)


def _logits(cfg: LlamaConfig, params, x):
    x = rms_norm(x, params["final_norm"], cfg.norm_eps)
    return jnp.einsum("nd,dv->nv", x, output_projection(cfg, params), preferred_element_type=jnp.float32)


def _write(layer_cache: LayerCache, rows, positions, k, v) -> LayerCache:
    """Store k[i], v[i] ([n, kv, hd]) at entry ``positions[i]`` of slot ``rows[i]`` (or of the one slot
    ``rows``), each in the segment that holds that entry; entries past the end are dropped."""
    out, start = {"k": [], "v": []}, 0
    for keys, values in zip(layer_cache.k, layer_cache.v):
        length = values.shape[2]
        inside = (positions >= start) & (positions < start + length)
        at = jnp.where(inside, positions - start, length)  # past the end: dropped
        out["k"].append(keys.at[rows, :, :, at].set(k.astype(keys.dtype), mode="drop"))
        out["v"].append(values.at[rows, :, at].set(v.astype(values.dtype), mode="drop"))
        start += length
    return dataclasses.replace(layer_cache, **out)


def _segments(layer_cache, span: int):
    """How many of the cache's segments make up the first ``span`` positions."""
    covered, count = 0, 0
    for values in layer_cache.v:
        if covered >= span:
            break
        covered, count = covered + values.shape[2], count + 1
    if covered != span:
        raise ValueError(f"span {span} is not a whole number of cache segments")
    return count


def _slot_span(layer_cache, slot, span: int):
    """Slot ``slot``'s keys and values over the first ``span`` positions, segment by segment."""
    count = _segments(layer_cache, span)
    keys = [jax.lax.dynamic_index_in_dim(k, slot, keepdims=False) for k in layer_cache.k[:count]]
    values = [jax.lax.dynamic_index_in_dim(v, slot, keepdims=False) for v in layer_cache.v[:count]]
    return keys, values


def _rows_span(layer_cache, rows: int, span: int):
    """The first ``rows`` slots' keys and values over the first ``span`` positions, segment by segment."""
    count = _segments(layer_cache, span)
    return [k[:rows] for k in layer_cache.k[:count]], [v[:rows] for v in layer_cache.v[:count]]


def _chunk_logprobs(cfg: LlamaConfig, params, x, targets):
    """Per position of a chunk: log p(targets[i]), whether it is the argmax, and the top alternatives."""
    logits = _logits(cfg, params, x)
    logp = jax.nn.log_softmax(logits, axis=-1)
    target_logprob = jnp.take_along_axis(logp, targets[:, None], axis=-1)[:, 0]
    top_logprob, top_token = jax.lax.top_k(logp, min(TOP_LOGPROBS, logits.shape[-1]))
    # top_k puts the lowest index first among equals, so its first token is argmax's: no second reduction
    target_greedy = top_token[:, 0] == targets
    return target_logprob, target_greedy, top_logprob, top_token.astype(jnp.int32)


def _chunk_outputs(cfg: LlamaConfig, params, x, targets, valid, scored) -> tuple[tuple, jax.Array]:
    """The chunk's prompt log-probabilities (zeros unless ``scored``: the lm_head over every position and a
    top-k over the vocabulary are a fifth of a chunk's time) and its last valid position's hidden state."""
    chunk = x.shape[0]
    skipped = (
        jnp.zeros(chunk, jnp.float32),
        jnp.zeros(chunk, bool),
        jnp.zeros((chunk, TOP_LOGPROBS), jnp.float32),
        jnp.zeros((chunk, TOP_LOGPROBS), jnp.int32),
    )
    scores = jax.lax.cond(scored, lambda x: _chunk_logprobs(cfg, params, x, targets), lambda x: skipped, x)
    return scores, jax.lax.dynamic_slice_in_dim(x, valid - 1, 1)


@functools.partial(jax.jit, static_argnums=(0, 10), donate_argnums=2)
def prefill_chunk(
    cfg: LlamaConfig, params, cache, slot, tokens, targets, start, valid, scored, row: SamplingRows, span: int
):
    """Feed ``tokens[:valid]`` at positions ``start...`` into cache slot ``slot``: queries attend to the
    slot's cached positions <= their own (all within the first ``span``). Returns a token sampled from the
    last valid position and, when ``scored``, the log-probabilities of ``targets`` (the next prompt tokens,
    for echo/prompt logprobs)."""
    chunk = tokens.shape[0]
    positions = start + jnp.arange(chunk)
    cos, sin = _rope_at(cfg, positions)
    x = params["embed"][tokens]  # [chunk, embed]

    def attend(layer_cache, window, q, k, v):
        _check_chunk(layer_cache, window, chunk)
        layer_cache = _store(cfg, layer_cache, slot, positions, k, v)
        layer_span, visible = _view(cfg, layer_cache, window, positions, span)
        keys, values = _slot_span(layer_cache, slot, layer_span)
        return _attention(cfg, q, keys, values, visible, ""), layer_cache

    x, new_cache = _layers(cfg, params, cache, x, cos, sin, attend)
    scores, last = _chunk_outputs(cfg, params, x, targets, valid, scored)
    return PrefillOut(*scores, sample_rows(_logits(cfg, params, last), row)), new_cache


def packed_rows(slots: int) -> int:
    """How many prompts a packed prefill chunk reads at most (rows of its sampled output): 16, or every slot
    if there are fewer. One program per engine (its ``prefill_chunk``)."""
    return min(slots, 16)


@functools.partial(jax.jit, static_argnums=(0,), donate_argnums=2)
def prefill_packed(cfg: LlamaConfig, params, cache, slots, tokens, segments, positions, last, rows: SamplingRows):
    """Whole prompts of several slots in one chunk, each from position 0 (a batch of short prompts, as RL
    rollouts and evals submit them, is read in a few steps instead of one step per prompt). Token i belongs
    to prompt ``segments[i]`` (padding: ``len(slots)``, at a position past the cache, so nothing is written)
    and sits at ``positions[i]`` of slot ``slots[segments[i]]``. A prompt's queries attend to its own earlier
    tokens only, all in the chunk (nothing of the slot is cached yet), as ``prefill_chunk`` would over the
    slot's cache; its keys and values are written there. Returns what each prompt samples after its last
    token (``last[j]``, row j of ``rows``; unused rows are greedy fillers) and the updated cache."""
    cos, sin = _rope_at(cfg, positions)
    x = params["embed"][tokens]
    owner = jnp.concatenate([slots, jnp.zeros((1,), slots.dtype)])[segments]  # padding: slot 0, dropped below
    same = segments[:, None] == segments[None, :]

    def attend(layer_cache, window, q, k, v):
        _check_chunk(layer_cache, window, tokens.shape[0])
        layer_cache = _store(cfg, layer_cache, owner, positions, k, v)
        dtype = layer_cache.v[0].dtype  # attend over what the cache stores, as a chunk of the slot would
        k, v = k.astype(dtype), v.astype(dtype)
        visible = same & (positions[None, :] <= positions[:, None])
        if window is not None:
            visible = visible & (positions[None, :] > positions[:, None] - window)
        return _attention(cfg, q, [k.transpose(1, 2, 0)], [v.transpose(1, 0, 2)], visible, ""), layer_cache

    x, new_cache = _layers(cfg, params, cache, x, cos, sin, attend)
    return sample_rows(_logits(cfg, params, x[last]), rows), new_cache


@functools.partial(jax.jit, static_argnums=(0, 6), donate_argnums=2)
def decode_slots(cfg: LlamaConfig, params, cache, tokens, positions, rows: SamplingRows, span: int):
    """One token for each of the first ``len(tokens)`` slots: ``tokens[i]`` sits at ``positions[i]`` of slot i
    (slots not decoding pass the scratch position, the cache's last); decoding slots' positions are below
    ``span``. Returns what each row samples next and the updated cache."""
    slots = tokens.shape[0]
    cos, sin = _rope_at(cfg, positions)
    x = params["embed"][tokens]

    def attend(layer_cache, window, q, k, v):
        layer_cache = _store(cfg, layer_cache, jnp.arange(slots), positions, k, v)
        layer_span, visible = _view(cfg, layer_cache, window, positions, span)
        keys, values = _rows_span(layer_cache, slots, layer_span)
        return _attention(cfg, q, keys, values, visible, "n"), layer_cache

    x, new_cache = _layers(cfg, params, cache, x, cos, sin, attend)
    return sample_rows(_logits(cfg, params, x), rows), new_cache


@functools.partial(jax.jit, static_argnums=(0, 13), donate_argnums=2)
def mixed_step(
    cfg: LlamaConfig,
    params,
    cache,
    slot,
    tokens,
    targets,
    start,
    valid,
    scored,
    row: SamplingRows,
    decode_tokens,
    decode_positions,
    decode_rows: SamplingRows,
    span: int,
):
    """``prefill_chunk`` and ``decode_slots`` in one program: the chunk's tokens and the decoding rows go
    through each weight matrix together, so the weights are read once for both (a small decoding batch is
    bound by reading them) and the matrix products are taller. Slot ``slot`` is not among the decoding rows
    (its row passes the scratch position). Returns the chunk's prompt scores (``PrefillOut``'s first four
    fields), one ``Sampled`` whose row 0 is the prompt's next token and row 1 + i decoding row i's, and the
    cache."""
    chunk, slots = tokens.shape[0], decode_tokens.shape[0]
    positions = jnp.concatenate([start + jnp.arange(chunk), decode_positions])
    cos, sin = _rope_at(cfg, positions)
    x = params["embed"][jnp.concatenate([tokens, decode_tokens])]

    def attend(layer_cache, window, q, k, v):
        _check_chunk(layer_cache, window, chunk)
        layer_cache = _store(cfg, layer_cache, slot, positions[:chunk], k[:chunk], v[:chunk])
        layer_cache = _store(cfg, layer_cache, jnp.arange(slots), decode_positions, k[chunk:], v[chunk:])
        layer_span, visible = _view(cfg, layer_cache, window, positions, span)  # [chunk + slots, layer_span]
        keys, values = _slot_span(layer_cache, slot, layer_span)
        prefill = _attention(cfg, q[:chunk], keys, values, visible[:chunk], "")
        keys, values = _rows_span(layer_cache, slots, layer_span)
        decode = _attention(cfg, q[chunk:], keys, values, visible[chunk:], "n")
        return jnp.concatenate([prefill, decode]), layer_cache

    x, new_cache = _layers(cfg, params, cache, x, cos, sin, attend)
    scores, last = _chunk_outputs(cfg, params, x[:chunk], targets, valid, scored)
    # one Sampled for both: slicing top_k's outputs made XLA replace its top-k by a sort of the vocabulary
    sampled = sample_rows(_logits(cfg, params, jnp.concatenate([last, x[chunk:]])), _concat_rows(row, decode_rows))
    return scores, sampled, new_cache


def _concat_rows(a: SamplingRows, b: SamplingRows) -> SamplingRows:
    return SamplingRows(*(jnp.concatenate([x, y]) for x, y in zip(a, b)))
