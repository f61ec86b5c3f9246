"""Identity as a table: which changes move a step's output path and which keep it. Pure planning, no I/O."""

import dataclasses

import pytest

from marin.execution import (
    Executor,
    ExecutorStep,
    InputName,
    PlanError,
    output_path_of,
    this_output_path,
    versioned,
)
from marin.execution.plan import instantiate_config, plan_steps
from marin.identity import added_field, runtime_field


@dataclasses.dataclass(frozen=True)
class Cfg:
    output_path: object = None
    size: object = None
    note: object = None
    inputs: object = ()
    options: object = None


def noop(config):
    return None


def other_fn(config):
    return None


def step(name="s", **fields):
    return ExecutorStep(name=name, fn=noop, config=Cfg(output_path=this_output_path(), **fields))


def path_of(s, prefix="/p"):
    plan = plan_steps([s], prefix)
    return next(p.output_path for p in plan.steps if p.step is s or p.name == s.name)


def test_output_path_is_prefix_name_hash():
    p = path_of(step("tokenized/x", size=versioned(3)))
    assert p.startswith("/p/tokenized/x-") and len(p.rsplit("-", 1)[1]) == 8


@pytest.mark.parametrize(
    "a, b, same",
    [
        (dict(size=versioned(3)), dict(size=versioned(3)), True),
        (dict(size=versioned(3)), dict(size=versioned(4)), False),
        (dict(size=versioned(3), note="a"), dict(size=versioned(3), note="b"), True),  # unversioned
        (dict(options=versioned({"a": 1, "b": 2})), dict(options=versioned({"b": 2, "a": 1})), True),  # key order
        (dict(options={"lr": versioned(1e-3)}), dict(options={"lr": versioned(3e-3)}), False),  # nested path
        (dict(size=versioned((1, 2))), dict(size=versioned([1, 2])), True),  # tuple == list as JSON
        (dict(size=versioned(1)), dict(size=versioned("1")), False),
    ],
)
def test_identity_table(a, b, same):
    assert (path_of(step(**a)) == path_of(step(**b))) is same


def test_name_changes_path():
    assert path_of(step("a", size=versioned(1))) != path_of(step("b", size=versioned(1)))


def test_hash_does_not_depend_on_prefix():
    s = step(size=versioned(1))
    a = path_of(s, "gs://bucket-a/lab")
    b = path_of(s, "gs://bucket-b")
    assert a.rsplit("/", 1)[1] == b.rsplit("/", 1)[1]


def test_dependency_version_propagates_and_subpath_counts():
    up1, up2 = step("up", size=versioned(1)), step("up", size=versioned(2))
    down1 = step("down", inputs=(up1 / "data",))
    down2 = step("down", inputs=(up2 / "data",))
    down3 = step("down", inputs=(up1 / "other",))
    assert len({path_of(down1), path_of(down2), path_of(down3)}) == 3


def test_nonblocking_input_counts_for_identity_but_not_blocking():
    up = step("up", size=versioned(1))
    blocking = step("down", inputs=(up / "x",))
    nonblocking = step("down", inputs=((up / "x").nonblocking(),))
    assert path_of(blocking) == path_of(nonblocking)
    plan = plan_steps([nonblocking], "/p")
    down = next(p for p in plan.steps if p.name == "down")
    assert down.deps == [] and [d.name for d in down.nonblocking_deps] == ["up"]


def test_identical_steps_declared_twice_are_one_step():
    a, b = step("x", size=versioned(1)), step("x", size=versioned(1))
    down = step("down", inputs=(a, b / "sub"))
    plan = plan_steps([a, b, down], "/p")
    assert sorted(p.name for p in plan.steps) == ["down", "x"]
    assert len(plan.steps[-1].deps) == 1


def test_same_name_different_version_are_two_steps():
    plan = plan_steps([step("x", size=versioned(1)), step("x", size=versioned(2))], "/p")
    assert len(plan.steps) == 2


def test_same_identity_different_function_is_an_error():
    a = step("x", size=versioned(1))
    b = ExecutorStep(name="x", fn=other_fn, config=a.config)
    with pytest.raises(PlanError, match="different functions"):
        plan_steps([a, b], "/p")


def test_dependencies_are_collected_and_ordered_first():
    a = step("a")
    b = step("b", inputs=(a,))
    c = step("c", inputs=(b, a))
    order = [p.name for p in plan_steps([c], "/p").steps]
    assert order == ["a", "b", "c"]


