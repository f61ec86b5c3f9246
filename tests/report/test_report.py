"""Experiment reports from files on disk: a hand-made prefix (fast, every state and failure kind) and the
quickstart's real outputs (slow, shares the session's quickstart run).

The hand-made prefix uses the executor's own record writer and a real git repository, so the links the
report makes are checked against an actual commit, not against the report's own idea of one.
"""

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest

from marin.execution import Executor, ExecutorStep, this_output_path, versioned
from marin.execution.experiment import build_record, record_url, write_record
from marin.report import Links, ReportError, write_report
from marin.report.__main__ import main as report_main
from marin.report.collect import same_file
from marin.report.render import backtest_lines, format_duration, https_remote, issue_number, split_docstring
from marin.scaling.record import Backtest, BacktestRun
from tests.report.steps import TinyConfig, tiny_fn

ROOT = Path(__file__).resolve().parents[2]
REPO = "https://github.com/example/lab"
BROWSER = "http://127.0.0.1:5000"
T0 = 1_790_000_000.0
EXPERIMENT_SOURCE = '''"""Tiny experiment for the report tests (https://github.com/example/lab/issues/7).

Hypothesis: a warmup makes the loss drop faster.

More words about it.
"""
'''


def _git(repo: Path, *args: str) -> str:
    out = subprocess.run(
        ["git", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
        env={
            **os.environ,
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@x",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@x",
        },
    )
    return out.stdout.strip()


def _status(path: str, *events: tuple[str, float, str | None]) -> None:
    """``.executor_status`` in its documented format (docs/executor.md), with chosen times."""
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, ".executor_status"), "w") as f:
        for state, t, message in events:
            f.write(json.dumps({"state": state, "time": T0 + t, "message": message, "owner": "h:1:x"}) + "\n")


def _steps():
    data = ExecutorStep(name="data/tiny", fn=tiny_fn, config=TinyConfig(n=versioned(1), output_path=this_output_path()))
    train = ExecutorStep(
        name="checkpoints/tiny",
        fn=tiny_fn,
        config=TinyConfig(n=versioned(2), input_path=data, output_path=this_output_path()),
    )
    evaluation = ExecutorStep(
        name="evaluation/tiny",
        fn=tiny_fn,
        config=TinyConfig(n=versioned(3), input_path=train, output_path=this_output_path()),
    )
    broken = ExecutorStep(
        name="export/tiny",
        fn=tiny_fn,
        config=TinyConfig(n=versioned(4), input_path=train, output_path=this_output_path()),
    )
    after = ExecutorStep(
        name="generate/tiny",
        fn=tiny_fn,
        config=TinyConfig(n=versioned(5), input_path=broken, output_path=this_output_path()),
    )
    pending = ExecutorStep(
        name="pending/tiny",
        fn=tiny_fn,
        config=TinyConfig(n=versioned(6), input_path=data, output_path=this_output_path()),
    )
    return [data, train, evaluation, broken, after, pending]


TRACEBACK = "\n".join(
    [
        "Traceback (most recent call last):",
        *[f'  File "x.py", line {i}' for i in range(60)],
        "ValueError: export needs a tokenizer",
    ]
)
RESULTS = {
    "validation": {
        "stories": {"loss": 1.25, "perplexity": 3.4903, "bits_per_byte": 0.6123, "unigram_bits_per_byte": 2.0345}
    },
    "tasks": {
        "animal_sounds": {
            "acc": {"value": 0.75, "stderr": 0.04, "ci95": [0.671, 0.829]},
            "acc_norm": {"value": 0.7, "stderr": 0.05, "ci95": [0.602, 0.798]},
            "chance": 0.25,
            "items": 100,
        }
    },
}


