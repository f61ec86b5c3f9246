"""A research loop's outputs, written as the executor and the steps write them (no training needed): training
runs that differ in config, their evals, a scaling ladder's ``fit.json`` (written by the real analysis step)
with its target run, and a 200-step experiment for the DAG layout. Part of the ``lab`` fixture store (conftest.py)."""

import dataclasses
import hashlib
import json
import time
from pathlib import Path

from marin.scaling.step import LadderRunRef, fit_ladder_step
from marin.scaling.surface import compute_optimal, surface
from tests.scaling.ladder_store import ladder_config

MODEL = {"hidden_dim": 64, "num_layers": 2, "num_heads": 4, "seq_len": 128, "vocab_size": 512}
TRAINER = {"batch_size": 8, "num_train_steps": 50, "seed": 0}
# name: (config changes, logs throughput/total_* like the trainer since issue 27, final bpb)
RUNS = {
    "checkpoints/r-small": ({}, True, 1.31),
    "checkpoints/r-wide": ({"model": {"hidden_dim": 128}}, True, 1.35),  # more FLOPs, worse: off the frontier
    "checkpoints/r-bigbatch": ({"trainer": {"batch_size": 32}}, False, 1.27),
    "checkpoints/r-target": ({"model": {"hidden_dim": 256}}, True, 1.21),
}
FLOPS_PER_TOKEN = {64: 6 * 1e5, 128: 6 * 3e5, 256: 6 * 1e6}
HELDOUT = {
    "documents": 50,
    "tokens": 4000,
    "bytes": 16000,
    "loss": 2.0,
    "perplexity": 7.4,
    "unigram_bits_per_byte": 2.5,
}
ACTUAL = 1.21
NO_MINIMUM = "the loss curves downward over these sizes: no minimum (add smaller and larger sizes)"


def step_entry(name, fn, output_path, deps=()):
    identity = Path(output_path).name
    return {
        "name": name,
        "identity": f"{name.split('/')[0]}/{identity}",
        "output_path": str(output_path),
        "fn": fn,
        "dependencies": list(deps),
        "version": {"name": name, "config": {}, "inputs": {}},
    }


def write_step(prefix, name, fn, config, state="SUCCESS", seconds=12.5):
    digest = hashlib.sha256(json.dumps([name, config], sort_keys=True).encode()).hexdigest()[:8]
    out = Path(prefix) / f"{name}-{digest}"
    out.mkdir(parents=True, exist_ok=True)
    start = time.time() - 100
    events = [{"state": "RUNNING", "time": start}, {"state": state, "time": start + seconds}]
    (out / ".executor_status").write_text("".join(json.dumps(e) + "\n" for e in events))
    info = {"format_version": 1, "name": name, "fn": fn, "config": {**config, "output_path": str(out)}}
    (out / ".executor_info").write_text(json.dumps(info, indent=2, sort_keys=True))
    return out


def merged(changes):
    return {
        "model": {**MODEL, **changes.get("model", {})},
        "trainer": {**TRAINER, **changes.get("trainer", {})},
        "optimizer": {"learning_rate": 3e-3},
    }


def write_metrics(out, config, totals, final_bpb):
    tokens_per_step = config["trainer"]["batch_size"] * config["model"]["seq_len"]
    flops_per_token = FLOPS_PER_TOKEN[config["model"]["hidden_dim"]]
    lines = []
    for step in range(1, 51):
        record = {
            "step": step,
            "train/loss": 2 + 4 / step**0.5,
            "train/learning_rate": 3e-3 * min(1, step / 10),
            "train/grad_norm": 1 / step,
        }
        if totals:
            record["throughput/total_tokens"] = step * tokens_per_step
            record["throughput/total_flops"] = step * tokens_per_step * flops_per_token
        lines.append(record)
        if step % 10 == 0:
            lines.append({"step": step, "throughput/tokens_per_s": 41000.0 + step})
        if step % 25 == 0:
            lines.append(
                {"step": step, "eval/stories/bpb": final_bpb + 0.5 * (50 - step) / 50, "eval/stories/loss": 2.1}
            )
    (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))


def results(bpb, params, heldout=HELDOUT):
    return {"checkpoint_step": 50, "params": params, "validation": {"stories": {**heldout, "bits_per_byte": bpb}}}


LADDER_LAW = (0.8, 20.0, 0.3, 20.0, 0.3)
"""E, A, alpha, B, beta of the lab's ladder (bits per byte): its target, 4x past the ladder, lands near ACTUAL."""
TARGET_BUDGET = 1.2e14


def ladder_loss(name: str, params: float, tokens: float) -> float:
    """The law at each run; at 1e12 the middle size does worse than both neighbours: no minimum there."""
    bump = {"x0.333333": -0.06, "x3": -0.06}.get(name.rsplit("-", 1)[1], 0.0) if "-1e+12-" in name else 0.0
    return float(surface(LADDER_LAW, params, tokens)) + bump


