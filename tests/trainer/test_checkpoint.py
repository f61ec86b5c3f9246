"""Checkpoints: exact round trip, incomplete and corrupt checkpoints, temporaries, non-tensorstore URLs."""

import json
import logging
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from marin.trainer.checkpoint import (
    CheckpointConfig,
    Checkpointer,
    IncompatibleCheckpoint,
    NoUsableCheckpoint,
    leaf_names,
    list_checkpoints,
)


def _state(seed=0):
    rng = np.random.default_rng(seed)
    return {
        "step": jnp.asarray(seed, jnp.int32),
        "params": {"w": jnp.asarray(rng.normal(size=(4, 3)), jnp.float32), "b16": jnp.ones(5, jnp.bfloat16) * seed},
        "opt": (jnp.asarray(rng.normal(size=(7,)), jnp.float32), None),
        "rng": jax.random.key_data(jax.random.PRNGKey(seed)),
    }


def _equal_bits(a, b):
    return all(
        np.asarray(x).tobytes() == np.asarray(y).tobytes() and np.asarray(x).dtype == np.asarray(y).dtype
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b))
    )


@pytest.mark.parametrize("async_save", [True, False])
def test_round_trip_is_bitwise(tmp_path, async_save):
    ckpt = Checkpointer(str(tmp_path), CheckpointConfig(async_save=async_save))
    state = _state(3)
    ckpt.save(state, 3, "permanent")
    ckpt.wait()
    restored, step = ckpt.restore_latest(jax.eval_shape(lambda: state))
    assert step == 3 and _equal_bits(restored, state)
    assert jax.tree.structure(restored) == jax.tree.structure(state)
    assert leaf_names(state) == ["opt/0", "params/b16", "params/w", "rng", "step"]
    ckpt.close()


def test_newest_complete_checkpoint_wins_and_unfinished_ones_are_ignored(tmp_path):
    ckpt = Checkpointer(str(tmp_path), CheckpointConfig(async_save=False))
    ckpt.save(_state(1), 1, "permanent")
    ckpt.save(_state(2), 2, "permanent")
    os.remove(tmp_path / "step-00000002" / "manifest.json")  # as if killed before the manifest
    restored, step = ckpt.restore_latest(jax.eval_shape(lambda: _state(0)))
    assert step == 1 and _equal_bits(restored, _state(1))


def test_corrupt_newest_falls_back_with_a_warning(tmp_path, caplog):
    ckpt = Checkpointer(str(tmp_path), CheckpointConfig(async_save=False))
    ckpt.save(_state(1), 1, "permanent")
    ckpt.save(_state(2), 2, "permanent")
    chunk = next(
        p for p in (tmp_path / "step-00000002" / "params" / "w").rglob("*") if p.is_file() and p.name != "zarr.json"
    )
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte
    chunk.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING):
        restored, step = ckpt.restore_latest(jax.eval_shape(lambda: _state(0)))
    assert step == 1 and _equal_bits(restored, _state(1))
    assert "step-00000002 is corrupt" in caplog.text and "params/w" in caplog.text


def test_truncated_manifest_and_missing_array_fall_back(tmp_path):
    ckpt = Checkpointer(str(tmp_path), CheckpointConfig(async_save=False))
    for s in (1, 2, 3):
        ckpt.save(_state(s), s, "permanent")
    (tmp_path / "step-00000003" / "manifest.json").write_text('{"format_version": 1, "st')
    for f in (tmp_path / "step-00000002" / "rng").rglob("*"):
        if f.is_file():
            f.unlink()
    assert ckpt.restore_latest(jax.eval_shape(lambda: _state(0)))[1] == 1


def _saved(tmp_path, steps=(1, 2), kind="permanent") -> Checkpointer:
    ckpt = Checkpointer(str(tmp_path), CheckpointConfig(async_save=False))
    for s in steps:
        ckpt.save(_state(s), s, kind)
    return ckpt


def _chunks(step_dir, leaf):
    return [p for p in (step_dir / leaf).rglob("*") if p.is_file() and p.name != "zarr.json"]


def _restore(ckpt):
    return ckpt.restore_latest(jax.eval_shape(lambda: _state(0)))


def test_missing_manifest_is_skipped_with_a_warning_naming_it(tmp_path, caplog):
    ckpt = _saved(tmp_path)
    os.remove(tmp_path / "step-00000002" / "manifest.json")
    with caplog.at_level(logging.WARNING):
        assert _restore(ckpt)[1] == 1
    assert "skipping checkpoint" in caplog.text and "step-00000002: no manifest.json" in caplog.text


def test_truncated_array_file_falls_back_naming_the_leaf(tmp_path, caplog):
    ckpt = _saved(tmp_path)
    [chunk] = _chunks(tmp_path / "step-00000002", "opt/0")
    chunk.write_bytes(chunk.read_bytes()[:5])
    with caplog.at_level(logging.WARNING):
        restored, step = _restore(ckpt)
    assert step == 1 and _equal_bits(restored, _state(1))
    assert "step-00000002 is corrupt (opt/0:" in caplog.text