@pytest.fixture
def lab(tmp_path):
    """A git checkout with experiments/exp7_tiny.py and a prefix holding two runs of it (the newer one has
    every kind of step state) plus a run of another file."""
    repo = tmp_path / "repo"
    (repo / "experiments").mkdir(parents=True)
    experiment = repo / "experiments" / "exp7_tiny.py"
    experiment.write_text(EXPERIMENT_SOURCE)
    _git(repo, "init", "-q")
    _git(repo, "remote", "add", "origin", "git@github.com:example/lab.git")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "exp7")
    prefix = str(tmp_path / "store")
    steps = _steps()
    plan = Executor(prefix=prefix).plan(steps)
    paths = {p.name: p.output_path for p in plan.steps}

    old_plan = Executor(prefix=prefix).plan(steps[:2])  # an earlier, smaller DAG of the same file
    old = build_record(old_plan, str(experiment), "older run")
    old["created"] = T0 - 1000
    write_record(record_url(old_plan, "exp7_tiny"), old)
    other = build_record(plan, str(tmp_path / "elsewhere" / "exp7_tiny.py"), "another file, same name")
    other["created"] = T0 + 5000
    write_record(record_url(plan, "exp7_tiny").replace(".json", "-other.json"), other)
    record = build_record(plan, str(experiment), "tiny: warmup vs none")
    record["created"] = T0
    url = record_url(plan, "exp7_tiny")
    write_record(url, record)

    _status(paths["data/tiny"], ("WAITING", 0, None), ("RUNNING", 1, None), ("SUCCESS", 4.5, None))
    _status(paths["checkpoints/tiny"], ("RUNNING", 5, None), ("SUCCESS", 95, None))
    _status(paths["evaluation/tiny"], ("RUNNING", 96, None), ("SUCCESS", 3700, None))
    _status(paths["export/tiny"], ("RUNNING", 96, None), ("FAILED", 97, TRACEBACK))
    _status(paths["generate/tiny"], ("WAITING", 0, None), ("DEP_FAILED", 97, "dependency export/tiny failed"))
    with open(os.path.join(paths["checkpoints/tiny"], "metrics.jsonl"), "w") as f:
        for step in range(1, 21):
            f.write(json.dumps({"step": step, "train/loss": 8.0 / step, "train/learning_rate": 1e-3}) + "\n")
            if step % 10 == 0:
                f.write(json.dumps({"step": step, "eval/stories/bpb": 2.0 / step, "eval/stories/loss": 1.0}) + "\n")
        f.write('{"step": 21, "train/lo')  # a torn last line, as a killed run leaves it
    with open(os.path.join(paths["evaluation/tiny"], "results.json"), "w") as f:
        json.dump(RESULTS, f)
    with open(os.path.join(paths["checkpoints/tiny"], "tracker.json"), "w") as f:
        json.dump({"wandb_url": "https://wandb.ai/example/marin/runs/abc"}, f)
    return {
        "repo": repo,
        "experiment": experiment,
        "prefix": prefix,
        "paths": paths,
        "record_url": url,
        "commit": _git(repo, "rev-parse", "HEAD"),
    }


def test_report_of_every_step_state_with_links_metrics_failures_and_image(lab, tmp_path):
    out = tmp_path / "out" / "exp7.md"
    files = write_report(str(lab["experiment"]), lab["prefix"], str(out), Links(browser_url=BROWSER))
    body = out.read_text()
    rows = {line.split("|")[1].strip(" `"): line for line in body.splitlines() if line.startswith("| `")}

    assert files.report.record_url == lab["record_url"]  # the newest record of this file, not of its namesake
    link = f"{REPO}/blob/{lab['commit']}/experiments/exp7_tiny.py"  # remote git@github.com:... made https
    assert f"[`experiments/exp7_tiny.py`]({link})" in body
    assert _git(lab["repo"], "show", f"{lab['commit']}:experiments/exp7_tiny.py") == EXPERIMENT_SOURCE.strip()
    assert f"{BROWSER}/experiment?path={quote(lab['record_url'], safe='')}" in body
    assert "https://wandb.ai/example/marin/runs/abc" in body
    assert "a warmup makes the loss drop faster." in body.split("## Hypothesis")[1].split("##")[0]
    assert files.issue == 7

    expected = {
        "data/tiny": ("SUCCESS", "3.5 s"),
        "checkpoints/tiny": ("SUCCESS", "1m 30s"),
        "evaluation/tiny": ("SUCCESS", "1h 00m"),
        "export/tiny": ("FAILED", "1.0 s"),
        "generate/tiny": ("DEP_FAILED", "–"),
        "pending/tiny": ("not started", "–"),
    }
    for name, (state, duration) in expected.items():
        cells = [c.strip() for c in rows[name].split("|")]
        assert cells[2].endswith(state) and cells[3] == duration, rows[name]
        path = lab["paths"][name]
        assert f"({BROWSER}/browse?path={quote(path, safe='')})" in cells[4]

    training = body.split("## Training")[1].split("##")[0]
    train_row = next(line for line in training.splitlines() if "checkpoints/tiny" in line)
    assert [c.strip() for c in train_row.split("|")][2:5] == ["20", f"{8.0 / 20:.4f}", f"{2.0 / 20:.4f}"]
    assert f"{BROWSER}/training?path={quote(lab['paths']['checkpoints/tiny'], safe='')}" in train_row
    assert "| stories | 1.2500 | 3.49 | 0.6123 | 2.0345 |" in body
    assert "| animal_sounds | 0.750 (0.671–0.829) | 0.700 (0.602–0.798) | 0.25 | 100 |" in body

    failures = body.split("## Failures")[1]
    assert "### `export/tiny`: FAILED" in failures and "ValueError: export needs a tokenizer" in failures
    assert "lines cut" in failures and 'line 0"' not in failures  # a long traceback keeps its end
    assert "### `generate/tiny`: DEP_FAILED" in failures and "dependency export/tiny failed" in failures

    assert files.image == str(tmp_path / "out" / "exp7_loss.png") and "![loss curves](exp7_loss.png)" in body
    from matplotlib.image import imread

    pixels = imread(files.image)
    assert (
        Path(files.image).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and pixels.shape[0] > 200 and pixels.shape[1] > 400
    )
    assert pixels[..., :3].std() > 0.05  # something was drawn


