"""Context parallelism (issue 78): the context mesh axis splits every sequence; attention crosses the split by a
ring or all-gathered K/V (``marin/trainer/attention/context.py``).

On 8 simulated CPU devices, in subprocesses (``XLA_FLAGS`` counts only before JAX starts): the loss and every
gradient of a packed batch (GQA, a full and a sliding-window layer) equal one device's for context 8, context 4 x
fsdp 2 and context 2 x tensor 2 x fsdp 2, by both methods (``context_script.py``); five training steps through
``train()`` equal one device's with AdamW and with Muon (``sharding_script.py``); a checkpoint written under context
parallelism restores bitwise under plain FSDP and back; and the compiled step of an 8k-token row needs far less
temporary memory per device under context 8 than on one device. In process: the zigzag layout and the refusals.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from jax.sharding import AbstractMesh, AxisType

from marin.trainer.attention.context import check_sequence_split, sequence_shards, zigzag_order
from marin.trainer.axes import ShardingContext
from marin.trainer.mesh import MESH_AXES, resolve_rules

ROOT = Path(__file__).resolve().parents[2]
TOLERANCE = 1e-5  # fp32 compute: only the order of floating-point additions differs between meshes
MESHES = ["cp8", "cp4_fsdp2", "cp2_tp2_fsdp2"]


def _run(script: str, *args: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).with_name(script)), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-5000:]
    assert "Involuntary full rematerialization" not in proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["devices"] == 8
    return report


@pytest.fixture(scope="module")
def gradients() -> dict:
    jobs = [f"grads:{mesh}:{method}" for mesh in MESHES for method in ("ring", "all_gather")]
    return _run("context_script.py", *jobs, "refuse")["jobs"]


@pytest.fixture(scope="module")
def adamw_runs(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("context_adamw")
    return _run("sharding_script.py", str(out), "single", "cp8", "fsdp", "restore:cp8:fsdp", "restore:fsdp:cp8")["runs"]


@pytest.mark.timeout(900)
@pytest.mark.parametrize("method", ["ring", "all_gather"])
@pytest.mark.parametrize("mesh", MESHES)
def test_loss_and_every_gradient_equal_one_device(gradients, mesh, method):
    found = gradients[f"grads:{mesh}:{method}"]
    assert found["mesh"]["context"] == {"cp8": 8, "cp4_fsdp2": 4, "cp2_tp2_fsdp2": 2}[mesh]
    assert min(found["segments_per_row"]) >= 2  # packed documents: attention must not cross them
    assert abs(found["loss"] - found["single_loss"]) <= TOLERANCE
    assert len(found["grad_diffs"]) == 12  # every parameter of the two-layer model
    assert max(found["grad_diffs"].values()) <= TOLERANCE, found["grad_diffs"]
    assert found["grad_scale"] > 100 * TOLERANCE  # the gradients are not all too small to differ


@pytest.mark.timeout(900)
def test_another_attention_backend_under_a_context_split_is_refused_naming_it(gradients):
    error = gradients["refuse"]["error"]
    assert "attention backend 'reference' cannot serve a sequence split over the context axis" in error


@pytest.mark.timeout(900)
def test_five_adamw_steps_under_context_8_equal_one_device(adamw_runs):
    single, cp = adamw_runs["single"], adamw_runs["cp8"]
    assert cp["mesh"]["context"] == 8 and cp["step"] == single["step"] == 5
    np.testing.assert_allclose(cp["losses"], single["losses"], rtol=0, atol=TOLERANCE)
    assert cp["param_diff"] <= TOLERANCE and cp["opt_state_diff"] <= TOLERANCE and cp["ema_diff"] <= TOLERANCE
    assert not cp["warnings"], cp["warnings"]


@pytest.mark.timeout(900)
def test_a_checkpoint_written_under_context_parallelism_restores_bitwise_under_fsdp_and_back(adamw_runs):
    """Checkpoints hold whole arrays, never a layout: the context run's final state restored under plain FSDP is
    the same bits (placed as FSDP's rules say), and FSDP's restored under context 8 too."""
    for source, target in (("cp8", "fsdp"), ("fsdp", "cp8")):
        restored = adamw_runs[f"restore:{source}:{target}"]
        assert restored["bitwise_equal"] and restored["step"] == 5
        assert restored["specs"] == adamw_runs[target]["specs"] and restored["mesh"] == adamw_runs[target]["mesh"]


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_five_steps_on_composed_meshes_equal_one_device(tmp_path, optimizer):
    runs = _run("sharding_script.py", str(tmp_path), f"--optimizer={optimizer}", "single", *MESHES)["runs"]
    single = runs["single"]
    for mesh in MESHES:
        found = runs[mesh]
        assert found["step"] == 5, mesh
        np.testing.assert_allclose(found["losses"], single["losses"], rtol=0, atol=TOLERANCE, err_msg=mesh)
        assert found["param_diff"] <= TOLERANCE and found["opt_state_diff"] <= TOLERANCE, (mesh, found)
        assert not found["warnings"], found["warnings"]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_temporary_memory_of_an_8k_step_falls_with_the_context_axis():
    """The compiled bf16 step of one 8,192-token row: per device, context 8 needs at most 1/5 of one device's
    temporary bytes (the activations and attention's blocks), by either method; the collectives it adds are the
    ones each method should have (docs/trainer.md has the table)."""
    table = _run("context_script.py", "memory:8192")["jobs"]["memory:8192"]
    single = table["single"]["temp_bytes"]
    for method in ("ring", "all_gather"):
        assert table[method]["temp_bytes"] <= single / 5, (method, table[method]["temp_bytes"], single)
    assert table["ring"]["collective_bytes"]["collective-permute"] > 0
    assert (
        "all-gather" in table["all_gather"]["collective_bytes"]
        and "reduce-scatter" in table["all_gather"]["collective_bytes"]
    )
    assert "collective-permute" not in table["all_gather"]["collective_bytes"]


# ----------------------------------------------------------------------------------------------------------
# In process


def _context(context: int, fsdp: int = 1, sharding: str = "fsdp") -> ShardingContext:
    mesh = AbstractMesh((1, fsdp, 1, context, 1), MESH_AXES, axis_types=(AxisType.Auto,) * 5)
    return ShardingContext(mesh, resolve_rules(sharding))


def test_zigzag_gives_device_i_chunks_i_and_2k_minus_1_minus_i():
    assert zigzag_order(16, 1) is None
    order = zigzag_order(16, 2)  # the module docstring's example
    np.testing.assert_array_equal(order, [0, 1, 2, 3, 12, 13, 14, 15, 4, 5, 6, 7, 8, 9, 10, 11])
    order = zigzag_order(64, 4).reshape(4, 2, 8)  # [device, its two chunks, positions]
    for device in range(4):
        assert order[device, 0, 0] == 8 * device and order[device, 1, 0] == 8 * (7 - device)
    assert sorted(zigzag_order(64, 4)) == list(range(64))


def test_a_sequence_the_context_axis_cannot_cut_is_refused_naming_axis_and_numbers():
    assert sequence_shards(_context(8)) == 8 and sequence_shards(_context(1, fsdp=8)) == 1
    check_sequence_split(64, _context(8))
    check_sequence_split(100, _context(1, fsdp=8))  # no split: anything goes
    with pytest.raises(ValueError, match=r"LlamaConfig.seq_len 100 does not split over the context axis \(context=8\)"):
        check_sequence_split(100, _context(8), what="LlamaConfig.seq_len")
    with pytest.raises(ValueError, match=r"2 x 4 = 8 equal chunks \(zigzag\), so it needs a multiple of 8"):
        check_sequence_split(36, _context(4, fsdp=2))
