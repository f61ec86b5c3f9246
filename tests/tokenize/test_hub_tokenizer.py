"""Hub tokenizers go through the real huggingface_hub client, here against a loopback stand-in."""

import pytest

from marin.tokenize import TrainTokenizerConfig, build_bpe_tokenizer, fingerprint, load_tokenizer
from tests.download.servers import FileServer


@pytest.fixture
def hub_env(tmp_path, monkeypatch):
    import huggingface_hub.constants as constants

    def point_at(url):
        monkeypatch.setenv("HF_ENDPOINT", url)
        monkeypatch.setattr(constants, "ENDPOINT", url)
        monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", url + "/{repo_id}/resolve/{revision}/{filename}")
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
        monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))

    return point_at


def test_hub_repo_id_loads_through_the_real_client(hub_env):
    tok = build_bpe_tokenizer(
        iter(["hello world"] * 20), TrainTokenizerConfig(input_paths=["x"], output_path="y", vocab_size=300)
    )
    hub = {"lab/tiny-bpe": {"sha": "c" * 40, "refs": ("main",), "files": ["tokenizer.json"], "kind": "model"}}
    with FileServer({"/tokenizer.json": tok.to_str().encode()}, hub=hub) as server:
        hub_env(server.url)
        loaded = load_tokenizer("lab/tiny-bpe")
        assert fingerprint(loaded) == fingerprint(tok)
        assert any(p.startswith("/lab/tiny-bpe/resolve/") for _, p, _ in server.log)


def test_missing_hub_repo_is_a_clear_error(hub_env):
    with FileServer({}) as server:
        hub_env(server.url)
        with pytest.raises(OSError, match=r"could not load tokenizer 'lab/missing' from the Hugging Face hub"):
            load_tokenizer("lab/missing")


def test_missing_local_path_is_not_sent_to_the_hub(tmp_path):
    with pytest.raises(FileNotFoundError, match="no tokenizer.json there"):
        load_tokenizer(str(tmp_path / "nope"))
