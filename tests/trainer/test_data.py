"""Data: Feistel permutations, mixtures with stages, packing, determinism, the numpy source format."""

import numpy as np
import pytest

from marin.trainer.data import (
    ArrayTokenSource,
    DataConfig,
    EpochPermutation,
    FeistelPermutation,
    MixtureStage,
    NumpySourceConfig,
    Prefetcher,
    SyntheticSourceConfig,
    TrainBatches,
    apportion,
    documents_to_source,
    eval_batches,
    write_numpy_source,
)


@pytest.mark.parametrize("n", [1, 2, 3, 10, 64, 1000, 4097, 100_003])
def test_feistel_is_a_bijection(n):
    values = FeistelPermutation(n, seed=42)(np.arange(n))
    assert np.array_equal(np.sort(values), np.arange(n))


def test_feistel_is_deterministic_and_keyed():
    a = FeistelPermutation(10_000, seed=1)(np.arange(10_000))
    assert np.array_equal(a, FeistelPermutation(10_000, seed=1)(np.arange(10_000)))
    b = FeistelPermutation(10_000, seed=2)(np.arange(10_000))
    assert np.mean(a == b) < 0.01
    # Well mixed: not close to the identity, and neighbours land far apart.
    assert np.mean(a == np.arange(10_000)) < 0.01
    assert np.median(np.abs(np.diff(a))) > 1000
    # Pinned values: the permutation must not change silently across versions (it decides the data order).
    assert FeistelPermutation(10, seed=3)(np.arange(10)).tolist() == [2, 3, 9, 1, 6, 7, 4, 5, 0, 8]
    assert FeistelPermutation(1000, seed=0)(np.arange(5)).tolist() == [239, 718, 958, 142, 243]
    with pytest.raises(IndexError):
        FeistelPermutation(10, seed=0)(np.array([10]))


def test_a_permutation_consulted_again_answers_from_its_table_with_the_same_values(monkeypatch):
    """The loader asks its permutations every step: from the second call on, one of up to ``_TABLE_MAX`` items
    answers from its whole table (computed once), with exactly the values the network gives; index errors
    still raise; a larger one never tabulates."""
    from marin.trainer.data import permutation

    perm = FeistelPermutation(5000, seed=9)
    direct = perm(np.arange(5000))  # first call: computed
    assert perm._table is None
    picks = np.array([[4999, 0], [17, 2500]])
    assert np.array_equal(perm(picks), direct[picks]) and perm._table is not None
    assert np.array_equal(perm(np.arange(5000)), direct)
    assert np.array_equal(direct, FeistelPermutation(5000, seed=9)(np.arange(5000)))
    with pytest.raises(IndexError):
        perm(np.array([5000]))
    monkeypatch.setattr(permutation, "_TABLE_MAX", 4999)
    big = FeistelPermutation(5000, seed=9)
    assert np.array_equal(big(np.arange(5000)), direct) and np.array_equal(big(np.arange(5000)), direct)
    assert big._table is None


def test_epoch_permutation_visits_every_item_once_per_epoch():
    perm = EpochPermutation(97, seed=5)
    first, second = perm(np.arange(97)), perm(np.arange(97, 194))
    assert sorted(first) == sorted(second) == list(range(97))
    assert not np.array_equal(first, second)


def test_apportion():
    assert apportion([0.7, 0.3], 10).tolist() == [7, 3]
    assert apportion([1, 1, 1], 4).tolist() == [2, 1, 1]
    assert apportion([0.5, 0.0, 0.5], 7).sum() == 7
    assert apportion([0.0, 1.0], 5).tolist() == [0, 5]


def _sources():
    return {
        "web": SyntheticSourceConfig(vocab_size=100, num_tokens=40_000, seed=1),
        "code": SyntheticSourceConfig(vocab_size=100, num_tokens=20_000, seed=2),
        "math": SyntheticSourceConfig(vocab_size=100, num_tokens=10_000, seed=3),
    }


def _loader(config: DataConfig, batch_size=16, seq_len=16) -> TrainBatches:
    return TrainBatches({k: v.build() for k, v in config.train.items()}, config, seq_len=seq_len, batch_size=batch_size)


def test_mixture_proportions_over_10k_sequences():
    weights = {"web": 0.6, "code": 0.3, "math": 0.1}
    config = DataConfig(train=_sources(), stages=(MixtureStage(start_step=0, weights=weights),), mixture_block_size=256)
    loader = _loader(config, batch_size=16)
    sources = np.concatenate([loader.locate(step)[0] for step in range(625)])  # 10,000 sequences
    assert len(sources) == 10_000
    for i, name in enumerate(loader.names):
        share = np.mean(sources == i)
        # Block apportionment: exact per 256-slot block, so the only error is the last partial block.
        assert abs(share - weights[name]) < 0.005, (name, share)


def test_stage_switch_happens_exactly_at_its_step():
    stages = (
        MixtureStage(start_step=0, weights={"web": 1.0}),
        MixtureStage(start_step=7, weights={"code": 0.5, "math": 0.5}),
        MixtureStage(start_step=13, weights={"web": 1.0, "math": 1.0}),
    )
    loader = _loader(DataConfig(train=_sources(), stages=stages, mixture_block_size=40), batch_size=6)
    web, code, math = 0, 1, 2
    for step in range(7):
        assert set(loader.locate(step)[0]) == {web}
    stage2 = np.concatenate([loader.locate(s)[0] for s in range(7, 13)])
    assert set(stage2) == {code, math} and np.sum(stage2 == code) == np.sum(stage2 == math) == 18
    stage3 = np.concatenate([loader.locate(s)[0] for s in range(13, 53)])
    assert set(stage3) == {web, math} and np.sum(stage3 == web) == 120


