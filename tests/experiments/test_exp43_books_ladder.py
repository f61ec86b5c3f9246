"""A tiny version of the books ladder, end to end through the executor on the bundled Gutenberg slice: the real
text's data steps, two budgets of three widths, their evals on the first held-out book, the fit and the target."""

import gzip
import json
from pathlib import Path

import pytest

from experiments import exp43_books_ladder
from marin.execution import Executor
from marin.execution.plan import plan_steps
from marin.scaling.ladder import LadderRules

ROOT = Path(__file__).resolve().parents[2]
TINY_RULES = LadderRules(seq_len=64, min_steps=6, max_batch=16, min_tokens_per_param=0.05, max_tokens_per_param=1e4)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_tiny_books_ladder_fits_and_predicts_on_held_out_books(books_store, ray_address):
    ladder = exp43_books_ladder.build(
        budgets=(3e9, 6e9),
        target_budget=2.4e10,
        rules=TINY_RULES,
        widths=(16, 24, 32),
        bootstrap_samples=200,
        heldout_books=1,
    )
    caller = str(ROOT / "experiments" / "exp43_books_ladder.py")
    result = Executor(prefix=str(books_store), caller_file=caller).run(ladder.steps)
    paths = {p.name: Path(p.output_path) for p in result.plan.steps}
    documents = json.loads((paths["documents/gutenberg"] / "summary.json").read_text())
    assert documents["train"]["documents"] == 45 and documents["validation"]["documents"] == 2
    with gzip.open(paths["documents/gutenberg"] / "validation" / "documents.jsonl.gz", "rt") as f:
        first_book = len(json.loads(f.readline())["text"].encode())  # the tiny ladder scores the first held-out book
    fit = json.loads((paths[ladder.fit.name] / "fit.json").read_text())
    assert len(fit["runs"]) == 6 and fit["heldout"] == "gutenberg" and fit["metric"] == "bpb"
    for run in fit["runs"]:  # bits per byte of real English: below 8 (a byte's worth) and above 1
        results = json.loads((Path(run["eval_path"]) / "results.json").read_text())["validation"]["gutenberg"]
        assert run["loss"] == results["bits_per_byte"] and 1.0 < run["loss"] < 8.0
        assert results["documents"] == 1 and results["bytes"] == first_book
    prediction = fit["prediction"]
    assert 1.0 < prediction["loss"] < 8.0 and prediction["budget"] == 2.4e10
    low, high = prediction["bootstrap_interval"]
    assert low < prediction["loss"] < high
    assert fit["laws"]["loss"]["gamma"] > 0  # the fitted law falls with compute...
    top = min(run["loss"] for run in fit["runs"] if run["budget"] == 6e9)
    assert prediction["loss"] < top  # ...so 4x the top budget is predicted below its best run (here 3.12 < 3.38)


def test_the_deep_family_is_its_own_ladder_with_its_own_target():
    names = {p.name for p in plan_steps(exp43_books_ladder.LADDER.steps, "/nonexistent").steps}  # deep: the default
    nano = {p.name for p in plan_steps(exp43_books_ladder.build(family="nano").steps, "/nonexistent").steps}
    assert "checkpoints/books-ladder-deep-target-1.6e13-h64d4" in names and "analysis/books-ladder-deep-fit" in names
    assert "checkpoints/books-ladder-target-1.6e13-h96" in nano
    assert not {n for n in names if "ladder" in n} & nano  # no run shared between the two ladders
    data = {n for n in names if "ladder" not in n}
    assert data == {"raw/gutenberg", "documents/gutenberg", "tokenizers/gutenberg-bpe2k", "tokenized/gutenberg-bpe2k"}
    assert data <= nano  # the data steps are shared
    with pytest.raises(ValueError, match="family must be one of"):
        exp43_books_ladder.build(family="wide")
