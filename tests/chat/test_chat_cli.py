"""The chat CLI on a tiny SFT run, and the HF export of that run: same template, same greedy replies."""

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from marin.chat import ChatTokenizer
from marin.inference import SamplingParams, export_hf, load_model
from marin.inference.chat import ChatSession, chat_tokenizer_dir
from marin.trainer import (
    CheckpointConfig,
    DataConfig,
    OptimizerConfig,
    SyntheticSourceConfig,
    TrackerConfig,
    TrainerConfig,
    TrainLmConfig,
    train_lm,
)
from marin.trainer.data import TokenCacheSourceConfig
from marin.trainer.model import LlamaConfig
from marin.trainer.sft import TrainSftConfig, train_sft
from tests.chat.conftest import CONVERSATIONS

ROOT = Path(__file__).resolve().parents[2]
MODEL = LlamaConfig(vocab_size=512, hidden_dim=32, mlp_dim=64, num_layers=2, num_heads=4, num_kv_heads=2, seq_len=64)


@pytest.fixture(scope="module")
def sft_run(tmp_path_factory, sft_dir):
    root = tmp_path_factory.mktemp("run")
    trainer = TrainerConfig(
        num_train_steps=3,
        batch_size=4,
        log_every=1,
        checkpoint=CheckpointConfig(save_interval_minutes=None),
        tracker=TrackerConfig(wandb=False, progress_bar=False),
    )
    train_lm(
        TrainLmConfig(
            output_path=str(root / "base"),
            model=MODEL,
            trainer=trainer,
            data=DataConfig(train={"syn": SyntheticSourceConfig(vocab_size=512, num_tokens=10_000)}),
        )
    )
    train_sft(
        TrainSftConfig(
            output_path=str(root / "sft"),
            model=MODEL,
            trainer=trainer,
            initialize_from=str(root / "base"),
            optimizer=OptimizerConfig(learning_rate=1e-2, schedule="constant", warmup=0),
            data=DataConfig(train={"chat": TokenCacheSourceConfig(path=str(sft_dir / "train"))}),
        )
    )
    return root / "sft"


def _cli(*args, stdin=None):
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    return subprocess.run(
        [sys.executable, "-m", "marin.inference.chat", *args],
        cwd=ROOT,
        env=env,
        input=stdin,
        capture_output=True,
        check=False,
        text=True,
        timeout=300,
    )


def _session(run, sft_dir, max_new_tokens=8):
    chat = ChatTokenizer.load(str(sft_dir / "tokenizer"))
    cfg, params, _ = load_model(str(run))
    sampling = SamplingParams(max_tokens=max_new_tokens, temperature=0.0)
    return ChatSession(cfg, jax.device_put(params), chat, sampling), chat, cfg, params


def test_the_run_records_its_chat_tokenizer(sft_run, sft_dir):
    assert chat_tokenizer_dir(str(sft_run), None) == str(sft_dir / "tokenizer")
    assert json.loads((sft_run / "sft.json").read_text())["num_train_steps"] == 3


@pytest.mark.slow  # two CLI processes (JAX import and compile each)
def test_cli_replies_per_turn_from_arguments_and_from_stdin(sft_run, sft_dir):
    session = _session(sft_run, sft_dir)[0]
    expected = [session.reply("hi"), session.reply("2+2?")]
    out = _cli("--checkpoint", str(sft_run), "--message", "hi", "--message", "2+2?", "--max_new_tokens", "8")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == expected
    piped = _cli("--checkpoint", str(sft_run), "--max_new_tokens", "8", stdin="hi\n\n2+2?\n")
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout.splitlines() == expected


def test_session_keeps_history_and_drops_the_oldest_turns_when_full(sft_run, sft_dir):
    session, chat, *_ = _session(sft_run, sft_dir, max_new_tokens=16)  # leaves 48 tokens of context
    session.system = "Be terse."
    session.reset()
    for text in ("What is 12 plus 7?", "Who had a red ball?", "And the dog?"):
        session.reply(text)
        assert len(chat.encode_prompt(session.messages[:-1])) <= 48  # the prompt the reply was generated from
    assert session.messages[0] == {"role": "system", "content": "Be terse."}
    assert session.messages[-2]["content"] == "And the dog?" and session.messages[-1]["role"] == "assistant"
    assert all(m["content"] != "What is 12 plus 7?" for m in session.messages)  # dropped to fit


@pytest.mark.slow  # CPU torch + transformers
def test_export_carries_the_template_and_generates_like_ours(sft_run, sft_dir, tmp_path):
    torch = pytest.importorskip("torch", reason="needs CPU torch (the export-test extra)")
    transformers = pytest.importorskip("transformers", reason="needs transformers (the export-test extra)")
    session, chat, cfg, params = _session(sft_run, sft_dir, max_new_tokens=12)
    export_hf(cfg, params, str(tmp_path / "hf"), tokenizer=str(sft_dir / "tokenizer"))
    assert chat_tokenizer_dir(str(tmp_path / "hf"), None) == str(tmp_path / "hf")
    hf_tok = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    model = transformers.LlamaForCausalLM.from_pretrained(str(tmp_path / "hf"), torch_dtype=torch.float32).eval()
    assert model.config.eos_token_id == chat.eot_id and hf_tok.eos_token == "<|eot_id|>"
    for conversation in CONVERSATIONS:
        out = hf_tok.apply_chat_template(conversation, tokenize=True, return_dict=True)
        assert list(out["input_ids"]) == chat.encode(conversation)[0].tolist()
        prompt = chat.encode_prompt(conversation[:-1]).tolist()[-(cfg.seq_len - 12) :]  # within the context
        (result,) = session.engine.generate([prompt], session.sampling)
        ours = result.tokens  # up to and including the end-of-turn token, as transformers returns it
        with torch.no_grad():
            theirs = model.generate(
                torch.tensor([prompt]),
                max_new_tokens=12,
                do_sample=False,
                eos_token_id=list(session.engine.end_tokens),  # end-of-turn and end-of-text, as the session
                pad_token_id=chat.eot_id,
            )[0, len(prompt) :].tolist()
        assert np.array_equal(ours, theirs), (ours, theirs)
