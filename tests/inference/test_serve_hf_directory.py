"""Serving a Hugging Face directory as ``transformers`` reads it: its own tokenizer files without
``--tokenizer``, text encoded as ``AutoTokenizer`` encodes it, and generation ended by the end-of-text ids its
``generation_config.json`` (else ``config.json``) declares, whatever their spelling: a token-id prompt's greedy
completion through the server equals ``transformers``' ``generate`` on the same directory. A declaration that
is not a token of the model is an error naming the file and the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from marin.inference.engine import EngineConfig
from tests.inference.serving import client, serving
from tests.requirements import require_module

torch = require_module("torch", "CPU torch (the export-test extra)")
transformers = require_module("transformers", "transformers (the export-test extra)")
require_module("openai", "the openai client (the dev extra)")
require_module("uvicorn", "uvicorn (the serve extra)")

END = "<|im_end|>"  # an end-of-text spelling the lab's tokenizers never use
PROMPT = [5, 17, 40, 2, 63]
MAX_TOKENS = 16


# no padding: generate would otherwise mask every prompt token equal to its pad id (0 is the space here)
_GREEDY = dict(do_sample=False, pad_token_id=127)


def _tokenizer():
    from tokenizers import Tokenizer, models

    vocab = {chr(i): i - 32 for i in range(32, 127)}  # printable ASCII, one token each
    vocab[END] = len(vocab)
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.add_special_tokens([END])
    return tokenizer, vocab[END]


def _save(path: Path, *, generation_eos=None, config_eos=None, tokenizer: bool = True) -> None:
    """A Llama saved by ``transformers`` (random weights, wide init: peaked logits) with its tokenizer saved by
    ``transformers`` too; ``generation_eos`` (an id or a list) overwrites ``generation_config.json``'s
    ``eos_token_id``, ``config_eos`` ``config.json``'s."""
    tok, end = _tokenizer()
    config = transformers.LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        initializer_range=0.3,
        bos_token_id=None,
        eos_token_id=end if config_eos is None else config_eos,
    )
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).save_pretrained(str(path))
    if tokenizer:
        transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=END).save_pretrained(str(path))
    if generation_eos is not None:
        doc = json.loads((path / "generation_config.json").read_text())
        (path / "generation_config.json").write_text(json.dumps({**doc, "eos_token_id": generation_eos}))


def _greedy_by_transformers(path: Path, max_new_tokens: int = MAX_TOKENS) -> list[int]:
    """``generate``'s greedy continuation of ``PROMPT``, ended as transformers ends it (its generation config)."""
    model = transformers.AutoModelForCausalLM.from_pretrained(str(path)).eval()
    with torch.no_grad():
        out = model.generate(torch.tensor([PROMPT]), max_new_tokens=max_new_tokens, **_GREEDY)
    return out[0, len(PROMPT) :].tolist()


def test_an_hf_directory_serves_with_its_own_tokenizer_and_end_tokens(tmp_path):
    # the end token's id is the greedy path's fourth token: generation must end there, as transformers' does
    probe = tmp_path / "probe"
    _save(probe)
    unstopped = _greedy_by_transformers(probe)
    stop = unstopped[3]
    assert stop not in unstopped[:3]
    _, end = _tokenizer()
    path = tmp_path / "hf"
    _save(path, generation_eos=[end, stop])
    expected = _greedy_by_transformers(path)
    assert expected == unstopped[:4]  # transformers stops at (and emits) the declared end token

    with serving(str(path), slots=2, prefill_chunk=16) as (url, model, _):
        assert set(model.engine.end_tokens) >= {end, stop}
        reply = client(url).completions.create(
            model=model.name, prompt=PROMPT, max_tokens=MAX_TOKENS, temperature=0, logprobs=0
        )
        choice = reply.choices[0]
        assert choice.finish_reason == "stop"
        assert reply.usage.completion_tokens == len(expected)  # the end token counts, as vLLM counts it
        assert choice.text == model.decode(expected[:-1])
        # text is encoded as AutoTokenizer encodes it (this tokenizer adds nothing before a text)
        auto = transformers.AutoTokenizer.from_pretrained(str(path))
        assert list(model.prefix) + model.encode_text("Hello, you") == auto("Hello, you")["input_ids"]


