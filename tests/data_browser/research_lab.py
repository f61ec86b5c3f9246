"""A research loop's outputs, written as the executor and the steps write them (no training needed): training
runs that differ in config, their evals, a scaling ladder's ``fit.json`` with its target run, and a 200-step
experiment for the DAG layout. Part of the ``lab`` fixture store (conftest.py)."""

import hashlib
import json
import struct
import time
import zlib
from pathlib import Path

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
PREDICTED, ACTUAL = 1.19, 1.21
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


def fit_document(target, target_eval):
    budgets, runs = [], []
    for i, budget in enumerate((1e12, 3e12, 1e13)):
        a, center, floor = 0.5, 5.0 + 0.3 * i, 1.4 - 0.1 * i
        b, c = -2 * a * center, floor + a * center**2
        for x in (center - 0.5, center, center + 0.5):
            params = 10**x
            runs.append(
                {
                    "budget": budget,
                    "run": f"checkpoints/ladder-{i}-{x:.1f}",
                    "run_path": f"/nowhere/ladder-{i}",
                    "eval_path": f"/nowhere/eval-{i}",
                    "params": round(params),
                    "tokens": budget / (6 * params),
                    "flops": budget,
                    "loss": a * x * x + b * x + c + 0.01,
                }
            )
        budgets.append(
            {
                "budget": budget,
                "quadratic": [a, b, c],
                "params_opt": 10**center,
                "tokens_opt": budget / (6 * 10**center),
                "loss_opt": floor,
                "params_opt_interval": [10 ** (center - 0.1), 10 ** (center + 0.1)],
            }
        )
    budgets.append({"budget": 3e13, "quadratic": [-0.1, 1.0, 0.0], "params_opt": None, "tokens_opt": None,
                    "loss_opt": None, "params_opt_interval": None, "bracketed": False, "note": NO_MINIMUM})  # fmt: skip
    return {
        "kind": "isoflop_fit",
        "metric": "bpb",
        "heldout": "stories",
        "runs": runs,
        "budgets": budgets,
        "laws": {
            "params_opt": {
                "coefficient": 0.0063,
                "exponent": 0.6,
                "interval": {"exponent": [0.55, 0.65], "coefficient": [0.004, 0.009]},
            },
            "tokens_opt": {
                "coefficient": 26.4,
                "exponent": 0.4,
                "interval": {"exponent": [0.35, 0.45], "coefficient": [18.0, 37.0]},
            },
            "loss": {
                "form": "E + A * C^-alpha",
                "E": 0.9,
                "A": 18.0,
                "alpha": 0.13,
                "interval": {"E": [0.8, 1.0], "A": [12.0, 25.0], "alpha": [0.1, 0.16]},
            },
            "surface": {
                "form": "E + A / N^alpha + B / D^beta",
                "E": 1.0,
                "A": 400.0,
                "alpha": 0.34,
                "B": 900.0,
                "beta": 0.28,
                "interval": {"E": [0.9, 1.1], "A": None},
                "residual_rms": 0.003,
            },  # fmt: skip
        },
        "prediction": {
            "run": "checkpoints/r-target",
            "run_path": str(target),
            "eval_path": str(target_eval),
            "budget": 6e13,
            "params": 1.16e6,
            "tokens": 8.6e6,
            "loss": PREDICTED,
            "interval": [1.14, 1.24],
            "level": 0.9,
        },
        "bootstrap": {"samples": 1000, "seed": 0},
        "backtest": {
            "budget": 1e13,
            "fitted_runs": 6,
            "mean_abs_error": 0.0125,
            "inside": 2,
            "level": 0.9,
            "runs": [
                {"run": r["run"], "params": r["params"], "tokens": r["tokens"], "actual": r["loss"]}
                | {"predicted": r["loss"] * (1 - e), "interval": [r["loss"] - 0.01, r["loss"] + 0.01], "error": e}
                for r, e in zip(runs[6:], (0.01, -0.0075, 0.02), strict=True)
            ],
        },
        "plots": ["isoflop.png", "laws.png"],
    }


def tiny_png(width=40, height=20):
    """A real PNG (grey), as the analysis step's matplotlib would write one, only smaller."""

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\0" + b"\x90" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


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
    fit = write_step(prefix, "analysis/ladder-fit", "experiments.ladder.analyze", {"target": "r-target"})
    (fit / "fit.json").write_text(json.dumps(fit_document(runs["checkpoints/r-target"], evals["checkpoints/r-target"])))
    (fit / "isoflop.png").write_bytes(tiny_png())  # laws.png is listed but missing: not shown
    steps.append(
        step_entry("analysis/ladder-fit", "experiments.ladder.analyze", fit, [s["identity"] for s in steps[::2]])
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
