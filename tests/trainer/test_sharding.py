"""Sharding by config: mesh and rule validation, the presets' placements, and (in a subprocess with 8
simulated CPU devices) DP, FSDP, TP and FSDP+TP training equal to the single-device run, with the state's
actual shardings checked against the rules and checkpoints restored across meshes.

The 8-device part runs ``sharding_script.py`` in a subprocess because ``XLA_FLAGS`` only counts before
JAX initialises. Each training run compiles an init and a step program (~5 s each on 2 busy cores), so
the default run trains three meshes (single, fsdp, tp) and the slow one the other two plus eval and
``initialize_from``.
"""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from jax.sharding import AbstractMesh, AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from marin.trainer import TrainerConfig
from marin.trainer.axes import BATCH, SEQ, ShardingContext, partition_spec
from marin.trainer.checkpoint import CheckpointConfig, Checkpointer
from marin.trainer.loop import _check_batches_fit
from marin.trainer.mesh import (
    MESH_AXES,
    SHARDING_PRESETS,
    MeshConfig,
    batch_shards,
    resolve_rules,
    sharding_context,
    tree_shardings,
)
from marin.trainer.model import init_params, param_axes
from marin.trainer.optim import OptimizerConfig
from marin.trainer.step import PrecisionPolicy, StepConfig, make_train_step, state_shardings
from tests.trainer.conftest import tiny_model

SCRIPT = Path(__file__).with_name("sharding_script.py")
ROOT = Path(__file__).resolve().parents[2]
TOLERANCE = 1e-5  # fp32 compute; only the order of floating-point additions differs between meshes

# The worked example, by hand (tiny model: embed [vocab, embed], lm_head [embed, vocab], wq [layers, embed,
# heads, head_dim], wo [layers, heads, head_dim, embed], w_down [layers, mlp, embed], final_norm [embed]).
EXPECTED = {
    "dp": {
        "embed": [None, None],
        "lm_head": [None, None],
        "layers/wq": [None] * 4,
        "layers/wo": [None] * 4,
        "layers/w_down": [None] * 3,
        "final_norm": [None],
    },
    "fsdp": {
        "embed": [None, "fsdp"],
        "lm_head": ["fsdp", None],
        "layers/wq": [None, "fsdp", None, None],
        "layers/wo": [None, None, None, "fsdp"],
        "layers/w_down": [None, None, "fsdp"],
        "final_norm": ["fsdp"],
    },
    "tp": {
        "embed": ["tensor", None],
        "lm_head": [None, "tensor"],
        "layers/wq": [None, None, "tensor", None],
        "layers/wo": [None, "tensor", None, None],
        "layers/w_down": [None, "tensor", None],
        "final_norm": [None],
    },
    "fsdp_tp": {
        "embed": ["tensor", "fsdp"],
        "lm_head": ["fsdp", "tensor"],
        "layers/wq": [None, "fsdp", "tensor", None],
        "layers/wo": [None, "tensor", None, "fsdp"],
        "layers/w_down": [None, "tensor", "fsdp"],
        "final_norm": ["fsdp"],
    },
}


def _json_spec(spec: P, ndim: int) -> list:
    """A PartitionSpec as sharding_script.py reports it: one entry per dimension."""
    entries = list(spec) + [None] * (ndim - len(spec))
    return [list(e) if isinstance(e, tuple) and len(e) > 1 else (e[0] if isinstance(e, tuple) else e) for e in entries]


def _param_axes_by_name() -> dict[str, tuple]:
    flat = jax.tree_util.tree_flatten_with_path(param_axes(tiny_model()), is_leaf=lambda x: isinstance(x, tuple))[0]
    return {"/".join(k.key for k in path): axes for path, axes in flat}


def _expected_spec(leaf: str, rules) -> list | None:
    """What the rules say for a state leaf: parameters, their EMA and their Adam moments follow the
    parameter's logical axes; everything else (step, PRNG key, optimizer counters) is replicated."""
    axes = _param_axes_by_name()
    parts = leaf.split("/")
    for start in range(len(parts)):
        name = "/".join(parts[start:])
        if name in axes and (parts[0] in ("params", "ema") or parts[start - 1] in ("mu", "nu")):
            return _json_spec(partition_spec(axes[name], rules), len(axes[name]))
    return None  # replicated: all entries None


