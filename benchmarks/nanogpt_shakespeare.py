"""nanoGPT's CPU Shakespeare beside the lab's ``experiments/shakespeare_char.py``: one host, one script, one after
the other; both validation curves, wall times and iterations/s, and both final models scored on the same windows.

    git clone https://github.com/karpathy/nanoGPT benchmarks/peers/nanoGPT
    git -C benchmarks/peers/nanoGPT checkout 3adf61e154c3fe3fca428ad6bc3818b27a3b8291
    .venv/bin/pip install torch==2.13.0            # the CPU build (make test's export-test extra has it)
    .venv/bin/python benchmarks/nanogpt_shakespeare.py      # ~6 minutes on 2 cores

nanoGPT (MIT) stays outside the package: its pinned files are checked by SHA-256, copied to a scratch directory,
given the lab's committed ``input.txt`` (so ``prepare.py`` downloads nothing), and run with its README's exact CPU
command. The lab runs its experiment file unchanged under a scratch prefix (data steps, Ray, compile and all).

- wall time: nanoGPT's ``train.py`` process against the lab's training step (``.executor_status`` RUNNING to
  SUCCESS: process start, compile, the evals every 250 iterations and the checkpoint included); the whole
  experiment's wall (download, documents, tokenizer, cache, eval, samples) is reported beside it;
- loss: each trainer's own validation curve (nanoGPT: 20 random batches of 12 windows; the lab: the first 240
  windows), and both final models on the same windows: every non-overlapping 64-character window of the
  validation split, each character predicted from the ones before it in its window.

Writes ``benchmarks/results/nanogpt_shakespeare.json`` and prints the table of ``docs/real_text.md``.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from host import ROOT, cpu_model  # noqa: E402

NANOGPT_COMMIT = "3adf61e154c3fe3fca428ad6bc3818b27a3b8291"
NANOGPT_SHA256 = {
    "train.py": "413bd97b40bb400a2a0d01230e2946f056c263ebac1b7281c2367d964a123085",
    "model.py": "7c01703240dbec5d554527dc666e35b3df8391d0b117fddc07afcf325a21d11c",
    "configurator.py": "5cc23aca26b4ab3c0d9e5f82740f4781f9444f42718c15abcee70d93c5aabe8f",
    "config/train_shakespeare_char.py": "9b41cdfb2c917259d796a8184d835221a349c23cd18a0a63b46da431d95d9c05",
    "data/shakespeare_char/prepare.py": "d5fbea0686d146748cf36017d6c34136a2fe9c41f065f1429529ad55a992c692",
}
README_FLAGS = (
    "--device=cpu --compile=False --eval_iters=20 --log_interval=1 --block_size=64 --batch_size=12 --n_layer=4 "
    "--n_head=4 --n_embd=128 --max_iters=2000 --lr_decay_iters=2000 --dropout=0.0"
).split()
SHAKESPEARE = ROOT / "marin" / "corpus" / "texts" / "tinyshakespeare" / "input.txt"
EVAL_LINE = re.compile(r"step (\d+): train loss ([\d.]+), val loss ([\d.]+)")


def check_nanogpt(src: Path) -> None:
    for rel, want in NANOGPT_SHA256.items():
        path = src / rel
        if not path.exists():
            raise SystemExit(f"{path}: missing; clone nanoGPT at {NANOGPT_COMMIT} there (see this file's docstring)")
        got = hashlib.sha256(path.read_bytes()).hexdigest()
        if got != want:
            raise SystemExit(f"{path}: SHA-256 {got}, expected {want} (nanoGPT at {NANOGPT_COMMIT})")


def run_nanogpt(src: Path, work: Path, iters: int) -> dict:
    """nanoGPT's README CPU command (with ``--max_iters``/``--lr_decay_iters`` set to ``iters``) in ``work``."""
    shutil.copytree(src, work, ignore=shutil.ignore_patterns(".git"))
    shutil.copy(SHAKESPEARE, work / "data" / "shakespeare_char" / "input.txt")
    subprocess.run([sys.executable, "data/shakespeare_char/prepare.py"], cwd=work, check=True, capture_output=True)
    flags = [f for f in README_FLAGS if not f.startswith(("--max_iters", "--lr_decay_iters"))]
    command = [sys.executable, "train.py", "config/train_shakespeare_char.py", *flags]
    command += [f"--max_iters={iters}", f"--lr_decay_iters={iters}", f"--out_dir={work / 'out'}"]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=work, capture_output=True, text=True)
    wall = time.perf_counter() - start
    (work / "train.log").write_text(done.stdout + done.stderr)
    if done.returncode:
        raise RuntimeError(f"nanoGPT train.py failed ({done.returncode}); log: {work / 'train.log'}")
    curve = {int(m[1]): float(m[3]) for m in EVAL_LINE.finditer(done.stdout)}
    params = re.search(r"number of parameters: ([\d.]+)M", done.stdout)
    return {
        "command": "python train.py config/train_shakespeare_char.py " + " ".join(command[3:]),
        "wall_s": wall,
        "iterations_per_s": iters / wall,
        "val_curve": curve,
        "final_val_loss": curve[max(curve)],
        "reported_params_M": float(params[1]) if params else None,
    }


