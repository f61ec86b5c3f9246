"""A real prefix for the browser: an executed experiment plus record files of every format and some traps."""

import json
import os

import pytest

from marin.execution import Executor, ExecutorStep, this_output_path
from marin.storage.records import write_records
from tests.data_browser.research_lab import write_research
from tests.execution.steps_lib import TraceConfig, trace_step


def docs(n, prefix="doc"):
    return [
        {"id": f"{prefix}-{i}", "text": f"record number {i} " + ("lorem ipsum " * (i % 7)), "source": "test"}
        for i in range(n)
    ]


# What marin.evaluation.step.evaluate_model writes (validation: perplexity.evaluate_documents; tasks:
# tasks.score_task with accuracy_stats), written out here so these tests need not import jax.
RESULTS = {
    "checkpoint": "/lab/checkpoints/tiny",
    "checkpoint_step": 200,
    "tokenizer": "/lab/tokenizer.json",
    "model": {"num_layers": 2, "hidden_dim": 64, "vocab_size": 512},
    "config": {
        "checkpoint_path": "/lab/checkpoints/tiny",
        "tokenizer": "/lab/tokenizer.json",
        "max_len": 128,
        "validation": {"stories": "/lab/tokenized/stories"},
        "tasks": ["/lab/eval/arith_mc.jsonl"],
    },
    "validation": {
        "stories": {
            "documents": 50,
            "tokens": 4000,
            "bytes": 16000,
            "loss": 2.25,
            "perplexity": 9.4877,
            "bits_per_byte": 0.8115,
            "unigram_bits_per_byte": 2.5,
        }
    },
    "tasks": {
        "arith_mc": {
            "items": 100,
            "num_fewshot": 0,
            "chance": 0.25,
            "acc": {"value": 0.81, "stderr": 0.0394, "ci95": [0.7222, 0.8749]},
            "acc_norm": {"value": 0.77, "stderr": 0.0423, "ci95": [0.6782, 0.8421]},
            "config": {"name": "arith_mc", "path": "/lab/eval/arith_mc.jsonl", "num_fewshot": 0, "fewshot_seed": 1234},
        }
    },
}


@pytest.fixture(scope="session")
def lab(tmp_path_factory, ray_address):
    root = tmp_path_factory.mktemp("lab")
    prefix = root / "store"
    calls = str(root / "calls")
    raw = ExecutorStep(
        name="documents/raw",
        fn=trace_step,
        config=TraceConfig(calls_dir=calls, label="raw", output_path=this_output_path()),
    )
    train = ExecutorStep(
        name="checkpoints/tiny",
        fn=trace_step,
        config=TraceConfig(
            calls_dir=calls, label="train", output_path=this_output_path(), inputs=(raw / "result.json",)
        ),
    )
    result = Executor(prefix=str(prefix), caller_file=str(root / "exp_browser.py")).run([train])
    raw_dir, train_dir = (p.output_path for p in result.plan.steps)
    write_records(f"{raw_dir}/docs.jsonl", docs(250))
    write_records(f"{raw_dir}/docs.jsonl.gz", docs(30))
    write_records(f"{raw_dir}/docs.jsonl.zst", docs(30))
    write_records(f"{raw_dir}/docs.parquet", docs(130))
    write_records(f"{raw_dir}/deduped.jsonl", [d for d in docs(250) if int(d["id"].split("-")[1]) % 3])
    with open(f"{raw_dir}/corrupt.jsonl.gz", "wb") as f:
        f.write(b"\x1f\x8b\x08\x00garbage-not-gzip" * 10)
    with open(f"{raw_dir}/corrupt.parquet", "wb") as f:
        f.write(b"PAR1 not really parquet")
    with open(f"{raw_dir}/huge_line.jsonl", "w") as f:
        f.write(json.dumps({"id": "big", "text": "x" * 3_000_000}) + "\n")
        f.write(json.dumps({"id": "small", "text": "after the big one"}) + "\n")
    with open(f"{train_dir}/metrics.jsonl", "w") as f:
        for step in range(1, 21):
            f.write(json.dumps({"step": step, "loss": 5.0 / step, "lr": 1e-3, "tokens_per_s": 4000 + step}) + "\n")
        f.write(json.dumps({"step": 20, "eval/stories/bpb": 1.7}) + "\n")
        f.write(json.dumps({"step": 21, "loss": float("nan"), "grad_norm": float("inf")}) + "\n")  # a diverged step
    with open(f"{train_dir}/results.json", "w") as f:
        json.dump(RESULTS, f)
    write_records(f"{raw_dir}/texts.jsonl", [{"text": f"no id {i}"} for i in range(5)])
    write_records(
        f"{raw_dir}/special_floats.jsonl", [{"id": "s0", "score": float("nan")}, {"id": "s1", "score": float("-inf")}]
    )
    with open(f"{train_dir}/tracker.json", "w") as f:
        json.dump({"wandb_url": "https://wandb.ai/lab/tiny/runs/abc"}, f)
    secret = root / "secret.txt"
    secret.write_text("outside the root")
    os.symlink(secret, prefix / "link_outside")
    [record] = (prefix / "experiments").glob("exp_browser-*.json")
    research = write_research(str(prefix))  # training runs, evals, a ladder fit and a 200-step DAG
    return {
        **research,
        "prefix": str(prefix),
        "raw": raw_dir,
        "train": train_dir,
        "record": str(record),
        "secret": str(secret),
        "plan": result.plan,
    }
