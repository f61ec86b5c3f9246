"""Benchmark our `marin.execution` executor against the published Marin executor (PyPI `marin-core`, the peer).

Each number comes from a fresh subprocess `python benchmarks/executor_workload.py ...` run with each side's
interpreter (ours: `.venv/bin/python`; peer: `benchmarks/.venv-peer/bin/python`, created on first use with
`python3.11 -m venv` + `pip install --pre marin-core gitpython`, never a project dependency), peer and ours
interleaved (alternating who goes first). Per DAG shape (`chain`, `fan`, `chains_and_fan`, see `build_steps`):

1. materialize: whole-process wall of the first run of a `--run_n` (200) step DAG into an empty prefix (imports,
   Ray start if used, every step, shutdown); checks that every step wrote its file.
2. noop_rerun: the same command again on the same prefix; checks that no step output changed.
3. dry_run: whole-process wall of `executor_main ... --dry_run true` on a `--sizes` (1000) step DAG.
4. plan: only the in-process plan+hash call on a `--sizes` step DAG, timed inside the subprocess
   (ours: `Executor(prefix=p).plan(steps)`; peer: `Executor.compute_version` over all steps).

A failure (non-zero exit, e.g. RecursionError, or timeout) is recorded as text, not a number; nothing asserts on
timings. The peer's scheduler sleeps 1 s whenever no step finished, so its 200-step chain takes ~3.5 min; with
`--peer_chain_cap K` the peer materializes only K chain steps and the table shows a labelled linear extrapolation
(fixed cost once + measured per-step cost x n); the peer's chain noop_rerun then covers those K steps.

    python benchmarks/executor_bench.py [--only ours|peer] [--sizes 1000 ...] [--run_n 200] [--quick]
                                        [--shapes chain fan chains_and_fan] [--repeat 1] [--peer_chain_cap K]

Prints a Markdown table (ratio = ours/peer, < 1 means ours is faster) to stdout; writes JSON (all samples) to
`benchmarks/results/executor_bench.json` and each subprocess's log to `benchmarks/results/logs/`.
"""

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
WORKLOAD = BENCH / "executor_workload.py"
RESULTS = BENCH / "results"
PEER_VENV = BENCH / ".venv-peer"
PYTHON = {"ours": ROOT / ".venv" / "bin" / "python", "peer": PEER_VENV / "bin" / "python"}
# Never put ROOT on the peer's path: our `marin/` package would shadow the peer's `marin`.
PYTHONPATH = {"ours": f"{BENCH}{os.pathsep}{ROOT}", "peer": str(BENCH)}
SHAPES = ("chain", "fan", "chains_and_fan")
ERROR_RE = re.compile(r"^(?:[\w.]+\.)?\w*(?:Error|Exception|Exit|Interrupt)\b.*$", re.M)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def ensure_peer_venv() -> None:
    py = PYTHON["peer"]
    if py.exists() and subprocess.run([py, "-c", "import marin.execution, git"], capture_output=True).returncode == 0:
        return
    log(f"creating peer venv at {PEER_VENV} (pip install --pre marin-core gitpython; takes a few minutes)")
    subprocess.run(["python3.11", "-m", "venv", str(PEER_VENV)], check=True)
    subprocess.run([py, "-m", "pip", "install", "-q", "--pre", "marin-core", "gitpython"], check=True)


def version_of(impl: str) -> str:
    if impl == "peer":
        code = "import importlib.metadata as m; print('marin-core ' + m.version('marin-core'))"
        return subprocess.run([PYTHON["peer"], "-c", code], capture_output=True, text=True).stdout.strip()
    git = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"], capture_output=True, text=True)
    return "marin (this repo) " + (git.stdout.strip() or "uncommitted")


