"""Evaluation numerics against hand computations on a known tiny model (a bigram table over bytes)."""

import dataclasses
import json
import math
import random

import jax.numpy as jnp
import numpy as np
import pytest

from marin.evaluation import (
    MultipleChoiceTask,
    Scorer,
    build_prompts,
    document_windows,
    evaluate_documents,
    load_task_yaml,
    rate,
    score_task,
    split_context_continuation,
)

EOS = 256
VOCAB = 257


def encode(text):
    return list(text.encode("utf-8"))


def bigram_model(table):
    table = jnp.asarray(table, jnp.float32)
    return lambda tokens: table[tokens]  # logits of the next token depend only on the current one


def log_softmax(row):
    row = np.asarray(row, np.float64)
    return row - np.log(np.exp(row - row.max()).sum()) - row.max()


@pytest.fixture(scope="module")
def table():
    return np.random.default_rng(0).normal(size=(VOCAB, VOCAB)) * 2


def test_loglikelihood_equals_hand_computation(table):
    scorer = Scorer(bigram_model(table), batch_size=3, max_len=64)
    requests = [([EOS, *encode("the cat")], encode(" sat")), ([EOS], encode("a")), ([5, 6, 7], [8, 9, 10, 11])]
    for (context, continuation), (got, greedy) in zip(requests, scorer.loglikelihood(requests)):
        row = context + continuation
        expected = sum(log_softmax(table[row[i - 1]])[row[i]] for i in range(len(context), len(row)))
        assert got == pytest.approx(expected, abs=1e-4)
        argmax = all(np.argmax(table[row[i - 1]]) == row[i] for i in range(len(context), len(row)))
        assert greedy == argmax


def test_padding_and_batching_do_not_change_scores(table):
    rng = random.Random(1)
    requests = [
        (
            [EOS] + [rng.randrange(256) for _ in range(rng.randint(1, 40))],
            [rng.randrange(256) for _ in range(rng.randint(1, 9))],
        )
        for _ in range(23)
    ]
    a = Scorer(bigram_model(table), batch_size=1, max_len=64).loglikelihood(requests)
    b = Scorer(bigram_model(table), batch_size=8, max_len=64).loglikelihood(requests)
    np.testing.assert_allclose([x for x, _ in a], [x for x, _ in b], atol=1e-4)


def test_bits_per_byte_matches_its_definition(table):
    docs = ["hello world", "ünïcödé text", "x" * 150]  # the last spans several windows of max_len 64
    scorer = Scorer(bigram_model(table), batch_size=4, max_len=64)
    result = evaluate_documents(scorer, docs, encode, EOS)
    nll, n_tokens = 0.0, 0
    for doc in docs:
        full = [EOS, *encode(doc), EOS]
        nll -= sum(log_softmax(table[full[i - 1]])[full[i]] for i in range(1, len(full)))
        n_tokens += len(full) - 1
    n_bytes = sum(len(d.encode()) for d in docs)
    assert result["tokens"] == n_tokens and result["bytes"] == n_bytes
    assert result["bits_per_byte"] == pytest.approx(nll / math.log(2) / n_bytes, rel=1e-5)
    assert result["perplexity"] == pytest.approx(math.exp(nll / n_tokens), rel=1e-5)


def test_token_nll_skips_the_argmax_and_scores_as_loglikelihood_does(table):
    """Perplexity needs no argmax, which XLA:CPU runs as a slow variadic (value, index) reduction: the
    token_nll program has none, the loglikelihood program has it, and both give the same log-probabilities."""
    scorer = Scorer(bigram_model(table), batch_size=2, max_len=16)
    tokens = np.zeros((2, 16), np.int32)

    def has_argmax(with_greedy):
        text = scorer._target_logprobs.lower(None, tokens, tokens, with_greedy=with_greedy).as_text()
        return ":2 = stablehlo.reduce" in text  # a reduction of (value, index) pairs

    assert has_argmax(True) and not has_argmax(False)
    rows = [[EOS, *encode("the cat sat")], [EOS, *encode("a")]]
    nll = scorer.token_nll(rows)
    for row, got in zip(rows, nll):
        expected = [-log_softmax(table[row[i - 1]])[row[i]] for i in range(1, len(row))]
        np.testing.assert_allclose(got, expected, atol=1e-4)
        context, continuation = row[:1], row[1:]
        [(total, _)] = scorer.loglikelihood([(context, continuation)])
        assert -got.sum() == pytest.approx(total, abs=1e-4)