def test_config_json_declares_the_end_token_without_a_generation_config(tmp_path):
    path = tmp_path / "hf"
    _save(path)
    (path / "generation_config.json").unlink()
    _, end = _tokenizer()
    from marin.inference.serve import load_served_model

    served = load_served_model(str(path), engine_config=EngineConfig(slots=1, prefill_chunk=16))
    try:
        assert end in served.engine.end_tokens
    finally:
        served.engine.stop()


@pytest.mark.parametrize(
    "where, generation_eos, config_eos, message",
    [
        ("generation", 500, None, r"generation_config\.json: eos_token_id 500 is not a token of the model"),
        ("generation", ["x"], None, r"generation_config\.json: eos_token_id \['x'\]"),
        ("config", None, 128, r"config\.json: eos_token_id 128 is not a token of the model"),
    ],
)
def test_an_end_token_outside_the_vocabulary_is_named(tmp_path, where, generation_eos, config_eos, message):
    from marin.inference.serve import load_served_model

    path = tmp_path / "hf"
    _save(path, generation_eos=generation_eos, config_eos=config_eos)
    if where == "config":
        (path / "generation_config.json").unlink()
    with pytest.raises(ValueError, match=message):
        load_served_model(str(path), engine_config=EngineConfig(slots=1, prefill_chunk=16))


def test_a_directory_without_tokenizer_files_asks_for_tokenizer(tmp_path):
    from marin.inference.serve import load_served_model

    path = tmp_path / "hf"
    _save(path, tokenizer=False)
    with pytest.raises(FileNotFoundError, match=r"no tokenizer.*--tokenizer"):
        load_served_model(str(path), engine_config=EngineConfig(slots=1, prefill_chunk=16))


def test_a_directory_without_tokenizer_json_is_read_through_transformers(tmp_path):
    """A directory with only GPT-2-style ``vocab.json`` + ``merges.txt``: the tokenizer transformers builds."""
    from marin.inference.serve import load_served_model

    path = tmp_path / "hf"
    _save(path, tokenizer=False)
    vocab = {chr(i): i - 33 for i in range(33, 127)}
    vocab.update({"Ġ": len(vocab), END: len(vocab) + 1})
    (path / "vocab.json").write_text(json.dumps(vocab))
    (path / "merges.txt").write_text("#version: 0.2\n")
    (path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "GPT2Tokenizer", "eos_token": END}))
    auto = transformers.AutoTokenizer.from_pretrained(str(path))
    served = load_served_model(str(path), engine_config=EngineConfig(slots=1, prefill_chunk=16))
    try:
        assert list(served.prefix) + served.encode_text("Hello, you") == auto("Hello, you")["input_ids"]
        assert served.decode(auto("Hello, you")["input_ids"]) == "Hello, you"
    finally:
        served.engine.stop()


def test_the_sample_cli_reads_the_directory_as_the_server_does(tmp_path, capsys):
    """``python -m marin.inference.sample`` on the directory, greedy: transformers' ``generate`` on the text
    prompt as ``AutoTokenizer`` encodes it, ended at the declared end token, which is not printed."""
    from marin.inference.sample import main

    probe = tmp_path / "probe"
    _save(probe)
    auto = transformers.AutoTokenizer.from_pretrained(str(probe))
    prompt = "The cow"
    ids = auto(prompt)["input_ids"]
    model = transformers.AutoModelForCausalLM.from_pretrained(str(probe)).eval()
    with torch.no_grad():
        unstopped = model.generate(torch.tensor([ids]), max_new_tokens=12, **_GREEDY)
    unstopped = unstopped[0, len(ids) :].tolist()
    stop = next(t for i, t in enumerate(unstopped) if i >= 3 and t not in unstopped[:i])
    _, end = _tokenizer()
    path = tmp_path / "hf"
    _save(path, generation_eos=[end, stop])
    main(["--checkpoint", str(path), "--prompt", prompt, "--temperature", "0", "--max_new_tokens", "12"])
    assert capsys.readouterr().out == prompt + auto.decode(unstopped[: unstopped.index(stop)]) + "\n"