def run_workload(impl: str, mode: str, shape: str, n: int, prefix: Path, ctx: dict) -> dict:
    """Run one workload subprocess; return its wall time plus the JSON it printed, or an error text."""
    # MARIN_PREFIX matters: without it the peer's StepSpec.output_path asks the GCE metadata server on every access.
    env = dict(
        os.environ,
        PYTHONPATH=PYTHONPATH[impl],
        MARIN_PREFIX=str(prefix),
        RAY_AUTH_MODE="disabled",
        RAY_USAGE_STATS_ENABLED="0",
        RAY_TMPDIR=ctx["ray_tmp"],
    )
    cmd = [
        str(PYTHON[impl]),
        str(WORKLOAD),
        "--mode",
        mode,
        "--impl",
        impl,
        "--shape",
        shape,
        "--n",
        str(n),
        "--prefix",
        str(prefix),
    ]
    log_path = RESULTS / "logs" / f"{impl}-{mode}-{shape}-{n}-{ctx['seq']:03d}.log"
    ctx["seq"] += 1
    with open(log_path, "w") as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            cmd, cwd=ctx["workdir"], env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            rc = proc.wait(timeout=ctx["timeout"])
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = None
        wall = time.perf_counter() - t0
    text = log_path.read_text(errors="replace")
    res = {"wall_s": wall, "log": str(log_path.relative_to(ROOT))}
    found = re.findall(r"^BENCH_JSON (.*)$", text, re.M)
    if rc == 0 and found:
        return res | json.loads(found[-1])
    errors = ERROR_RE.findall(text) or [line for line in text.splitlines() if line.strip()][-1:] or ["no output"]
    detail = f"timeout after {ctx['timeout']} s" if rc is None else f"exit {rc}: {errors[-1].strip()[:300]}"
    return res | {"error": detail}


def outputs(prefix: Path) -> dict[str, int]:
    return {str(p): p.stat().st_mtime_ns for p in prefix.rglob("data.json")} if prefix.exists() else {}


def measure(name: str, impl: str, mode: str, shape: str, n: int, ctx: dict, repeat=1, prefix=None, run_n=None) -> dict:
    """Run `repeat` samples of `run_n` (default n) steps; value = median plan_s (plan) or whole-process wall."""
    run_n = run_n or n
    prefix = prefix or Path(tempfile.mkdtemp(prefix=f"{impl}-{mode}-{shape}-", dir=ctx["workdir"]))
    samples: list[dict] = []
    while len(samples) < repeat and not any("error" in s for s in samples):  # stop at the first failure
        samples.append(run_workload(impl, mode, shape, run_n, prefix, ctx))
    rec = {
        "measurement": name,
        "impl": impl,
        "shape": shape,
        "n": n,
        "ran_n": run_n,
        "prefix": str(prefix),
        "samples": samples,
    }
    bad = [s for s in samples if "error" in s]
    if not bad and mode == "plan" and any(s["planned"] != run_n for s in samples):
        bad = [{"error": f"planned {samples[0]['planned']} steps, expected {run_n}"}]
    if bad:
        rec["error"] = bad[0]["error"]
    else:
        rec["value_s"] = statistics.median(s["plan_s" if mode == "plan" else "wall_s"] for s in samples)
        rec["import_s"] = statistics.median(s["import_s"] for s in samples)
    log(f"  {impl:4s} {name:11s} {shape:14s} n={run_n:<5d} " + (rec.get("error") or f"{rec['value_s']:.3f} s"))
    return rec


def materialize_and_rerun(impl: str, shape: str, n: int, args, ctx: dict) -> list[dict]:
    cap = args.peer_chain_cap
    run_n = cap if impl == "peer" and shape == "chain" and 0 < cap < n else n
    first = measure("materialize", impl, "run", shape, n, ctx, run_n=run_n)
    prefix = Path(first["prefix"])
    before = outputs(prefix)
    if "error" not in first and len(before) != run_n:
        first["error"] = f"only {len(before)}/{run_n} steps wrote their output"
    if run_n != n and "error" not in first:  # labelled linear extrapolation: fixed cost once + per-step cost x n
        per_step = first["samples"][0]["executor_main_s"] / run_n
        first |= {"measured_s": first["value_s"], "value_s": first["value_s"] + (n - run_n) * per_step}
    again = measure("noop_rerun", impl, "run", shape, n, ctx, args.repeat, prefix=prefix, run_n=run_n)
    changed = sum(before.get(p) != m for p, m in outputs(prefix).items())
    if changed and "error" not in again:
        again["error"] = f"rerun rewrote {changed} step outputs (not a no-op)"
    return [first, again]


def cell(rec: dict | None, unit: str) -> str:
    if rec is None:
        return "-"
    if "error" in rec:
        return "FAIL: " + rec["error"].replace("|", "/")[:90]
    value = f"{rec['value_s'] * 1000:.1f} ms" if unit == "ms" else f"{rec['value_s']:.2f} s"
    if "measured_s" in rec:
        return f"≈{value} (extrapolated; measured {rec['measured_s']:.2f} s for n={rec['ran_n']})"
    return value + (f" (ran n={rec['ran_n']})" if rec["ran_n"] != rec["n"] else "")


