"""A tiny version of the nano ladder, end to end through the executor on the quickstart's data: two budgets
of three widths, their evals, the fit, the target, then the report with the prediction beside the actual."""

import json
from pathlib import Path

import pytest

from experiments import exp27_nano_ladder
from marin.execution import Executor
from marin.report import Links, write_report
from marin.report.leaderboard import collect_boards
from marin.scaling.ladder import LadderRules

ROOT = Path(__file__).resolve().parents[2]
DATA_DIRS = ("corpus", "raw", "documents", "extracted", "attributes", "classifiers", "filtered", "tokenizers")
TINY_RULES = LadderRules(seq_len=64, min_steps=6, max_batch=16, min_tokens_per_param=0.05, max_tokens_per_param=1e4)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_tiny_ladder_fits_predicts_and_reports_the_target(quickstart_run, tmp_path):
    # The quickstart's data steps, shared (linked) rather than recomputed: same hashes, already SUCCESS.
    store = tmp_path / "store"
    store.mkdir()
    for name in (*DATA_DIRS, "tokenized"):
        (store / name).symlink_to(Path(quickstart_run["prefix"]) / name)
    ladder = exp27_nano_ladder.build(
        budgets=(3e9, 6e9), target_budget=2.4e10, rules=TINY_RULES, widths=(16, 24, 32), bootstrap_samples=200
    )
    caller = str(ROOT / "experiments" / "exp27_nano_ladder.py")
    result = Executor(prefix=str(store), caller_file=caller).run(ladder.steps)
    ran = {p.name for p in result.plan.steps if p.identity in result.ran}
    assert ran == {s.name for s in (*ladder.runs, *ladder.evals, ladder.fit, ladder.target, ladder.target_eval)}

    paths = {p.name: Path(p.output_path) for p in result.plan.steps}
    fit = json.loads((paths[ladder.fit.name] / "fit.json").read_text())
    assert len(fit["runs"]) == 6 and [b["budget"] for b in fit["budgets"]] == [3e9, 6e9]
    for run in fit["runs"]:  # each loss is the eval's, at the run's own compute
        results = json.loads((Path(run["eval_path"]) / "results.json").read_text())
        assert run["loss"] == results["validation"]["stories"]["bits_per_byte"]
        assert run["flops"] == pytest.approx(run["budget"], rel=0.1)
    prediction = fit["prediction"]
    assert prediction["run"] == ladder.target.name and prediction["eval_path"] == str(paths[ladder.target_eval.name])
    # two budgets of three runs: the backtest cannot fit the three below the top octave, so no calibrated interval
    assert prediction["interval"] is None and "not calibrated" in prediction["method"]
    lo, hi = prediction["bootstrap_interval"]
    assert lo < prediction["loss"] < hi and 0 < prediction["loss"] < 20
    assert {"isoflop.png", "laws.png"} <= {p.name for p in paths[ladder.fit.name].iterdir()}
    metrics = [json.loads(line) for line in (paths[ladder.target.name] / "metrics.jsonl").read_text().splitlines()]
    last = [m for m in metrics if "throughput/total_flops" in m][-1]
    assert last["throughput/total_flops"] == pytest.approx(2.4e10, rel=0.1)

    files = write_report(caller, str(store), str(tmp_path / "report.md"), Links(browser_url=None))
    text = Path(files.markdown).read_text()
    actual = json.loads((paths[ladder.target_eval.name] / "results.json").read_text())["validation"]["stories"]
    assert "## Scaling fit" in text and f"{actual['bits_per_byte']:.4f}" in text and f"{prediction['loss']:.4f}" in text
    # three runs below the largest budget cannot fit the backtest's surface: the report says why
    assert fit["backtest"]["note"].startswith("the backtest cannot fit the 3 runs below the top budget octave")
    assert "Backtest: not run, so the interval is not calibrated (the backtest cannot fit the 3 runs" in text
    [board] = collect_boards(str(store))  # all seven runs, on the stories validation set
    assert len(board.entries) == 7 and all(e.flops and e.wall_seconds for e in board.entries)