def write_fit(prefix, fit, target, target_eval):
    """The ladder's evals (beside the browser's root, so not linked) and its ``fit.json``, written by the real
    analysis step into ``fit``; ``laws.png`` is then removed: a plot listed but missing is not shown."""
    n_t, d_t, _ = compute_optimal(LADDER_LAW, TARGET_BUDGET)
    ref = LadderRunRef("checkpoints/r-target", str(target), str(target_eval), TARGET_BUDGET, n_t, d_t)
    config = ladder_config(
        Path(prefix).parent / "ladder",
        budgets=(1e12, 3e12, 1e13, 3e13),
        factors=(1 / 3, 1, 3),
        theta=LADDER_LAW,
        loss=ladder_loss,
        target=ref,
        samples=40,
    )
    fit_ladder_step(dataclasses.replace(config, output_path=str(fit)))
    (fit / "laws.png").unlink()


CALLER_FILE = "/home/researcher/src/marin/experiments/exp1234_isoflop_ladder_fineweb_edu_long_context_wsd.py"
"""A real experiment path is long: it must wrap at its slashes without squeezing the leaderboard's numbers."""


def write_research(prefix):
    """The research experiment (runs, evals, fit) and the 200-step one; returns their paths."""
    steps, runs, evals = [], {}, {}
    for name, (changes, totals, bpb) in RUNS.items():
        config = merged(changes)
        out = write_step(prefix, name, "marin.trainer.train_lm.train_lm", config)
        write_metrics(out, config, totals, bpb)
        ev = write_step(
            prefix,
            name.replace("checkpoints/", "evaluation/"),
            "marin.evaluation.step.evaluate_model",
            {"checkpoint_path": str(out)},
        )
        params = 12 * config["model"]["num_layers"] * config["model"]["hidden_dim"] ** 2
        if name == "checkpoints/r-target":
            (ev / "results.json").write_text(json.dumps(results(ACTUAL, params)))
        elif name != "checkpoints/r-bigbatch":
            (ev / "results.json").write_text(json.dumps(results(bpb, params)))
        else:  # scored on other documents: a board of its own
            (ev / "results.json").write_text(json.dumps(results(bpb, params, {**HELDOUT, "documents": 40})))
        steps += [
            step_entry(name, "marin.trainer.train_lm.train_lm", out),
            step_entry(
                f"evaluation/{name.split('/')[1]}",
                "marin.evaluation.step.evaluate_model",
                ev,
                [f"checkpoints/{out.name}"],
            ),
        ]
        runs[name], evals[name] = out, ev
    fit = write_step(prefix, "analysis/ladder-fit", "marin.scaling.step.fit_ladder_step", {"target": "r-target"})
    write_fit(prefix, fit, runs["checkpoints/r-target"], evals["checkpoints/r-target"])
    steps.append(
        step_entry(
            "analysis/ladder-fit", "marin.scaling.step.fit_ladder_step", fit, [s["identity"] for s in steps[::2]]
        )
    )
    record = Path(prefix) / "experiments" / "research-5e1f.json"
    record.write_text(
        json.dumps(
            {
                "script": "research",
                "caller_file": CALLER_FILE,
                "created": 1.0,
                "description": "runs that differ in config",
                "user": "lab",
                "steps": steps,
            }
        )
    )
    return {
        "runs": {k: str(v) for k, v in runs.items()},
        "evals": {k: str(v) for k, v in evals.items()},
        "fit": str(fit),
        "research_record": str(record),
        "wide_record": str(write_wide(prefix)),
    }


def write_wide(prefix, chains=20, length=10):
    """200 steps: a source and 20 chains of 10 after it (11 columns, 20 rows), the first chain run."""
    source = write_step(prefix, "wide/source", "wide.step", {})
    steps = [step_entry("wide/source", "wide.step", source)]
    for c in range(chains):
        previous = steps[0]["identity"]
        for i in range(length - (c == 0)):  # the source, 9 + 19 * 10 chained: 200 steps
            name = f"wide/chain{c:02d}-step{i}"
            out = write_step(prefix, name, "wide.step", {}) if c == 0 else Path(prefix) / f"{name}-0"
            steps.append(step_entry(name, "wide.step", out, [previous]))
            previous = steps[-1]["identity"]
    assert len(steps) == 200
    record = Path(prefix) / "experiments" / "wide-200.json"
    record.write_text(
        json.dumps({"script": "wide", "caller_file": "experiments/wide.py", "user": "lab", "steps": steps})
    )
    return record


def write_rl_run(run):
    """An RL run's files as ``marin.posttrain.rl`` writes them (two environments, three iterations) into ``run``."""
    (run / "rollouts").mkdir(parents=True)
    metrics = []
    for it in (1, 2, 3):
        metrics.append({"step": it, "rl/math/reward_mean": 0.1 * it, "rl/letters/reward_mean": 0.5, "train/loss": 0.0})
        rows = [
            {"iteration": it, "env": "math", "record_id": f"q{g}", "group": g, "sample": s,
             "prompt": f"What is {g} + {it}?", "completion": f"{g} + {it} = {g + it + s}", "reward": float(s == 0),
             "advantage": 1.0 if s == 0 else -1.0, "completion_tokens": 8, "finish_reason": "stop", "seed": 7}
            for g in range(2) for s in range(2)
        ]  # fmt: skip
        (run / "rollouts" / f"iteration-{it:06d}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
