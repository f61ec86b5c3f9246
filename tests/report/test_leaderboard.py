"""The leaderboard from files on disk: experiment records, training metrics, eval results and statuses in
the formats the executor, the trainer and the eval step write (a hand-made prefix: fast, every case)."""

import json
import os

import pytest

from marin.report.__main__ import main as report_main
from marin.report.leaderboard import collect_boards

T0 = 1_790_000_000.0
TRAIN_FN = "marin.trainer.train_lm.train_lm"
EVAL_FN = "marin.evaluation.step.evaluate_model"


def write_json(path, value):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(value if isinstance(value, str) else json.dumps(value))


def run(prefix, name, *, steps, tokens_per_step, flops_per_token, seconds):
    """A finished training step: status RUNNING -> SUCCESS and a metrics log as the trainer writes it."""
    path = f"{prefix}/checkpoints/{name}-0000"
    os.makedirs(path, exist_ok=True)
    with open(f"{path}/.executor_status", "w") as f:
        for state, t in (("RUNNING", 0.0), ("SUCCESS", seconds)):
            f.write(json.dumps({"state": state, "time": T0 + t, "message": None, "owner": "h:1:x"}) + "\n")
    with open(f"{path}/metrics.jsonl", "w") as f:
        for step in range(1, steps + 1):
            tokens = step * tokens_per_step
            row = {"step": step, "train/loss": 5.0 / step, "throughput/total_tokens": tokens}
            f.write(json.dumps(row | {"throughput/total_flops": tokens * flops_per_token}) + "\n")
        f.write('{"step": 99, "train/lo')  # a torn last line (a killed writer) is skipped
    return {"name": f"checkpoints/{name}", "identity": f"checkpoints/{name}-0000", "output_path": path, "fn": TRAIN_FN}


def evaluation(prefix, name, train, *, bpb, documents=500, size=250_000, params=1000):
    path = f"{prefix}/evaluation/{name}-0000"
    scores = {"stories": {"bits_per_byte": bpb, "documents": documents, "bytes": size, "loss": 1.0}}
    write_json(f"{path}/results.json", {"params": params, "validation": scores})
    return {
        "name": f"evaluation/{name}",
        "identity": f"evaluation/{name}-0000",
        "output_path": path,
        "fn": EVAL_FN,
        "dependencies": [train["identity"]],
    }


def record(prefix, script, steps, created):
    write_json(
        f"{prefix}/experiments/{script}-{int(created) % 1000:08d}.json",
        {"script": script, "caller_file": f"experiments/{script}.py", "created": created, "steps": steps},
    )


@pytest.fixture
def prefix(tmp_path):
    p = str(tmp_path / "store")
    big = run(p, "big", steps=100, tokens_per_step=1000, flops_per_token=6e6, seconds=600)
    big["version"] = {"config": {"optimizer": {"kind": "muon", "learning_rate": 0.02}}}  # as the executor records
    small = run(p, "small", steps=100, tokens_per_step=1000, flops_per_token=1e6, seconds=100)
    long = run(p, "small-long", steps=400, tokens_per_step=1000, flops_per_token=1e6, seconds=380)
    worse = run(p, "worse", steps=100, tokens_per_step=1000, flops_per_token=2e6, seconds=150)
    record(
        p, "exp1_sizes", [big, small, evaluation(p, "big", big, bpb=0.90), evaluation(p, "small", small, bpb=1.10)], T0
    )
    later = [long, worse, evaluation(p, "small-long", long, bpb=0.95), evaluation(p, "worse", worse, bpb=1.20)]
    # the small run again in a later record (a rerun of another file): it enters once
    later += [small, evaluation(p, "small", small, bpb=1.10)]
    other_set = run(p, "other-data", steps=10, tokens_per_step=1000, flops_per_token=1e6, seconds=10)
    later += [other_set, evaluation(p, "other-data", other_set, bpb=0.5, size=999)]  # another "stories"
    record(p, "exp2_longer", later, T0 + 100)
    damaged = run(p, "damaged", steps=10, tokens_per_step=1000, flops_per_token=1e6, seconds=10)
    eval_damaged = evaluation(p, "damaged", damaged, bpb=0.1)
    write_json(f"{eval_damaged['output_path']}/results.json", '{"validation": ')
    record(p, "exp3_damaged", [damaged, eval_damaged], T0 + 200)
    return p