def _run_script(out: Path, *jobs: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(out), *jobs], env=env, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-5000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["devices"] == 8
    # XLA prints this when the partitioner has to replicate a whole tensor to reshard it (a rule or
    # constraint that fights the data flow); none of the presets may trigger it.
    assert "Involuntary full rematerialization" not in proc.stderr
    return report


@pytest.fixture(scope="module")
def fast_report(tmp_path_factory) -> dict:
    return _run_script(
        tmp_path_factory.mktemp("sharding"),
        "single",
        "fsdp",
        "tp",
        "restore:fsdp:tp",
        "restore:tp:fsdp",
        "step_collectives:dp",
        "step_collectives:tp",
    )


@pytest.fixture(scope="module")
def slow_report(tmp_path_factory) -> dict:
    return _run_script(
        tmp_path_factory.mktemp("sharding_slow"),
        "--eval",
        "single",
        "dp",
        "fsdp_tp",
        "restore:fsdp_tp:dp",
        "init_from:single:fsdp_tp",
        "block:fsdp_tp",
        "collectives:fsdp_tp",
    )


RUNS = [
    pytest.param("fsdp", "fast_report", id="fsdp"),
    pytest.param("tp", "fast_report", id="tp"),
    pytest.param("dp", "slow_report", id="dp", marks=pytest.mark.slow),
    pytest.param("fsdp_tp", "slow_report", id="fsdp_tp", marks=pytest.mark.slow),
]


# ----------------------------------------------------------------------------------------------------------
# 8 devices (subprocess)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("run, report", RUNS)
def test_five_steps_equal_the_single_device_run(run, report, request):
    runs = request.getfixturevalue(report)["runs"]
    single, sharded = runs["single"], runs[run]
    assert sharded["step"] == single["step"] == 5 and len(sharded["losses"]) == 5
    np.testing.assert_allclose(sharded["losses"], single["losses"], rtol=0, atol=TOLERANCE)
    assert sharded["param_diff"] <= TOLERANCE, sharded["param_diff"]
    assert sharded["opt_state_diff"] <= TOLERANCE and sharded["ema_diff"] <= TOLERANCE
    assert not sharded["warnings"], sharded["warnings"]  # e.g. "donated buffers were not usable"


@pytest.mark.timeout(900)
@pytest.mark.parametrize("run, report", RUNS)
def test_state_shardings_are_what_the_rules_say(run, report, request):
    """Every leaf's ``.sharding.spec``, read from the trained state's arrays in the subprocess."""
    entry = request.getfixturevalue(report)["runs"][run]
    assert (
        entry["mesh"]
        == {
            "dp": {"data": 8, "fsdp": 1, "expert": 1, "context": 1, "tensor": 1},
            "fsdp": {"data": 1, "fsdp": 8, "expert": 1, "context": 1, "tensor": 1},
            "tp": {"data": 4, "fsdp": 1, "expert": 1, "context": 1, "tensor": 2},
            "fsdp_tp": {"data": 2, "fsdp": 2, "expert": 1, "context": 1, "tensor": 2},
        }[run]
    )
    specs = entry["specs"]
    for name, spec in EXPECTED[run].items():  # the hand-written table
        assert specs[f"params/{name}"] == spec, name
        assert specs[f"opt_state/1/mu/{name}"] == specs[f"opt_state/1/nu/{name}"] == specs[f"ema/{name}"] == spec, name
    rules = SHARDING_PRESETS[run]
    for leaf, spec in specs.items():  # every leaf, against the rules
        expected = _expected_spec(leaf, rules)
        assert spec == (expected if expected is not None else [None] * len(spec)), leaf
    assert any(s != [None] * len(s) for s in specs.values()) == (run != "dp")
    assert {"step", "rng", "opt_state/1/count", "opt_state/3/count"} <= set(specs)