def test_long_document_windows_cover_every_target_once():
    tokens = list(range(1, 300))
    windows = document_windows(tokens, EOS, max_len=64)
    full = [EOS, *tokens, EOS]
    covered = []
    for row, new in windows:
        assert len(row) <= 65
        start = next(i for i in range(len(full)) if full[i : i + len(row)] == row)
        covered += list(range(start + len(row) - new, start + len(row)))
    assert covered == list(range(1, len(full)))


def planted_task(tmp_path, n=400):
    """Context ends with a letter; the gold answer is the letter after it in a fixed shuffle."""
    rng = random.Random(7)
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    successor = dict(zip(letters, rng.sample(letters, len(letters))))
    items = []
    for _ in range(n):
        key = rng.choice(letters)
        wrong = rng.sample([c for c in letters if c != successor[key]], 3)
        choices = wrong + [successor[key]]
        rng.shuffle(choices)
        items.append(
            {
                "context": f"the letter {key}",
                "choices": [f" {c}" for c in choices],
                "gold": choices.index(successor[key]),
            }
        )
    path = tmp_path / "planted.jsonl"
    path.write_text("".join(json.dumps(i) + "\n" for i in items))
    return path, successor


def test_planted_task_oracle_scores_one_and_random_model_scores_chance(tmp_path):
    path, successor = planted_task(tmp_path)
    (tmp_path / "planted.yaml").write_text("name: planted\npath: planted.jsonl\nnum_fewshot: 0\n")
    task = load_task_yaml(str(tmp_path / "planted.yaml"))
    result_oracle = score_task(task, Scorer(_successor_model(successor), batch_size=32, max_len=64), encode, EOS)
    assert result_oracle["acc"]["value"] == 1.0 and result_oracle["acc_norm"]["value"] == 1.0
    random_table = np.random.default_rng(3).normal(size=(VOCAB, VOCAB))
    result_random = score_task(task, Scorer(bigram_model(random_table), batch_size=32, max_len=64), encode, EOS)
    n, p = result_random["items"], result_random["chance"]
    assert p == 0.25
    # 99.9% two-sided binomial band around chance (|z| < 3.29): a random model is not better than chance.
    assert abs(result_random["acc"]["value"] - p) < 3.29 * math.sqrt(p * (1 - p) / n)
    low, high = result_random["acc"]["ci95"]
    assert low < result_random["acc"]["value"] < high


def _successor_model(successor):
    """A model that knows the rule: it tracks the key letter through the space with a 2-token lookback."""

    def forward(tokens):
        prev = jnp.concatenate([jnp.zeros_like(tokens[:, :1]), tokens[:, :-1]], axis=1)
        logits = jnp.zeros(tokens.shape + (VOCAB,))
        logits = logits.at[..., ord(" ")].set(1.0)
        table = np.zeros((VOCAB, VOCAB), np.float32)
        for key, nxt in successor.items():
            table[ord(key), ord(nxt)] = 20.0
        # at a space, predict the successor of the letter before the space
        boost = jnp.asarray(table)[prev] * (tokens == ord(" "))[..., None]
        return logits + boost

    return forward


def test_fewshot_prompts_are_deterministic_and_exclude_the_item(tmp_path):
    items = [{"context": f"item {i} is", "choices": [" yes", " no"], "gold": i % 2} for i in range(20)]
    path = tmp_path / "unique.jsonl"
    path.write_text("".join(json.dumps(i) + "\n" for i in items))
    task = MultipleChoiceTask(name="p", path=str(path), num_fewshot=3, fewshot_seed=5)
    a, b = build_prompts(task, items), build_prompts(task, items)
    assert a == b
    other_seed = build_prompts(dataclasses.replace(task, fewshot_seed=6), items)
    assert a != other_seed
    for prompt, item in zip(a, items):
        *shots, last = prompt.split("\n\n")
        assert last == item["context"] and len(shots) == 3
        assert all(not shot.startswith(item["context"]) for shot in shots)
        assert all(shot in {it["context"] + it["choices"][it["gold"]] for it in items} for shot in shots)


def test_context_continuation_split_moves_trailing_space():
    ctx, cont = split_context_continuation(encode, "Question: 2+2 = ", "4")
    assert bytes(ctx).decode() == "Question: 2+2 =" and bytes(cont).decode() == " 4"


def test_rate_interval():
    stats = rate([True] * 30 + [False] * 70)
    assert stats["value"] == 0.3 and stats["ci95"][0] < 0.3 < stats["ci95"][1]
    assert stats["stderr"] == pytest.approx(math.sqrt(0.3 * 0.7 / 99))