def test_runs_are_ranked_by_bpb_per_held_out_set_with_compute_wall_time_and_the_frontier(prefix):
    boards = collect_boards(prefix)
    assert [(b.heldout, b.bytes, len(b.entries)) for b in boards] == [("stories", 250_000, 4), ("stories", 999, 1)]
    entries = boards[0].entries
    assert [e.run for e in entries] == [
        "checkpoints/big",
        "checkpoints/small-long",
        "checkpoints/small",
        "checkpoints/worse",
    ]
    by_run = {e.run: e for e in entries}
    assert by_run["checkpoints/big"].flops == pytest.approx(100 * 1000 * 6e6)
    assert by_run["checkpoints/small-long"].tokens == 400 * 1000  # from the last whole line
    assert by_run["checkpoints/big"].wall_seconds == pytest.approx(600)
    assert by_run["checkpoints/small"].experiment == "experiments/exp2_longer.py"  # the newest record
    assert by_run["checkpoints/big"].params == 1000
    assert by_run["checkpoints/big"].optimizer == "muon lr 0.02" and by_run["checkpoints/small"].optimizer is None
    # small (1e11 FLOPs) < small-long (4e11) < worse (2e11 FLOPs, but worse than small) < big (6e11)
    assert {e.run for e in entries if e.frontier} == {"checkpoints/small", "checkpoints/small-long", "checkpoints/big"}


def test_runs_a_reader_may_not_read_are_left_out_unread(prefix, monkeypatch):
    """A browser passes its roots as ``readable``: a run or eval outside them is never opened (a record may
    name any path), and the frontier is marked among what is left."""
    import marin.report.leaderboard as leaderboard

    opened = []
    for name in ("read_json", "training_totals", "wall_seconds"):
        real = getattr(leaderboard, name)
        monkeypatch.setattr(leaderboard, name, lambda path, real=real: opened.append(path) or real(path))
    boards = collect_boards(prefix, readable=lambda path: "/big-" not in path)
    assert [e.run for e in boards[0].entries] == ["checkpoints/small-long", "checkpoints/small", "checkpoints/worse"]
    assert opened and not any("/big-" in path for path in opened)
    assert {e.run for e in boards[0].entries if e.frontier} == {"checkpoints/small", "checkpoints/small-long"}


def test_the_board_of_named_experiment_files_only_and_the_markdown(prefix, tmp_path, monkeypatch):
    [board] = collect_boards(prefix, ["experiments/exp1_sizes.py"])
    assert [e.run for e in board.entries] == ["checkpoints/big", "checkpoints/small"]
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "board.md"
    assert report_main(["--leaderboard", "--prefix", prefix, "--out", str(out), "--browser_url", ""]) == 0
    text = out.read_text()
    rows = [line for line in text.splitlines() if line.startswith("| 1 ") or line.startswith("| 2 ")]
    assert "`checkpoints/big`" in rows[0] and "0.9000" in rows[0] and "6e+11" in rows[0] and "★" in rows[0]
    assert "| muon lr 0.02 |" in rows[0] and "| – |" in rows[1]  # the optimizer, where the record names it
    assert "`checkpoints/small-long`" in rows[1] and "6m 20s" in rows[1]
    assert "## stories (500 documents, 250,000 bytes)" in text and "## stories (500 documents, 999 bytes)" in text
    assert report_main(["--leaderboard", "experiments/nope.py", "--prefix", prefix, "--out", str(out)]) == 2


def test_a_run_logged_before_the_totals_has_tokens_from_its_config_and_no_flops(tmp_path):
    p = str(tmp_path / "store")
    old = run(p, "old", steps=20, tokens_per_step=1, flops_per_token=1, seconds=5)
    with open(f"{old['output_path']}/metrics.jsonl", "w") as f:  # what the trainer logged before the totals
        f.writelines(json.dumps({"step": s, "train/loss": 1.0 / s}) + "\n" for s in range(1, 21))
    write_json(
        f"{old['output_path']}/.executor_info", {"config": {"trainer": {"batch_size": 8}, "model": {"seq_len": 64}}}
    )
    record(p, "exp_old", [old, evaluation(p, "old", old, bpb=1.0)], T0)
    [board] = collect_boards(p)
    [entry] = board.entries
    assert entry.tokens == 20 * 8 * 64 and entry.flops is None and not entry.frontier
