"""The trainer's programs compiled by libtpu for TPU slices on this CPU (marin.trainer.aot, docs/tpu.md).

Bad input and the start-up guard need nothing; the compiles need libtpu (the tpu-compile extra): without it
they skip naming the extra, and under MARIN_REQUIRE_ALL=1 (``make test``) they fail.
"""

import dataclasses
import importlib.metadata
import importlib.util
import math
import re

import jax
import pytest

from marin import accelerators
from marin.trainer import DataConfig, MeshConfig, SyntheticSourceConfig, TrainerConfig, TrainLmConfig, model_preset
from marin.trainer.aot import compile as aot_compile
from marin.trainer.aot import known_targets, parse_target, targets
from tests.requirements import missing

GIB = 1024**3


def run_config(model, *, batch_size, mesh=MeshConfig(), sharding="fsdp", **trainer):
    data = DataConfig(train={"s": SyntheticSourceConfig(vocab_size=model.vocab_size, num_tokens=100_000)})
    trainer = TrainerConfig(num_train_steps=10, batch_size=batch_size, mesh=mesh, sharding=sharding, **trainer)
    return TrainLmConfig(output_path="/unused", model=model, data=data, trainer=trainer)


def nano(**changes):
    return dataclasses.replace(model_preset("nano"), attention_backend="splash", **changes)


def lane_sized(**changes):
    """nano with every dimension a shard ends on a multiple of the TPU's 128 lanes when split 4 ways: no tile
    padding, so the compiler's argument bytes are the hand count (nano's 256/4 = 64 columns pad to 128)."""
    return nano(hidden_dim=512, mlp_dim=1024, **changes)


@pytest.fixture(scope="module")
def libtpu():
    if importlib.util.find_spec("libtpu") is None:
        missing("libtpu (the tpu-compile extra)", 'pip install -e ".[tpu-compile]"')
    targets.check_libtpu()


# ---------------------------------------------------------------------------------------------------------
# Targets and bad input: no libtpu needed


@pytest.mark.parametrize(
    "name, generation, chips, slices, topology",
    [
        ("v4-8", "v4", 4, 1, "2x2x1"),
        ("v4-2048", "v4", 1024, 1, "8x8x16"),
        ("v5e-4", "v5e", 4, 1, "2x2"),
        ("v5e-256", "v5e", 256, 1, "16x16"),
        ("2 x v5e-256", "v5e", 256, 2, "16x16"),
        ("2xv5e-4", "v5e", 4, 2, "2x2"),
        ("v5p-8", "v5p", 4, 1, "2x2x1"),
        ("v6e-64", "v6e", 64, 1, "8x8"),
    ],
)
def test_targets_are_spelled_as_the_cluster_configs(name, generation, chips, slices, topology):
    target = parse_target(name)
    assert (target.generation, target.chips, target.slices, target.topology) == (generation, chips, slices, topology)
    assert parse_target(target.name) == target


def test_cluster_pod_types_are_known_targets():
    from marin.execution.step import TPU_POD_TYPES  # the executor's table; the test may read both sides

    for pod_type in TPU_POD_TYPES:
        assert parse_target(pod_type).name == pod_type


def test_unknown_target_names_the_known_ones():
    with pytest.raises(ValueError, match="unknown TPU target 'v5e-3'.*v4-2048.*v5e-4.*2 x v5e-256"):
        parse_target("v5e-3")
    assert "v5p-8" in known_targets() and "v6e-256" in known_targets()


def test_a_mesh_that_does_not_divide_the_chips_names_axes_and_sizes():
    config = run_config(nano(), batch_size=8, mesh=MeshConfig(data=3, fsdp=-1))
    with pytest.raises(ValueError, match=r"v5e-4 has 4 chips: MeshConfig\(data=3, fsdp=-1.*not a multiple of 3"):
        aot_compile.compile_run(config, "v5e-4")
    config = run_config(nano(), batch_size=8, mesh=MeshConfig(data=1, fsdp=2, tensor=1))
    with pytest.raises(
        ValueError, match=r"MeshConfig\(data=1, fsdp=2, expert=1, context=1, tensor=1\) covers 2 devices.*4 chips"
    ):
        aot_compile.compile_run(config, "v5e-4")