def test_damaged_array_metadata_falls_back(tmp_path, caplog):
    ckpt = _saved(tmp_path)
    (tmp_path / "step-00000002" / "params" / "w" / "zarr.json").write_text("{not json")
    with caplog.at_level(logging.WARNING):
        assert _restore(ckpt)[1] == 1
    assert "step-00000002 is corrupt (params/w:" in caplog.text


def test_a_manifest_that_disagrees_with_its_own_arrays_is_damage_not_another_model(tmp_path, caplog):
    ckpt = _saved(tmp_path)
    manifest_path = tmp_path / "step-00000002" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["leaves"]["params/w"]["shape"] = [4, 4]  # the arrays still hold the [4, 3] model
    manifest_path.write_text(json.dumps(manifest))
    with caplog.at_level(logging.WARNING):
        assert _restore(ckpt)[1] == 1
    assert "params/w: the manifest says float32[4, 4] but the stored array is float32[4, 3]" in caplog.text


def test_every_checkpoint_damaged_is_an_error_naming_each_not_a_restart(tmp_path):
    ckpt = _saved(tmp_path)
    (tmp_path / "step-00000002" / "manifest.json").write_text('{"step": 2, "lea')
    for chunk in _chunks(tmp_path / "step-00000001", "params/w"):
        chunk.unlink()
    with pytest.raises(NoUsableCheckpoint) as info:
        _restore(ckpt)
    message = str(info.value)
    assert "every checkpoint is damaged" in message and "restart_if_unusable" in message
    assert "step-00000002: " in message and "unreadable manifest" in message
    assert "step-00000001: params/w" in message


def test_only_unfinished_saves_start_fresh_with_a_warning(tmp_path, caplog):
    """A run preempted during its first save left no checkpoint, only a directory without a manifest."""
    ckpt = _saved(tmp_path, steps=(1,))
    os.remove(tmp_path / "step-00000001" / "manifest.json")
    with caplog.at_level(logging.WARNING):
        assert _restore(ckpt) is None
    assert "step-00000001: no manifest.json" in caplog.text


def test_deleting_old_temporaries_survives_a_damaged_one(tmp_path, caplog):
    ckpt = _saved(tmp_path, steps=(1,), kind="temporary")
    (tmp_path / "step-00000001" / "manifest.json").write_text("{")
    with caplog.at_level(logging.WARNING):
        ckpt.save(_state(2), 2, "temporary")  # would delete step 1 if it could tell it is temporary
    assert (tmp_path / "step-00000001").exists() and [s for s, _ in list_checkpoints(str(tmp_path))] == [1, 2]
    assert "left checkpoint" in caplog.text and "step-00000001" in caplog.text
    assert _restore(ckpt)[1] == 2


def test_a_different_model_is_an_error_not_a_fallback(tmp_path):
    ckpt = Checkpointer(str(tmp_path), CheckpointConfig(async_save=False))
    ckpt.save(_state(1), 1, "permanent")
    other = _state(0)
    other["params"]["w"] = jnp.zeros((4, 4))
    with pytest.raises(IncompatibleCheckpoint, match=r"params/w is float32\[4, 3\], expected float32\[4, 4\]: this"):
        ckpt.restore_latest(jax.eval_shape(lambda: other))


def test_temporary_checkpoints_replace_each_other_permanent_ones_stay(tmp_path):
    ckpt = Checkpointer(str(tmp_path), CheckpointConfig(async_save=True, keep_every=4, save_interval_minutes=1e-9))
    kinds = {}
    for step in range(1, 10):
        kind = ckpt.due(step)
        kinds[step] = kind
        if kind:
            ckpt.save(_state(step), step, kind)
    ckpt.wait()
    assert kinds[4] == kinds[8] == "permanent" and kinds[5] == "temporary"
    assert [s for s, _ in list_checkpoints(str(tmp_path))] == [4, 8, 9]
    manifest = json.loads((tmp_path / "step-00000009" / "manifest.json").read_text())
    assert manifest["kind"] == "temporary" and manifest["leaves"]["params/w"]["shape"] == [4, 3]


def test_memory_url_uses_the_fsspec_fallback():
    base = "memory://ckpt-test/run"
    ckpt = Checkpointer(base, CheckpointConfig(async_save=True))
    ckpt.save(_state(5), 5, "permanent")
    ckpt.wait()
    restored, step = ckpt.restore_latest(jax.eval_shape(lambda: _state(0)))
    assert step == 5 and _equal_bits(restored, _state(5))


def test_config_validation():
    with pytest.raises(ValueError, match="keep_every must be > 0 or None, got 0"):
        CheckpointConfig(keep_every=0)
