"""``python -m marin.export`` of a Hugging Face directory: the fields of its ``config.json`` that the round trip
does not read (``initializer_range``, ``use_cache``, a field of the model's own, the special token ids) come out
as they went in, the fields it does read say the same model, and without ``--tokenizer`` the directory's own
tokenizer and generation files come along unchanged. ``--help`` says that it takes such a directory."""

from __future__ import annotations

import json

import pytest

from marin.export.__main__ import main
from marin.inference import config_from_hf
from tests.export.hf_families import FAMILIES, saved_by_transformers, transformers

UNUSED = {
    "initializer_range": 0.2,  # transformers' default is 0.02, the lab's too: an unusual value shows
    "use_cache": False,
    "attention_dropout": 0.0,
    "pad_token_id": 3,
    "bos_token_id": 4,
    "eos_token_id": [5, 6],
    "custom_note": "a field only this model's authors read",
}
# Written from the lab's config, equal in meaning where the source differs: Mixtral's ``head_dim`` None is
# hidden / heads (written as that number); Qwen3's ``max_window_layers`` says nothing without a window.
REWRITTEN = {"head_dim", "max_window_layers"}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "generation_config.json")


def _source(path, family: str) -> dict:
    saved_by_transformers(family, path)
    doc = {**json.loads((path / "config.json").read_text()), **UNUSED}
    (path / "config.json").write_text(json.dumps(doc, indent=2))
    return doc


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_an_hf_directory_exports_with_the_fields_it_does_not_use(family, tmp_path):
    source = _source(tmp_path / "theirs", family)
    main(["--checkpoint_path", str(tmp_path / "theirs"), "--output_path", str(tmp_path / "ours")])
    exported = json.loads((tmp_path / "ours" / "config.json").read_text())
    for key, value in UNUSED.items():
        assert exported[key] == value, key
    changed = {k: (v, exported.get(k, "<absent>")) for k, v in source.items() if exported.get(k, "<absent>") != v}
    assert set(changed) <= REWRITTEN, changed
    assert config_from_hf(exported) == config_from_hf(source)
    loaded = transformers.AutoConfig.from_pretrained(str(tmp_path / "ours"))
    assert (loaded.initializer_range, loaded.custom_note, loaded.eos_token_id) == (0.2, UNUSED["custom_note"], [5, 6])


def test_without_tokenizer_the_directorys_own_tokenizer_and_generation_config_come_along(tmp_path):
    from tokenizers import Tokenizer, models

    _source(tmp_path / "theirs", "qwen3")
    vocab = {chr(i): i - 32 for i in range(32, 127)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="~").save_pretrained(str(tmp_path / "theirs"))
    generation = tmp_path / "theirs" / "generation_config.json"
    generation.write_text(json.dumps({"eos_token_id": [5, 6], "temperature": 0.6}))
    main(["--checkpoint_path", str(tmp_path / "theirs"), "--output_path", str(tmp_path / "ours")])
    for name in TOKENIZER_FILES:
        assert (tmp_path / "ours" / name).read_bytes() == (tmp_path / "theirs" / name).read_bytes(), name


def test_a_training_runs_export_writes_its_own_initializer_range(tmp_path):
    """Nothing to keep from a run's checkpoint: the config's own value is written (the model's, not 0.02)."""
    import dataclasses

    import jax
    import numpy as np

    from marin.inference import export_hf
    from marin.trainer.model.llama import init_params
    from tests.export.tiny_model import CFG

    cfg = dataclasses.replace(CFG, initializer_range=0.25)
    params = jax.tree.map(np.asarray, init_params(cfg, jax.random.PRNGKey(0)))
    export_hf(cfg, params, str(tmp_path / "hf"))
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["initializer_range"] == 0.25


def test_help_says_it_exports_a_run_or_an_hf_directory(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "Hugging Face directory" in text and "training run" in text