def markdown(records: list[dict], impls: list[str]) -> str:
    rows: dict[tuple, dict] = {}
    for r in records:
        rows.setdefault((r["measurement"], r["shape"], r["n"]), {})[r["impl"]] = r
    lines = [f"| measurement | shape | steps | {' | '.join(impls)} | ours/peer |", "|---" * (len(impls) + 4) + "|"]
    for (name, shape, n), by in rows.items():
        ours, peer, ratio = by.get("ours", {}), by.get("peer", {}), "-"
        peer_full = peer.get("ran_n") == n or "measured_s" in peer
        if "value_s" in ours and "value_s" in peer and ours["ran_n"] == n and peer_full:
            ratio = f"{ours['value_s'] / peer['value_s']:.3f}" + (" (vs extrapolation)" if "measured_s" in peer else "")
        cells = " | ".join(cell(by.get(i), "ms" if name == "plan" else "s") for i in impls)
        lines.append(f"| {name} | {shape} | {n} | {cells} | {ratio} |")
    imports = {r["impl"]: r["import_s"] for r in records if r["measurement"] == "plan" and "import_s" in r}
    if imports:
        lines.append(
            "\n`import marin.execution` inside the workload process: "
            + ", ".join(f"{i} {s:.2f} s" for i, s in imports.items())
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=("ours", "peer"), help="run a single implementation")
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000], help="step counts for dry-run and plan")
    ap.add_argument("--run_n", type=int, default=200, help="step count for materialize and no-op rerun")
    ap.add_argument("--shapes", nargs="+", choices=SHAPES, default=list(SHAPES))
    ap.add_argument("--quick", action="store_true", help="smoke test: --run_n 20 --sizes 100")
    ap.add_argument("--repeat", type=int, default=1, help="samples (median) for rerun, dry-run and plan")
    ap.add_argument("--peer_chain_cap", type=int, default=0, help="materialize only K peer chain steps, extrapolate")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per subprocess")
    ap.add_argument("--keep", action="store_true", help="keep the temporary prefixes")
    args = ap.parse_args()
    if args.quick:
        args.run_n, args.sizes = 20, [100]
    impls = [args.only] if args.only else ["peer", "ours"]
    if "peer" in impls:
        ensure_peer_venv()
    (RESULTS / "logs").mkdir(parents=True, exist_ok=True)
    ctx = {
        "workdir": tempfile.mkdtemp(prefix="exb_", dir="/tmp"),
        "ray_tmp": f"/tmp/rb_{os.getpid()}",
        "timeout": args.timeout,
        "seq": 0,
    }
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "cpus": os.cpu_count(),
        "args": vars(args),
        "versions": {i: version_of(i) for i in impls},
    }
    records: list[dict] = []
    turn = 0

    def interleaved(fn) -> None:  # alternate which implementation goes first; save JSON as we go
        nonlocal turn
        for impl in impls if turn % 2 == 0 else impls[::-1]:
            records.extend(fn(impl))
            (RESULTS / "executor_bench.json").write_text(json.dumps({"meta": meta, "results": records}, indent=2))
        turn += 1

    try:
        for shape in args.shapes:
            interleaved(lambda impl, shape=shape: materialize_and_rerun(impl, shape, args.run_n, args, ctx))
        for n in args.sizes:
            for shape in args.shapes:
                interleaved(
                    lambda impl, shape=shape, n=n: [measure("dry_run", impl, "dry_run", shape, n, ctx, args.repeat)]
                )
            for shape in args.shapes:
                interleaved(lambda impl, shape=shape, n=n: [measure("plan", impl, "plan", shape, n, ctx, args.repeat)])
    finally:
        shutil.rmtree(ctx["ray_tmp"], ignore_errors=True)
        if not args.keep:
            shutil.rmtree(ctx["workdir"], ignore_errors=True)
    print(
        f"Executor benchmark ({meta['date']}, {meta['cpus']} CPUs; "
        + "; ".join(f"{i}: {v}" for i, v in meta["versions"].items())
        + ")\n"
    )
    print(markdown(records, impls))
    log(f"\nJSON written to {RESULTS / 'executor_bench.json'}")


if __name__ == "__main__":
    main()