def test_no_record_for_the_file_lists_what_exists(lab, tmp_path):
    other = lab["repo"] / "experiments" / "exp8_other.py"
    other.write_text('"""Never ran."""\n')
    with pytest.raises(ReportError, match="no experiment record for .*exp8_other.py") as e:
        write_report(str(other), lab["prefix"], str(tmp_path / "r.md"))
    assert "experiments/exp7_tiny.py" in str(e.value)


def test_outside_git_and_without_a_remote_the_report_says_what_is_missing(lab, tmp_path):
    record = json.loads(Path(lab["record_url"]).read_text())
    record.update(git_remote=None, git_dirty=True, created=T0 + 10)
    Path(lab["record_url"]).write_text(json.dumps(record))
    body = Path(
        write_report(str(lab["experiment"]), lab["prefix"], str(tmp_path / "a.md"), Links(browser_url=None)).markdown
    ).read_text()
    assert f"at commit `{lab['commit'][:12]}`" in body and "pass `--repo_url`" in body and "uncommitted" in body
    assert "?path=" not in body  # no browser: plain paths

    record.update(git_commit=None, caller_file=str(lab["experiment"]))  # as recorded outside a checkout
    Path(lab["record_url"]).write_text(json.dumps(record))
    body = Path(write_report(str(lab["experiment"]), lab["prefix"], str(tmp_path / "b.md")).markdown).read_text()
    assert "no git commit recorded" in body


def _fake_gh(bin_dir: Path, log: Path, authenticated: bool = True) -> None:
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "gh"
    script.write_text(f"""#!/bin/sh
echo "$@" >> {log}
if [ "$1" = auth ]; then exit {0 if authenticated else 1}; fi
if [ "$2" = create ]; then echo https://github.com/example/lab/issues/99; fi
if [ "$2" = edit ]; then echo https://github.com/example/lab/issues/$3; fi
""")
    script.chmod(0o755)