LAB_DRIVER = """
import dataclasses, sys
from experiments import shakespeare_char as exp
from marin.execution import executor_main
iters = int(sys.argv[1])
train = exp.TRAIN if iters == exp.ITERATIONS else dataclasses.replace(exp.TRAIN, num_train_steps=iters)
steps = exp.build(train)
executor_main(steps=[steps["evaluation"], steps["samples"]], args=["--prefix", sys.argv[2]])
"""


def run_lab(prefix: Path, iters: int) -> dict:
    """The lab's experiment under ``prefix``: whole wall, the training step's wall, its validation curve."""
    # Ray runs its workers at nice 15 unless told otherwise; nanoGPT's train.py runs at the caller's priority, so
    # on a machine with anything else running the lab would yield to it and nanoGPT would not.
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled", "RAY_worker_niceness": "0"}
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", LAB_DRIVER, str(iters), str(prefix)], cwd=ROOT, env=env, capture_output=True, text=True
    )
    wall = time.perf_counter() - start
    (prefix / "run.log").write_text(done.stdout + done.stderr)
    if done.returncode:
        raise RuntimeError(f"the lab's experiment failed ({done.returncode}); log: {prefix / 'run.log'}")
    [run] = (prefix / "checkpoints").glob("shakespeare-char*")
    states = {r["state"]: r["time"] for r in map(json.loads, (run / ".executor_status").read_text().splitlines())}
    train_wall = states["SUCCESS"] - states["RUNNING"]
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    curve = {m["step"]: m["eval/shakespeare/loss"] for m in metrics if "eval/shakespeare/loss" in m}
    return {
        "experiment_wall_s": wall,
        "wall_s": train_wall,
        "iterations_per_s": iters / train_wall,
        "val_curve": curve,
        "final_val_loss": curve[max(curve)],
        "run": str(run),
    }


NANOGPT_WINDOWS = """
import json, sys, numpy as np, torch
sys.path.insert(0, sys.argv[1])
from model import GPT, GPTConfig
ckpt = torch.load(sys.argv[2], map_location="cpu")
model = GPT(GPTConfig(**ckpt["model_args"]))
model.load_state_dict({k.removeprefix("_orig_mod."): v for k, v in ckpt["model"].items()})
model.eval()
val = np.fromfile(sys.argv[3], dtype=np.uint16).astype(np.int64)
n = (len(val) - 1) // 64
x = torch.from_numpy(val[: n * 64].reshape(n, 64)); y = torch.from_numpy(val[1 : n * 64 + 1].reshape(n, 64))
with torch.no_grad():
    losses = [model(x[i : i + 64], y[i : i + 64])[1].item() * len(x[i : i + 64]) for i in range(0, n, 64)]
print(json.dumps({"loss": sum(losses) / n, "windows": n, "iter": ckpt["iter_num"]}))
"""


