"""nanoGPT's CPU Shakespeare, in miniature through the executor: the real text, nanoGPT's split and vocabulary,
a model sized like nanoGPT's, training that learns, samples drawn by the engine, bits-per-byte."""

import json
from pathlib import Path

import pytest

from experiments import shakespeare_char
from marin.execution import Executor
from marin.tokenize import load_tokenizer

ROOT = Path(__file__).resolve().parents[2]


def nanogpt_param_count(n_layer=4, n_embd=128, vocab=65, block=64) -> int:
    """nanoGPT's GPT with bias=False (its train.py default): LayerNorms, c_attn + c_proj, c_fc + c_proj per
    block, tied wte, wpe and ln_f."""
    per_block = 2 * n_embd + n_embd * 3 * n_embd + n_embd * n_embd + 2 * n_embd * 4 * n_embd
    return n_layer * per_block + vocab * n_embd + block * n_embd + n_embd


def test_the_model_matches_nanogpts_baby_gpt_in_size_and_shape():
    model, train = shakespeare_char.baby_llama(), shakespeare_char.TRAIN
    assert abs(model.param_count / nanogpt_param_count() - 1) < 0.01  # within 5% asked; 0.5% measured
    assert (model.num_layers, model.num_heads, model.hidden_dim, model.seq_len) == (4, 4, 128, 64)
    assert (train.batch_size, train.num_train_steps, train.learning_rate, train.beta2) == (12, 2000, 1e-3, 0.99)
    assert (train.warmup, train.min_lr_ratio, train.schedule, train.max_eval_sequences) == (100, 0.1, "cosine", 240)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_tiny_run_learns_shakespeare_samples_and_measures_bits_per_byte(tmp_path, ray_address):
    train = shakespeare_char.TRAIN.__class__(**{**shakespeare_char.TRAIN.__dict__, "num_train_steps": 150})
    steps = shakespeare_char.build(train)
    caller = str(ROOT / "experiments" / "shakespeare_char.py")
    result = Executor(prefix=str(tmp_path), caller_file=caller).run([steps["evaluation"], steps["samples"]])
    paths = {p.name: Path(p.output_path) for p in result.plan.steps}

    tokenizer = load_tokenizer(str(paths[steps["tokenizer"].name]))
    assert tokenizer.get_vocab_size() == 66 and tokenizer.token_to_id("<|endoftext|>") == 65
    metrics = [
        json.loads(line) for line in (paths[steps["checkpoint"].name] / "metrics.jsonl").read_text().splitlines()
    ]
    losses = [m["train/loss"] for m in metrics if "train/loss" in m]
    assert losses[0] == pytest.approx(4.19, abs=0.15)  # ln(66) = 4.19: a fresh model guesses uniformly
    assert losses[-1] < 3.0  # 150 iterations: character frequencies and more
    evals = [m for m in metrics if "eval/shakespeare/loss" in m]
    assert [m["step"] for m in evals] == [150] and evals[0]["eval/shakespeare/loss"] < 3.0

    results = json.loads((paths[steps["evaluation"].name] / "results.json").read_text())["validation"]["shakespeare"]
    assert results["bytes"] == 111_540 and results["bits_per_byte"] < 3.0 / 0.6931
    samples = [json.loads(line) for line in (paths[steps["samples"].name] / "samples.jsonl").read_text().splitlines()]
    assert [s["prompt"] for s in samples] == ["\n", "\n", "ROMEO:", "ROMEO:", "First Citizen:", "First Citizen:"]
    assert [s["seed"] for s in samples] == list(range(6)) and len({s["text"] for s in samples}) == 6
    assert all(len(s["text"]) == s["tokens"] and s["finish_reason"] == "length" for s in samples)  # one char a token