def test_missing_libtpu_names_the_extra(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "libtpu" else real(name, *a))
    with pytest.raises(ModuleNotFoundError, match=r'pip install -e "\.\[tpu-compile\]"'):
        targets.check_libtpu()


def test_mismatched_libtpu_names_the_version_to_install(monkeypatch):
    wanted = targets.libtpu_requirement()
    if wanted is None:
        pytest.skip("this jax names no libtpu pin for its tpu extra")
    real_spec, real_version = importlib.util.find_spec, importlib.metadata.version
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: object() if name == "libtpu" else real_spec(name, *a)
    )
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.0.1" if name == "libtpu" else real_version(name))
    with pytest.raises(RuntimeError, match=rf"libtpu 0\.0\.1 is installed but jax .* {re.escape(wanted)}"):
        targets.check_libtpu()


def test_a_host_without_tpu_keeps_jax_off_libtpu(tmp_path, monkeypatch):
    real = importlib.util.find_spec
    fake = {"libtpu": object(), "jax_plugins": None}
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: fake[name] if name in fake else real(name, *a))
    environ = {}
    assert accelerators.keep_jax_off_absent_tpu(environ, root=str(tmp_path)) == "cpu"
    assert environ == {"JAX_PLATFORMS": "cpu", "TPU_SKIP_MDS_QUERY": "1"}
    assert accelerators.keep_jax_off_absent_tpu({"JAX_PLATFORMS": "tpu"}, root=str(tmp_path)) is None  # caller's choice
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "accel0").touch()  # a TPU VM: JAX keeps its TPU
    assert accelerators.keep_jax_off_absent_tpu({}, root=str(tmp_path)) is None
    fake["jax_plugins"] = object()  # a CUDA plugin beside libtpu: only the metadata probe is skipped
    environ = {}
    assert accelerators.keep_jax_off_absent_tpu(environ, root=str(tmp_path / "none")) is None
    assert environ == {"TPU_SKIP_MDS_QUERY": "1"}
    fake["libtpu"] = None  # without libtpu nothing changes
    assert accelerators.keep_jax_off_absent_tpu({}, root=str(tmp_path / "none")) is None


# ---------------------------------------------------------------------------------------------------------
# Compiled by libtpu


SCALARS = 4096
"""Allowance for the replicated scalars (step, PRNG key, the optimizer's counts): each takes a padded tile."""


def hand_count(params_per_chip: int, rows_per_chip: int, seq_len: int) -> int:
    """fp32 parameters and AdamW's two moments, plus the batch's four int32/fp32 [rows, seq] leaves."""
    return 3 * 4 * params_per_chip + 4 * 4 * rows_per_chip * seq_len