def test_each_source_is_read_without_repeats_within_an_epoch():
    config = DataConfig(
        train=_sources(), stages=(MixtureStage(start_step=0, weights={"web": 0.5, "code": 0.5}),), mixture_block_size=80
    )
    loader = _loader(config, batch_size=8, seq_len=16)
    located = [loader.locate(step) for step in range(100)]
    sources = np.concatenate([s for s, _ in located])
    index = np.concatenate([i for _, i in located])
    code_seq = index[sources == 1]
    assert len(code_seq) == 400
    n_code = (20_000 - 1) // 16
    assert len(set(code_seq[:n_code].tolist())) == min(len(code_seq), n_code)


def test_batches_are_a_pure_function_of_seed_and_step():
    config = DataConfig(train=_sources(), seed=3)
    a, b = _loader(config), _loader(config)
    for step in (0, 5, 123):
        for key, value in a.batch(step).items():
            np.testing.assert_array_equal(value, b.batch(step)[key])
    other = _loader(DataConfig(train=_sources(), seed=4))
    assert not np.array_equal(a.batch(0)["input_ids"], other.batch(0)["input_ids"])
    # A host's slice equals the corresponding rows of the full batch.
    np.testing.assert_array_equal(a.batch(9, rows=slice(4, 8))["input_ids"], a.batch(9)["input_ids"][4:8])


def test_packing_segments_and_loss_mask():
    source = documents_to_source([[5, 6, 7], [8, 9], [10, 11, 12, 13]])  # EOS = 0 after each
    # stream: 5 6 7 0 | 8 9 0 | 10 11 12 13 0
    placeholder = SyntheticSourceConfig(vocab_size=20, num_tokens=20)  # the config only names the source
    loader = TrainBatches({"d": source}, DataConfig(train={"d": placeholder}), seq_len=6, batch_size=1)
    _, index = loader.locate(0)
    batch = loader.batch(0)
    if index[0] == 0:  # window 5 6 7 0 8 9 | 0
        assert batch["input_ids"][0].tolist() == [5, 6, 7, 0, 8, 9]
        assert batch["targets"][0].tolist() == [6, 7, 0, 8, 9, 0]
        assert batch["segment_ids"][0].tolist() == [0, 0, 0, 0, 1, 1]
        assert batch["loss_mask"][0].tolist() == [1, 1, 1, 0, 1, 1]
    else:  # window 0 10 11 12 13 0 | (the second and last full window, starting at 6)
        assert batch["input_ids"][0].tolist() == [0, 10, 11, 12, 13, 0]
        assert batch["segment_ids"][0].tolist() == [0, 1, 1, 1, 1, 1]
        assert batch["loss_mask"][0].tolist() == [0, 1, 1, 1, 1, 1]


def test_numpy_source_round_trip(tmp_path):
    synthetic = SyntheticSourceConfig(vocab_size=300, num_tokens=5000).build()
    write_numpy_source(str(tmp_path / "src"), synthetic)
    loaded = NumpySourceConfig(path=str(tmp_path / "src")).build()
    assert loaded.num_tokens == synthetic.num_tokens
    np.testing.assert_array_equal(loaded.read(100, 500), synthetic.read(100, 500))
    np.testing.assert_array_equal(loaded.doc_starts(0, 5000), synthetic.doc_starts(0, 5000))
    with pytest.raises(IndexError):
        loaded.read(4990, 20)
    with pytest.raises(FileNotFoundError, match="source.json"):
        NumpySourceConfig(path=str(tmp_path / "missing")).build()


def test_eval_batches_pad_the_last_batch_with_masked_rows():
    source = ArrayTokenSource(np.arange(1, 101, dtype=np.int32), np.array([0]))
    batches = list(eval_batches(source, seq_len=10, batch_size=4, max_sequences=100))
    assert len(batches) == 3  # 9 sequences of 10 (+1 target) in 100 tokens
    assert batches[-1]["loss_mask"][1:].sum() == 0 and batches[-1]["loss_mask"][0].sum() == 10
    assert batches[0]["input_ids"][1].tolist() == list(range(11, 21))


def test_prefetcher_delivers_in_order_and_reraises_errors():
    def make(step):
        if step == 3:
            raise ValueError("bad batch 3")
        return {"x": np.array([step])}

    prefetch = Prefetcher(make, start=0, stop=5, depth=2)
    assert [int(prefetch.get(s)["x"][0]) for s in range(3)] == [0, 1, 2]
    with pytest.raises(ValueError, match="bad batch 3"):
        prefetch.get(3)
    prefetch.close()


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(train={}), "at least one source"),
        (dict(train={"a": None}, stages=(MixtureStage(start_step=0, weights={"b": 1.0}),)), "unknown sources"),
        (dict(train={"a": None}, stages=(MixtureStage(start_step=3, weights={"a": 1.0}),)), "begin at step 0"),
    ],
)
def test_data_config_validation(kwargs, match):
    placeholder = SyntheticSourceConfig(vocab_size=20, num_tokens=20)
    kwargs = {**kwargs, "train": {k: placeholder for k in kwargs["train"]}}
    with pytest.raises(ValueError, match=match):
        DataConfig(**kwargs)
