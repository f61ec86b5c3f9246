"""SFT loss: a stored loss mask (assistant tokens) is the only thing the one jitted step counts."""

import jax
import numpy as np

from marin.trainer.data import ArrayTokenSource, DataConfig, SyntheticSourceConfig, TrainBatches
from marin.trainer.model import param_axes
from marin.trainer.model.llama import forward
from marin.trainer.optim import OptimizerConfig
from marin.trainer.step import PrecisionPolicy, StepConfig, init_state, make_train_step

FP32 = PrecisionPolicy(compute_dtype="float32")


def masked_source(vocab: int, num_docs: int, seed: int, masked: bool = True) -> ArrayTokenSource:
    """Documents of 10-60 tokens; in each, a random suffix (the "assistant" part) is masked."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(10, 60, size=num_docs)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    tokens = rng.integers(1, vocab, size=int(lengths.sum())).astype(np.int32)
    mask = np.zeros(tokens.size, np.uint8)
    if masked:
        for s, n in zip(starts, lengths):
            mask[s + rng.integers(1, n - 1) : s + n - 1] = 1  # never the first token nor the closing EOS
    tokens[starts + lengths - 1] = 0
    return ArrayTokenSource(tokens, starts.astype(np.int64), mask=mask)


def batches_of(source, cfg, batch_size=8):
    placeholder = DataConfig(train={"s": SyntheticSourceConfig(vocab_size=cfg.vocab_size, num_tokens=1000)})
    return TrainBatches({"s": source}, placeholder, seq_len=cfg.seq_len, batch_size=batch_size)


def make_step(cfg, num_microbatches=2):
    opt = OptimizerConfig(learning_rate=1e-2, schedule="constant", warmup=0)
    tx = opt.build(10, param_axes(cfg))
    state = jax.jit(lambda key: init_state(cfg, tx, key, ema=False, policy=FP32))(jax.random.PRNGKey(0))
    step = make_train_step(cfg, tx, opt.lr_schedule(10), StepConfig(num_microbatches=num_microbatches, precision=FP32))
    return state, step


def test_loss_is_the_mean_over_masked_targets_only(tiny):
    source = masked_source(tiny.vocab_size, 400, seed=0)
    batches = batches_of(source, tiny)
    batch = batches.batch(3)
    state, step = make_step(tiny)
    params = jax.device_get(state.params)
    # By hand: each row's window, each target's global position, its stored mask and its document.
    _, index = batches.locate(3)
    doc_of = np.searchsorted(source.doc_starts(0, source.num_tokens), np.arange(source.num_tokens), side="right")
    stored = source.read_mask(0, source.num_tokens)
    logits = np.asarray(forward(tiny, params, batch["input_ids"], batch["segment_ids"]), np.float64)
    logp = (
        logits
        - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True))
        - logits.max(-1, keepdims=True)
    )
    nll, counted = [], 0
    for row, seq in enumerate(index):
        for p in range(tiny.seq_len):
            g = int(seq) * tiny.seq_len + 1 + p  # global position of target p
            if stored[g] and doc_of[g] == doc_of[g - 1]:
                nll.append(-logp[row, p, batch["targets"][row, p]])
                counted += 1
    assert 0 < counted < batch["loss_mask"].size // 2  # prompts (unmasked) really are left out
    assert counted == int(batch["loss_mask"].sum())
    _, metrics = step(state, batch)
    np.testing.assert_allclose(float(metrics["loss"]), np.mean(nll), rtol=2e-5)
    assert float(metrics["tokens"]) == counted


def test_all_false_mask_gives_zero_gradients_not_nan(tiny):
    source = masked_source(tiny.vocab_size, 400, seed=1, masked=False)
    batch = batches_of(source, tiny).batch(0)
    assert batch["loss_mask"].sum() == 0
    state, step = make_step(tiny)
    state, metrics = step(state, batch)
    metrics = jax.device_get(metrics)
    assert float(metrics["loss"]) == 0.0 and float(metrics["grad_norm"]) == 0.0 and float(metrics["tokens"]) == 0.0
    assert all(np.all(np.isfinite(leaf)) for leaf in jax.tree.leaves(jax.device_get(state.params)))


def test_mask_changes_nothing_but_the_loss_mask(tiny):
    """Same tokens with and without a stored mask: identical inputs, targets and segments (the same compiled
    step runs), loss masks differing exactly on the unmasked (prompt) targets."""
    masked = masked_source(tiny.vocab_size, 400, seed=2)
    plain = ArrayTokenSource(masked.read(0, masked.num_tokens), masked.doc_starts(0, masked.num_tokens))
    a, b = batches_of(masked, tiny).batch(5), batches_of(plain, tiny).batch(5)
    for key in ("input_ids", "targets", "segment_ids"):
        np.testing.assert_array_equal(a[key], b[key])
    assert a["loss_mask"].dtype == b["loss_mask"].dtype == np.float32
    assert np.all(a["loss_mask"] <= b["loss_mask"]) and a["loss_mask"].sum() < b["loss_mask"].sum()


def test_hand_checked_packing_of_a_conversation_across_a_sequence_boundary():
    from marin.trainer.data.loader import assemble, pack_window

    # conversation A = [B u1 a1 a2 a3 E], B = [B u2 a4 E]; a* are assistant tokens (stored mask 1)
    B, U1, A1, A2, A3, E, U2, A4 = 1, 11, 21, 22, 23, 0, 12, 24
    tokens = np.array([B, U1, A1, A2, A3, E, B, U2, A4, E], np.int32)
    mask = np.array([0, 0, 1, 1, 1, 0, 0, 0, 1, 0], np.uint8)
    source = ArrayTokenSource(tokens, np.array([0, 6]), mask=mask)
    windows = [assemble([pack_window(source, i, 3)]) for i in range(3)]
    # window 0: inputs B u1 a1 -> targets u1 a1 a2: the two assistant targets count
    assert windows[0]["targets"][0].tolist() == [U1, A1, A2] and windows[0]["loss_mask"][0].tolist() == [0, 1, 1]
    # window 1: A continues (a2 a3 E) and B starts as the last target: a3 counts, E and B's first token do not
    assert windows[1]["input_ids"][0].tolist() == [A2, A3, E] and windows[1]["targets"][0].tolist() == [A3, E, B]
    assert windows[1]["loss_mask"][0].tolist() == [1, 0, 0] and windows[1]["segment_ids"][0].tolist() == [0, 0, 0]
    # window 2: B alone: only a4 counts
    assert windows[2]["targets"][0].tolist() == [U2, A4, E] and windows[2]["loss_mask"][0].tolist() == [0, 1, 0]