@pytest.mark.slow
def test_nano_fsdp_on_v5e_4_with_splash(libtpu):
    model = lane_sized()
    config = run_config(model, batch_size=8)
    report = aot_compile.compile_run(config, "v5e-4")
    assert report.mesh == {"data": 1, "fsdp": 4, "expert": 1, "context": 1, "tensor": 1} and report.dcn_axis is None
    step = report.programs["train_step"]
    assert step.compiled and report.fits() and report.fits("init") and report.fits("eval_step")
    assert step.mosaic_kernels == 3 * model.num_layers or step.mosaic_kernels >= 3  # splash forward, dq, dkv
    assert report.programs["eval_step"].mosaic_kernels >= 1
    layout = aot_compile.run_layout(config, aot_compile.topology_devices(report.target), sharded=True)
    state = aot_compile.state_shapes(config, layout)
    batch = aot_compile.batch_shapes(config, layout, 8)
    assert 0 <= step.argument_bytes - aot_compile.per_device_bytes((state, batch)) <= SCALARS
    assert 0 <= step.argument_bytes - hand_count(model.param_count // 4, 2, model.seq_len) <= SCALARS
    assert 0 <= step.alias_bytes - aot_compile.per_device_bytes(state) <= SCALARS  # the donated state, in place
    assert {c.kind for c in step.collectives} >= {"all-gather"} and all(
        c.crosses_dcn is False for c in step.collectives
    )
    assert 0 < report.mfu_ceiling() <= 1 and report.tokens_per_s_per_chip() > 0
    assert "v5e-4 (4 chips, 16 GiB each): fsdp 4" in report.describe()


@pytest.mark.slow
def test_nano_fsdp_tp_on_v4_8(libtpu):
    model = lane_sized()
    config = run_config(model, batch_size=8, mesh=MeshConfig(fsdp=2, tensor=2), sharding="fsdp_tp")
    report = aot_compile.compile_run(config, "v4-8", ("train_step",))
    step = report.programs["train_step"]
    assert report.target.chip.hbm_bytes == 32 * GIB and report.fits()
    assert step.mosaic_kernels >= 3  # splash inside shard_map over the tensor-split heads
    # fsdp_tp splits every matrix 4 ways (embed over fsdp, heads/mlp/vocab over tensor); the norms only 2 ways
    d, layers = model.hidden_dim, model.num_layers
    norms = d * (2 * layers + 1)
    params = (model.param_count - norms) // 4 + norms // 2
    expected = hand_count(params, 4, model.seq_len)  # the batch splits over fsdp only: tensor pairs share rows
    assert 0 <= step.argument_bytes - expected <= SCALARS
    assert {c.group_size for c in step.collectives} >= {2}


@pytest.mark.slow
def test_multislice_puts_the_data_axis_across_dcn(libtpu):
    config = run_config(nano(), batch_size=8, mesh=MeshConfig(data=2, fsdp=-1))
    report = aot_compile.compile_run(config, "2 x v5e-4", ("train_step",))
    assert report.target.total_chips == 8 and report.dcn_axis == "data"
    step = report.programs["train_step"]
    over_dcn = [c for c in step.collectives if c.crosses_dcn]
    assert over_dcn and all(c.kind == "all-reduce" and c.group_size == 2 for c in over_dcn)  # the gradient sum
    assert any(c.crosses_dcn is False and c.kind == "all-gather" for c in step.collectives)  # fsdp within a slice
    assert report.step_bound()["dcn"] > 0 and "data spans the 2 slices over DCN" in report.describe()


@pytest.mark.slow
def test_a_lever_makes_a_large_batch_fit(libtpu):
    config = run_config(nano(remat="full"), batch_size=8192)
    verdict = aot_compile.fit_verdict(config, "v5e-4")
    assert not verdict.fits and verdict.tried[0][0] == "as configured"
    assert "does not compile (needs" in verdict.tried[0][1]  # the compiler's own bytes
    assert verdict.lever == "remat='full', num_microbatches=2" and verdict.fitting.trainer.num_microbatches == 2
    assert verdict.fitting_report.fits()


@pytest.mark.slow
def test_the_8b_with_its_optimizer_state_is_refused_on_v5e_4(libtpu):
    model = model_preset("llama_8b")
    config = run_config(model, batch_size=16)
    verdict = aot_compile.fit_verdict(config, "v5e-4")
    assert not verdict.fits and verdict.report is None  # not compiled: the state alone is 22.4 GiB per chip
    assert math.isclose(verdict.state_bytes, 3 * 4 * model.param_count / 4, rel_tol=1e-6)
    assert "no lever shrinks it" in verdict.tried[0][1]
    assert verdict.smallest_slice is not None and verdict.smallest_slice.chips in (8, 16)
    assert f"the smallest slice that fits: {verdict.smallest_slice.name}" in verdict.describe()


def test_target_platform_follows_the_mesh_devices():
    from marin.trainer.axes import ShardingContext, target_platform, use_sharding

    assert target_platform() == jax.default_backend()
    context = ShardingContext(MeshConfig(fsdp=1).build(jax.devices()[:1]), ())
    with use_sharding(context):
        assert target_platform() == jax.devices()[0].platform