@pytest.mark.timeout(900)
def test_checkpoint_written_under_one_mesh_restores_under_another(fast_report):
    """FSDP's final checkpoint resumed under TP (and TP's under FSDP) gives the very same values, placed
    as the restoring run's rules say."""
    runs = fast_report["runs"]
    for source, target in (("fsdp", "tp"), ("tp", "fsdp")):
        restored = runs[f"restore:{source}:{target}"]
        assert restored["bitwise_equal"] and restored["step"] == 5
        assert restored["specs"] == runs[target]["specs"] and restored["mesh"] == runs[target]["mesh"]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_eval_restore_and_initialize_from_on_a_3d_mesh(slow_report):
    runs = slow_report["runs"]
    single, sharded = runs["single"]["eval"], runs["fsdp_tp"]["eval"]
    assert single["eval/held/loss"] == pytest.approx(sharded["eval/held/loss"], abs=TOLERANCE)
    restored = runs["restore:fsdp_tp:dp"]
    assert restored["bitwise_equal"] and restored["specs"] == runs["dp"]["specs"]
    init = runs["init_from:single:fsdp_tp"]  # a 1-device checkpoint's EMA becomes the 3-D run's parameters
    assert init["params_are_source_ema"] and init["ema_is_params"] and init["step"] == 0
    assert init["specs"] == runs["fsdp_tp"]["specs"]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_loss_in_blocks_on_a_3d_mesh_equals_the_whole_logits_on_one_device(slow_report):
    """``loss_block`` on data x fsdp x tensor (batch rows over data and fsdp, the head's vocabulary over tensor):
    the block loop's losses, gradients (through the state they update) and eval equal the one-device run
    computed from the whole logits, and the state is placed as without blocks."""
    runs = slow_report["runs"]
    single, blocked = runs["single"], runs["block:fsdp_tp"]
    np.testing.assert_allclose(blocked["losses"], single["losses"], rtol=0, atol=TOLERANCE)
    assert blocked["param_diff"] <= TOLERANCE and blocked["opt_state_diff"] <= TOLERANCE, blocked
    assert blocked["ema_diff"] <= TOLERANCE and blocked["step"] == 5
    assert blocked["eval"]["eval/held/loss"] == pytest.approx(single["eval"]["eval/held/loss"], abs=TOLERANCE)
    assert blocked["specs"] == runs["fsdp_tp"]["specs"] and blocked["mesh"] == runs["fsdp_tp"]["mesh"]
    assert not blocked["warnings"], blocked["warnings"]


@pytest.mark.timeout(900)
@pytest.mark.parametrize("run", ["dp", "tp"])
def test_the_cpu_steps_transposes_keep_their_shards(fast_report, run):
    """On CPU the dense and attention backwards copy transposes into row-major order (``layouts.row_major``, a
    ``LayoutConstraint`` custom call) so that bf16 products stay on the fast kernels. The partitioner knows
    nothing of that call and replicated its operand: the tiny bf16 step all-gathered its activations, 35
    times under dp and 59 under tp, where neither preset ever gathers anything (dp replicates the parameters
    and splits the rows; tp reduces the heads' and the MLP's partial sums). Applied per shard, none remain,
    and every product is still bf16 x bf16."""
    found = fast_report["runs"][f"step_collectives:{run}"]
    assert [c for c in found["collectives"] if c[0] == "all-gather"] == []
    assert len(found["dots"]) > 40 and all(types == ["bf16", "bf16"] for types in found["dots"]), found["dots"]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_loss_in_blocks_reduces_the_heads_gradient_once_after_its_loop(slow_report):
    """Summed over the batch rows inside the block loop, the head's gradient would be all-reduced over the
    batch's devices once per block (blocks x a [embed, vocab] gradient of traffic); kept per shard of the rows,
    it is reduced once after the loop. Inside the loop only the vocabulary-parallel softmax's reductions over
    the tensor axis remain (per position, and the hidden states' gradient), each smaller than a head shard."""
    found = slow_report["runs"]["collectives:fsdp_tp"]
    head_shard = math.prod(found["head_shard"])  # [embed / fsdp, vocab / tensor] = [32, 128]
    assert found["loop"], "the vocabulary is sharded: the loop's softmax must reduce over the tensor axis"
    assert all(math.prod(shape) < head_shard for _, _, shape in found["loop"]), found["loop"]
    reductions = [shape for op, _, shape in found["outside"] if op in ("all-reduce", "reduce-scatter")]
    assert [s for s in reductions if math.prod(s) >= head_shard], found["outside"]