def lab_windows_loss(run: str) -> dict:
    """The lab's final checkpoint on every non-overlapping 64-character window of the validation split."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from marin.corpus.public import public_text
    from marin.inference import load_model
    from marin.tokenize import load_tokenizer
    from marin.trainer.model.llama import forward

    cfg, params, step = load_model(run)
    text = SHAKESPEARE.read_text(encoding="utf-8")
    assert public_text("tinyshakespeare").files()["input.txt"] == hashlib.sha256(text.encode()).hexdigest()
    val = text[int(len(text) * 0.9) :]
    [tokenizer_dir] = (Path(run).parent.parent / "tokenizers").glob("tinyshakespeare-char*")
    ids = np.asarray(load_tokenizer(str(tokenizer_dir)).encode(val, add_special_tokens=False).ids)
    n = (len(ids) - 1) // 64
    x, y = ids[: n * 64].reshape(n, 64), ids[1 : n * 64 + 1].reshape(n, 64)

    @jax.jit
    def nll(params, x, y):
        logits = forward(cfg, params, x)
        return -jnp.take_along_axis(jax.nn.log_softmax(logits), y[..., None], axis=-1).sum()

    total = sum(float(nll(params, x[i : i + 64], y[i : i + 64])) for i in range(0, n, 64))
    return {"loss": total / (n * 64), "windows": n, "iter": step}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nanogpt_dir", default=str(ROOT / "benchmarks" / "peers" / "nanoGPT"))
    parser.add_argument("--iters", type=int, default=2000)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "nanogpt_shakespeare.json"))
    args = parser.parse_args()
    src = Path(args.nanogpt_dir)
    check_nanogpt(src)
    import torch

    work = Path(tempfile.mkdtemp(prefix="nanogpt-bench-"))
    nanogpt = run_nanogpt(src, work / "nanoGPT", args.iters)
    lab = run_lab(work / "lab", args.iters)
    nanogpt["same_windows"] = json.loads(  # the last line: model.py prints the parameter count first
        subprocess.run(
            [
                sys.executable,
                "-c",
                NANOGPT_WINDOWS,
                str(work / "nanoGPT"),
                str(work / "nanoGPT" / "out" / "ckpt.pt"),
                str(work / "nanoGPT" / "data" / "shakespeare_char" / "val.bin"),
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.splitlines()[-1]
    )
    lab["same_windows"] = lab_windows_loss(lab["run"])
    result = {
        "date": datetime.date.today().isoformat(),
        "host": cpu_model(),
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "nanogpt_commit": NANOGPT_COMMIT,
        "iterations": args.iters,
        "nanogpt": nanogpt,
        "lab": lab,
        "wall_ratio_lab_over_nanogpt": lab["wall_s"] / nanogpt["wall_s"],
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(table(result))


def table(r: dict) -> str:
    n, lab = r["nanogpt"], r["lab"]
    rows = [
        f"{r['date']}, {r['host']} ({r['cpus']} CPUs), torch {r['torch']}, nanoGPT {r['nanogpt_commit'][:8]}, "
        f"{r['iterations']} iterations",
        "",
        "| | nanoGPT `train.py` | the lab |",
        "|---|---|---|",
        f"| validation loss at {r['iterations']} (own protocol) | {n['final_val_loss']:.4f} | "
        f"{lab['final_val_loss']:.4f} |",
        f"| validation loss, same {n['same_windows']['windows']} windows | {n['same_windows']['loss']:.4f} | "
        f"{lab['same_windows']['loss']:.4f} |",
        f"| training wall time (s) | {n['wall_s']:.1f} | {lab['wall_s']:.1f} "
        f"({r['wall_ratio_lab_over_nanogpt']:.2f}x) |",
        f"| iterations/s | {n['iterations_per_s']:.2f} | {lab['iterations_per_s']:.2f} |",
        f"| whole experiment wall (s) | - | {lab['experiment_wall_s']:.1f} |",
    ]
    steps = sorted(set(n["val_curve"]) | {int(k) for k in lab["val_curve"]})
    rows += ["", "| iteration | nanoGPT val loss | lab val loss |", "|---|---|---|"]
    for s in steps:
        a, b = n["val_curve"].get(s), lab["val_curve"].get(s)
        rows.append(f"| {s} | {'' if a is None else f'{a:.4f}'} | {'' if b is None else f'{b:.4f}'} |")
    return "\n".join(rows)


if __name__ == "__main__":
    main()
