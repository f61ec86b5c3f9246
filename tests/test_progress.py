"""Long steps show progress: data-step tasks and tokenization shards report through one bar, which
``MARIN_PROGRESS=0`` silences."""

from marin.parallel import run_tasks


def _square(x: int) -> int:
    return x * x


def test_run_tasks_reports_tasks_done_of_total(capfd):
    assert run_tasks(_square, [(i,) for i in range(5)], use_ray=False, label="dedupe/exact") == [0, 1, 4, 9, 16]
    err = capfd.readouterr().err
    assert "dedupe/exact" in err and "5/5" in err and "task" in err


def test_bars_can_be_turned_off(capfd, monkeypatch):
    monkeypatch.setenv("MARIN_PROGRESS", "0")
    run_tasks(_square, [(i,) for i in range(5)], use_ray=False, label="dedupe/exact")
    assert "dedupe/exact" not in capfd.readouterr().err


def test_tokenization_reports_shards_and_tokens(tmp_path, capfd):
    import json

    from marin.tokenize.tokenizer import TrainTokenizerConfig, build_bpe_tokenizer
    from marin.tokenize.writer import build_cache

    texts = [f"document number {i} about cats and dogs" for i in range(50)]
    files = []
    for shard in range(3):
        path = tmp_path / f"part-{shard}.jsonl"
        path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts[shard::3]))
        files.append(str(path))
    tokenizer = build_bpe_tokenizer(
        iter(texts), TrainTokenizerConfig(input_paths=["-"], output_path="-", vocab_size=300, min_frequency=1)
    )
    ledger = build_cache(files, str(tmp_path / "tokenized" / "cats-1234" / "train"), tokenizer, tokenizer_name="t")
    err = capfd.readouterr().err
    assert "tokenize cats-1234/train" in err and "3/3" in err
    assert f"tokens={ledger['num_tokens']:,}" in err