# ----------------------------------------------------------------------------------------------------------
# In process (one device; larger meshes as AbstractMesh where only shapes and specs matter)


def _abstract_context(data=2, fsdp=2, tensor=2, sharding="fsdp_tp", expert=1, context=1) -> ShardingContext:
    mesh = AbstractMesh((data, fsdp, expert, context, tensor), MESH_AXES, axis_types=(AxisType.Auto,) * 5)
    return ShardingContext(mesh, resolve_rules(sharding))


def test_mesh_config_resolves_sizes_and_validates_naming_the_field():
    assert MeshConfig().axis_sizes(8) == {"data": 1, "fsdp": 8, "expert": 1, "context": 1, "tensor": 1}
    assert MeshConfig(data=2, fsdp=-1, tensor=2).axis_sizes(8) == {
        "data": 2,
        "fsdp": 2,
        "expert": 1,
        "context": 1,
        "tensor": 2,
    }
    assert MeshConfig(data=-1, fsdp=1, tensor=2).axis_sizes(8) == {
        "data": 4,
        "fsdp": 1,
        "expert": 1,
        "context": 1,
        "tensor": 2,
    }
    assert MeshConfig(data=1, fsdp=1).axis_sizes(8) == {  # 1 of 8
        "data": 1,
        "fsdp": 1,
        "expert": 1,
        "context": 1,
        "tensor": 1,
    }
    assert MeshConfig(fsdp=2, expert=-1).axis_sizes(8) == {
        "data": 1,
        "fsdp": 2,
        "expert": 4,
        "context": 1,
        "tensor": 1,
    }
    assert MeshConfig(fsdp=2, context=-1).axis_sizes(8)["context"] == 4
    with pytest.raises(
        ValueError, match=r"MeshConfig.tensor must be a positive int or -1 \(the remaining devices\), got 0"
    ):
        MeshConfig(tensor=0)
    with pytest.raises(
        ValueError, match="at most one axis may be -1, got data=-1, fsdp=-1, expert=1, context=1, tensor=1"
    ):
        MeshConfig(data=-1)
    not_multiple = r"MeshConfig\(data=3, fsdp=-1, expert=1, context=1, tensor=1\): 8 devices are not a multiple of 3"
    with pytest.raises(ValueError, match=not_multiple):
        MeshConfig(data=3).axis_sizes(8)
    with pytest.raises(ValueError, match="needs 16 devices, only 8 available"):
        MeshConfig(data=4, fsdp=4).axis_sizes(8)


def test_rules_by_preset_or_explicit_and_validated():
    assert resolve_rules("fsdp") == (
        (BATCH, ("data", "fsdp", "expert")),
        ("experts", "expert"),
        ("seq", "context"),
        ("embed", "fsdp"),
    )
    explicit = [["batch", ["data", "fsdp"]], ["embed", "fsdp"], ["mlp", None]]  # as YAML would parse it
    assert resolve_rules(explicit) == (("batch", ("data", "fsdp")), ("embed", "fsdp"), ("mlp", None))
    with pytest.raises(ValueError, match=r"TrainerConfig.sharding must be one of \['dp', 'fsdp', 'fsdp_tp', 'tp'\]"):
        TrainerConfig(num_train_steps=1, batch_size=8, sharding="zero3")
    with pytest.raises(ValueError, match="TrainerConfig.sharding: rule for 'embed' names mesh axes \\['model'\\]"):
        TrainerConfig(num_train_steps=1, batch_size=8, sharding=(("embed", "model"),))
    with pytest.raises(ValueError, match="unknown logical axis 'hidden'"):
        resolve_rules((("hidden", "fsdp"),))