def test_undeclared_step_name_is_an_error_naming_step_and_field():
    s = step("down", inputs=(output_path_of("nowhere/step", "x"),))
    with pytest.raises(PlanError, match=r"'down', field 'inputs\[0\]'.*undeclared step 'nowhere/step'"):
        plan_steps([s], "/p")


def test_name_reference_resolves_to_declared_step():
    up = step("up", size=versioned(1))
    down = step("down", inputs=(output_path_of("up", "f"),))
    plan = plan_steps([up, down], "/p")
    down_p = next(p for p in plan.steps if p.name == "down")
    assert down_p.inputs["inputs[0]"] == plan.steps[0].output_path + "/f"


def test_cycle_is_an_error_naming_steps_and_fields():
    a = step("a", inputs=(output_path_of("b"),))
    b = step("b", inputs=(output_path_of("a"),))
    with pytest.raises(PlanError, match=r"cycle: .*'a' \(field 'inputs\[0\]'\).*'b' \(field 'inputs\[0\]'\)"):
        plan_steps([a, b], "/p")


def test_config_must_be_a_dataclass():
    with pytest.raises(PlanError, match="config must be a dataclass instance, got dict"):
        plan_steps([ExecutorStep(name="x", fn=noop, config={"a": 1})], "/p")


def test_unserializable_versioned_value_names_field():
    with pytest.raises(PlanError, match="field 'size'.*set"):
        plan_steps([step(size=versioned({1, 2}))], "/p")


def test_instantiate_replaces_every_placeholder():
    up = step("up", size=versioned(1))
    down = ExecutorStep(
        name="down",
        fn=noop,
        config=Cfg(
            output_path=this_output_path("out"),
            size=versioned(7),
            inputs=(up / "a", InputName.hardcoded("raw/manual")),
            options={"nested": [up.cd("b").nonblocking()]},
        ),
    )
    plan = plan_steps([down], "/p")
    up_p, down_p = plan.steps
    config = instantiate_config(down_p)
    assert config == Cfg(
        output_path=down_p.output_path + "/out",
        size=7,
        inputs=(up_p.output_path + "/a", "/p/raw/manual"),
        options={"nested": [up_p.output_path + "/b"]},
    )


def test_override_output_path_relative_to_prefix():
    s = ExecutorStep(name="x", fn=noop, config=Cfg(output_path=this_output_path()), override_output_path="pinned/x")
    assert path_of(s, "gs://b/lab") == "gs://b/lab/pinned/x"


@pytest.mark.parametrize("shape", ["chain", "fan"])
def test_plan_of_1000_steps_has_no_recursion_limit(shape):
    root = step("n/0", size=versioned(0))
    steps = [root]
    for i in range(1, 1000):
        parent = steps[-1] if shape == "chain" else root
        steps.append(step(f"n/{i}", size=versioned(i), inputs=(parent / "out",)))
    plan = Executor(prefix="/p").plan([steps[-1]] if shape == "chain" else steps)  # speed: benchmarks/
    assert [p.name for p in plan.steps] == [s.name for s in steps]


@dataclasses.dataclass(frozen=True)
class Batching:
    batch: int
    microbatches: int = runtime_field(1)


def test_runtime_fields_of_a_versioned_dataclass_are_hashed_out_and_still_run():
    fast = step("t", size=versioned(Batching(batch=8, microbatches=4)))
    slow = step("t", size=versioned(Batching(batch=8, microbatches=1)))
    assert path_of(fast) == path_of(slow)
    assert path_of(step("t", size=versioned(Batching(batch=16)))) != path_of(slow)
    planned = plan_steps([fast], "/p").steps[0]
    assert planned.version["config"]["size"] == {"batch": 8}
    assert instantiate_config(planned).size == Batching(batch=8, microbatches=4)


@dataclasses.dataclass(frozen=True)
class Before:
    batch: int


@dataclasses.dataclass(frozen=True)
class After:  # Before, with an option added later
    batch: int
    qk_norm: str = added_field("none")


def test_an_added_field_at_its_default_keeps_the_identity_of_results_computed_before_it():
    old = plan_steps([step("t", size=versioned(Before(batch=8)))], "/p").steps[0]
    same = plan_steps([step("t", size=versioned(After(batch=8)))], "/p").steps[0]
    other = plan_steps([step("t", size=versioned(After(batch=8, qk_norm="head")))], "/p").steps[0]
    assert same.output_path == old.output_path and same.version["config"]["size"] == {"batch": 8}
    assert other.output_path != old.output_path and other.version["config"]["size"] == {"batch": 8, "qk_norm": "head"}
    assert instantiate_config(other).size == After(batch=8, qk_norm="head")