def test_post_without_gh_leaves_the_file_and_says_so(lab, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    out = tmp_path / "r.md"
    assert report_main([str(lab["experiment"]), "--prefix", lab["prefix"], "--out", str(out), "--post"]) == 0
    captured = capsys.readouterr()
    assert "gh is not installed" in captured.err and out.exists()
    assert captured.out.splitlines() == [str(out), str(tmp_path / "r_loss.png")]

    _fake_gh(tmp_path / "bin", tmp_path / "gh.log", authenticated=False)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    report_main([str(lab["experiment"]), "--prefix", lab["prefix"], "--out", str(out), "--post"])
    assert "not authenticated" in capsys.readouterr().err
    assert (tmp_path / "gh.log").read_text().split("\n")[0] == "auth status"


def test_post_updates_the_issue_of_the_file_name_or_creates_one(lab, tmp_path, monkeypatch, capsys):
    _fake_gh(tmp_path / "bin", tmp_path / "gh.log")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    out = tmp_path / "r.md"
    args = [str(lab["experiment"]), "--prefix", lab["prefix"], "--out", str(out), "--post"]
    assert report_main(args) == 0
    assert "https://github.com/example/lab/issues/7" in capsys.readouterr().out
    calls = (tmp_path / "gh.log").read_text().splitlines()
    assert calls == ["auth status", f"issue edit 7 --body-file {out} --repo example/lab"]

    (tmp_path / "gh.log").unlink()
    assert report_main([*args, "--issue", "0", "--repo_url", "https://github.com/me/fork"]) == 0
    assert (tmp_path / "gh.log").read_text().splitlines()[1] == f"issue edit 0 --body-file {out} --repo me/fork"

    record = json.loads(Path(lab["record_url"]).read_text())  # a file outside the convention: a new issue
    record.update(caller_file="experiments/tiny.py", script="tiny")
    Path(lab["record_url"]).write_text(json.dumps(record))
    renamed = lab["repo"] / "experiments" / "tiny.py"
    renamed.write_text('"""No issue link here."""\n')
    (tmp_path / "gh.log").unlink()
    assert report_main([str(renamed), "--prefix", lab["prefix"], "--out", str(out), "--post"]) == 0
    assert (tmp_path / "gh.log").read_text().splitlines()[1] == (
        f"issue create --title tiny: tiny: warmup vs none --body-file {out} --repo example/lab"
    )


def test_cli_entry_point_runs_as_a_module(lab, tmp_path):
    out = tmp_path / "cli.md"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "marin.report",
            "experiments/exp7_tiny.py",
            "--prefix",
            lab["prefix"],
            "--out",
            str(out),
            "--browser_url",
            "http://lab.example:8080",
        ],
        cwd=lab["repo"],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == [str(out), str(tmp_path / "cli_loss.png")]
    assert "http://lab.example:8080/browse?path=" in out.read_text()
    missing = subprocess.run(
        [sys.executable, "-m", "marin.report", "experiments/nope.py", "--prefix", lab["prefix"]],
        cwd=lab["repo"],
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 2 and "no experiment record for experiments/nope.py" in missing.stderr


def test_records_are_matched_to_the_file_however_it_was_recorded_or_typed(lab, monkeypatch):
    experiment = str(lab["experiment"])
    assert same_file("experiments/exp7_tiny.py", experiment)  # recorded in a checkout, typed absolutely
    assert same_file(experiment, experiment)  # recorded outside a checkout
    unpacked = "/tmp/ray/session_1/runtime_resources/working_dir_files/_ray_pkg_ab12/experiments/exp7_tiny.py"
    assert same_file(unpacked, experiment)  # a Ray job's working dir, recorded without .git
    monkeypatch.chdir(lab["repo"] / "experiments")
    assert same_file("experiments/exp7_tiny.py", "exp7_tiny.py") and same_file(unpacked, "exp7_tiny.py")
    assert not same_file("other/exp7_tiny.py", experiment) and not same_file("/elsewhere/exp7_tiny.py", experiment)
    assert not same_file(None, experiment)


@pytest.mark.parametrize(
    "seconds, text",
    [(None, "–"), (0.04, "0.0 s"), (59.9, "59.9 s"), (61, "1m 01s"), (3599.6, "1h 00m"), (7 * 86400, "7.0 days")],
)
def test_durations(seconds, text):
    assert format_duration(seconds) == text


def test_remotes_issue_numbers_and_hypotheses():
    assert https_remote("git@github.com:o/r.git") == "https://github.com/o/r"
    assert https_remote("ssh://git@github.com/o/r") == "https://github.com/o/r"
    assert https_remote("https://github.com/o/r.git") == "https://github.com/o/r"
    assert https_remote("/srv/git/r") is None
    assert issue_number("experiments/exp123_wsd.py", None) == 123
    assert issue_number("experiments/tootsie_8b.py", "see https://github.com/o/r/issues/45") == 45
    assert issue_number("experiments/expert_mix.py", None) is None
    assert split_docstring("What.\n\nHypothesis: x helps.\n\nMore.") == ("What.\n\nMore.", "x helps.")
    assert split_docstring(None) == (None, None)


@pytest.mark.slow
def test_report_for_the_quickstart_outputs(quickstart_run, tmp_path, monkeypatch):
    """The acceptance test of the issue: every step, links at the commit, metrics and an image that exists."""
    prefix, paths = quickstart_run["prefix"], quickstart_run["paths"]
    out = tmp_path / "quickstart.md"  # as documented: python -m marin.report experiments/quickstart.py --prefix ...
    monkeypatch.chdir(ROOT)
    assert report_main(["experiments/quickstart.py", "--prefix", prefix, "--out", str(out), "--repo_url", REPO]) == 0
    body = out.read_text()
    [record_path] = Path(prefix, "experiments").glob("quickstart-*.json")
    record = json.loads(record_path.read_text())

    assert record["caller_file"] == "experiments/quickstart.py" and len(record["git_commit"]) == 40
    subprocess.run(["git", "cat-file", "-e", f"{record['git_commit']}:experiments/quickstart.py"], cwd=ROOT, check=True)
    assert f"({REPO}/blob/{record['git_commit']}/experiments/quickstart.py)" in body

    planned = quickstart_run["result"].plan.steps
    assert len(planned) == len(quickstart_run["steps"]) == 36
    for p in planned:
        row = next(line for line in body.splitlines() if line.startswith(f"| `{p.name}` |"))
        assert "SUCCESS" in row and f"({BROWSER}/browse?path={quote(p.output_path, safe='')})" in row

    metrics = [json.loads(line) for line in Path(paths["checkpoints"], "metrics.jsonl").read_text().splitlines()]
    final_loss = [m["train/loss"] for m in metrics if "train/loss" in m][-1]
    train_row = next(
        line for line in body.split("## Training")[1].splitlines() if "checkpoints/quickstart-nano" in line
    )
    assert f"| {final_loss:.4f} |" in train_row
    for name in ("stories", "arithmetic"):
        bpb = [m[f"eval/{name}/bpb"] for m in metrics if f"eval/{name}/bpb" in m][-1]
        assert f"{bpb:.4f}" in train_row

    results = json.loads(Path(paths["evaluation"], "results.json").read_text())
    for name, r in results["validation"].items():
        assert (
            f"| {name} | {r['loss']:.4f} | {r['perplexity']:.2f} | {r['bits_per_byte']:.4f} | "
            f"{r['unigram_bits_per_byte']:.4f} |" in body
        )
    for name, r in results["tasks"].items():
        lo, hi = r["acc"]["ci95"]
        assert f"| {name} | {r['acc']['value']:.3f} ({lo:.3f}–{hi:.3f}) |" in body
        assert not math.isnan(r["acc"]["value"])
    assert "## Failures" not in body

    image = tmp_path / "quickstart_loss.png"
    assert image.read_bytes()[:4] == b"\x89PNG" and "![loss curves](quickstart_loss.png)" in body


def test_the_backtest_line_gives_the_mean_and_worst_error_and_the_coverage():
    runs = [("checkpoints/l-4e12-h32", 0.196), ("checkpoints/l-4e12-h64", -0.021)]
    runs += [(f"checkpoints/l-4e12-h{w}", 0.05) for w in (24, 48, 96)]
    check = Backtest(
        held_out_budgets=[4e12],
        fitted_runs=10,
        mean_abs_error=0.089,
        inside_bootstrap=4,
        widening=0.0123,
        runs=[BacktestRun(run, 1e5, 1e6, 1.0, 1.0 - error, error) for run, error in runs],
    )
    [_, line] = backtest_lines(check, 0.9)
    assert "fitted on the 10 runs below 4e+12 FLOPs" in line and "5 runs 8.9% off on average" in line
    assert "worst +19.6%, `checkpoints/l-4e12-h32`" in line and "4 of 5 inside their 90% bootstrap intervals" in line
    assert "widen by 0.0123 in log loss per e-fold" in line
    assert backtest_lines(None, 0.9) == []
    assert "not calibrated (too few runs)" in backtest_lines(Backtest(note="too few runs"), 0.9)[1]