def test_presets_place_parameters_as_the_worked_example_says():
    axes = _param_axes_by_name()
    for preset, table in EXPECTED.items():
        for name, spec in table.items():
            assert _json_spec(partition_spec(axes[name], SHARDING_PRESETS[preset]), len(axes[name])) == spec, (
                preset,
                name,
            )
        # every preset splits the batch over data x fsdp x expert (the expert axis is data-parallel outside MoE)
        # and each sequence over the context axis
        assert partition_spec((BATCH, SEQ), SHARDING_PRESETS[preset]) == P(("data", "fsdp", "expert"), "context")


def test_state_shardings_mirror_parameters_onto_adam_moments():
    cfg = tiny_model()
    context = _abstract_context()
    tx = OptimizerConfig().build(10, param_axes(cfg))
    shardings = state_shardings(context, cfg, tx, ema=True, policy=PrecisionPolicy())
    adam = shardings.opt_state[1]
    assert adam.mu["layers"]["wq"].spec == adam.nu["layers"]["wq"].spec == P(None, "fsdp", "tensor", None)
    assert shardings.params["layers"]["wq"] == shardings.ema["layers"]["wq"] == adam.mu["layers"]["wq"]
    assert adam.count.spec == P() and shardings.opt_state[3].count.spec == P() and shardings.step.spec == P()
    assert batch_shards(context) == 4


def test_a_dimension_that_does_not_divide_is_an_error_naming_the_parameter():
    cfg = tiny_model()  # 2 kv heads cannot split over 4 tensor devices
    shapes = jax.eval_shape(lambda: init_params(cfg, jax.random.PRNGKey(0)))
    with pytest.raises(
        ValueError, match=r"\['layers'\]\['wk'\]: dimension 'kv_heads' of size 2 does not divide into 4 shards"
    ):
        tree_shardings(_abstract_context(data=1, fsdp=2, tensor=4), param_axes(cfg), shapes)


def test_batches_must_split_over_the_batch_shards():
    trainer = TrainerConfig(num_train_steps=1, batch_size=16, num_microbatches=4, eval_batch_size=6)
    _check_batches_fit(trainer, 4, evaluates=False)
    with pytest.raises(ValueError, match=r"16 / 4 = 4 rows per microbatch do not split over the 8 batch shards"):
        _check_batches_fit(trainer, 8, evaluates=False)
    with pytest.raises(ValueError, match=r"eval_batch_size \(6\) does not split over the 4 batch shards"):
        _check_batches_fit(trainer, 4, evaluates=True)


def test_one_device_is_the_unsharded_program():
    """On one device there is no context: the step is the plain jit of before (no constraints, no
    in/out shardings), which the other trainer tests (including bitwise resume) exercise."""
    assert jax.device_count() == 1
    assert sharding_context(MeshConfig(), "fsdp_tp") is None
    cfg, opt = tiny_model(), OptimizerConfig()
    with pytest.raises(ValueError, match="pass both context and shardings, or neither"):
        make_train_step(
            cfg, opt.build(10, param_axes(cfg)), opt.lr_schedule(10), StepConfig(), context=_abstract_context()
        )


def test_restore_places_leaves_with_the_template_sharding(tmp_path):
    mesh = MeshConfig(fsdp=1).build()
    state = {"w": np.arange(12, dtype=np.float32).reshape(3, 4), "n": np.int32(3)}
    ckpt = Checkpointer(str(tmp_path), CheckpointConfig(async_save=False))
    ckpt.save(state, 1, "permanent")
    sharding = NamedSharding(mesh, P("fsdp", None))
    template = {
        "w": jax.ShapeDtypeStruct((3, 4), np.float32, sharding=sharding),
        "n": jax.ShapeDtypeStruct((), np.int32),
    }
    restored, step = ckpt.restore_latest(template)
    assert step == 1 and restored["w"].sharding == sharding and restored["n"].sharding != sharding
    np.testing.assert_array_equal(restored["w"], state["w"])
    ckpt.close()
