"""Imports only run downward (ARCHITECTURE.md): every ``import marin...`` in the library and the browser,
in-function imports included, is checked against the layer table below."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
# Leaf modules every layer may use: they import nothing from the lab.
LEAVES = {
    "marin.allocator",
    "marin.identity",
    "marin.multihost",
    "marin.validation",
    "marin.progress",
    "marin.logs",
    "marin.accelerators",  # imported by marin/__init__.py itself: keeps JAX off an absent TPU
}
GROUND = {"marin.storage", *LEAVES}
DATA_STEPS = {
    "marin.corpus",
    "marin.download",
    "marin.dedupe",
    "marin.tokenize",
    "marin.extract",
    "marin.quality",
    "marin.chat",
    "marin.environments",  # RL prompt sets and rewards: data formats, never the trainer
}
TOKEN_CACHE_FORMAT = {"marin.tokenize.reader", "marin.tokenize.cache_format"}
FIT_RECORD = {"marin.scaling.record", "marin.scaling.heldout"}  # fit.json's schema and the held-out loss: numpy-free
ALLOWED = {
    "marin": LEAVES,  # the package's __init__: what runs before any subpackage
    **{leaf: set() for leaf in LEAVES},
    "marin.storage": set(),
    "marin.parallel": GROUND,
    "marin.execution": GROUND | {"marin.parallel"},  # the executor knows no step's content
    "marin.trainer": GROUND | TOKEN_CACHE_FORMAT,  # and never the executor
    **{step: GROUND | {"marin.parallel"} | DATA_STEPS for step in DATA_STEPS},  # never the trainer
    "marin.inference": GROUND | {"marin.trainer"} | DATA_STEPS,
    "marin.evaluation": GROUND | {"marin.parallel", "marin.trainer", "marin.inference"} | DATA_STEPS,
    "marin.export": GROUND | {"marin.trainer", "marin.inference"} | DATA_STEPS,
    # preference optimization: the trainer's loop with its own objective, reference models through inference,
    # pair caches from the chat package; nothing below imports it
    "marin.posttrain": GROUND | {"marin.parallel", "marin.trainer", "marin.inference"} | DATA_STEPS,
    "marin.scaling": GROUND | {"marin.trainer"},  # model sizes from the trainer's configs; fits on stored evals
    "marin.report": GROUND | {"marin.execution"} | FIT_RECORD,  # the executor's records, fit.json through its record
    # reads what the executor writes (and SFT caches in the token-cache format, and the leaderboard, which is
    # read from the same files); never the trainer
    "data_browser": GROUND | {"marin.execution", "marin.report.leaderboard"} | TOKEN_CACHE_FORMAT | FIT_RECORD,
}


def _owner(module: str) -> str:
    if module == "data_browser" or module.startswith("data_browser."):
        return "data_browser"
    return ".".join(module.split(".")[:2])


def _imports():
    for path in sorted([*ROOT.joinpath("marin").rglob("*.py"), *ROOT.joinpath("data_browser").rglob("*.py")]):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                if name.split(".")[0] in ("marin", "data_browser", "experiments"):
                    yield module, name, f"{path.relative_to(ROOT)}:{node.lineno}"


def _allowed(source: str, target: str) -> bool:
    owner = _owner(source)
    if target == "marin" or _owner(target) == owner:
        return True
    rules = ALLOWED.get(owner)
    assert rules is not None, f"{source}: package {owner} has no row in the layer table"
    return any(target == rule or target.startswith(rule + ".") for rule in rules)


def test_imports_only_run_downward():
    wrong = [
        f"{where}: {source} imports {target}" for source, target, where in _imports() if not _allowed(source, target)
    ]
    assert not wrong, "upward or sideways imports:\n" + "\n".join(wrong)


@pytest.mark.parametrize(
    "source,target",
    [
        ("marin.trainer.loop", "marin.posttrain.rl.loop"),  # RL (issue 38): neither trainer nor inference
        ("marin.inference.engine", "marin.posttrain.rl.rollout"),
        ("marin.environments.rewards", "marin.trainer.step"),  # rewards are data: never the trainer
        ("marin.posttrain.rl.loop", "marin.execution"),
        ("marin.execution.ray_runner", "marin.trainer.distributed"),
        ("marin.tokenize.step", "marin.trainer.data"),
        ("marin.trainer.loop", "marin.execution"),
        ("marin.trainer.loop", "marin.tokenize.step"),
        ("marin.export.step", "marin.evaluation.step"),
        ("data_browser.app", "marin.trainer.checkpoint"),
        ("marin.validation", "marin.execution.step"),
        ("data_browser.fit", "marin.scaling.fit"),
        ("marin.report.render", "marin.scaling.surface"),
        ("marin.trainer.loop", "marin.posttrain.dpo"),
        ("marin.inference.engine", "marin.posttrain.objective"),
        ("marin.evaluation.step", "marin.posttrain.losses"),
        ("marin.posttrain.dpo", "marin.execution"),
    ],
)
def test_the_table_refuses_the_leaks_it_exists_for(source, target):
    assert not _allowed(source, target)
