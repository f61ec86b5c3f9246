"""``python -m marin.inference.sample``: greedy text equal to the engine's, cut before stop strings and stop
token ids; a refused value named by its flag."""

import pytest

from marin.inference import SamplingParams
from marin.inference.engine import Engine, EngineConfig
from tests.export.tiny_model import make_tiny_export


@pytest.fixture(scope="module")
def tiny_export(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("tiny") / "hf")
    cfg, params = make_tiny_export(path)
    return path, cfg, params


def test_cli_stops_before_stop_strings_and_stop_token_ids(tiny_export, capsys):
    from marin.inference.sample import main
    from marin.tokenize import eos_id, load_tokenizer

    path, cfg, params = tiny_export
    tokenizer = load_tokenizer(path)
    prompt = "The cow said"
    base = ["--checkpoint", path, "--prompt", prompt, "--temperature", "0", "--max_new_tokens", "24"]
    ids = [eos_id(tokenizer), *tokenizer.encode(prompt, add_special_tokens=False).ids]
    [result] = Engine(cfg, params, EngineConfig(slots=1)).generate([ids], SamplingParams(max_tokens=24, temperature=0))
    tokens = result.tokens
    assert eos_id(tokenizer) not in tokens  # else the unstopped run would already end early
    full_text = tokenizer.decode(tokens)
    main(base)
    assert capsys.readouterr().out == prompt + full_text + "\n"

    # a stop string: the first later position whose two characters did not occur before
    k = next(k for k in range(4, len(full_text) - 2) if full_text.index(full_text[k : k + 2]) == k)
    stop = full_text[k : k + 2]
    main(base + ["--stop", "never-generated", "--stop", stop])
    assert capsys.readouterr().out == prompt + full_text[:k] + "\n"

    # a stop token id: the text of the tokens before its first occurrence
    i = next(i for i in range(3, len(tokens)) if tokens[i] not in tokens[:i])
    main(base + ["--stop_token_id", str(tokens[i])])
    assert capsys.readouterr().out == prompt + tokenizer.decode(tokens[:i]) + "\n"

    # a value the sampling parameters refuse is named by its flag
    with pytest.raises(SystemExit, match="--top_p"):
        main(base + ["--top_p", "0"])
