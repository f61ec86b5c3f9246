"""Attention backends head to head: forward + backward time and peak memory as the sequence grows.

    .venv/bin/python benchmarks/attention_bench.py                 # seq 1024 2048 4096, this platform's backends
    .venv/bin/python benchmarks/attention_bench.py --seqs 4096 8192 16384 --backends xla pallas --dtype bfloat16
    python benchmarks/attention_bench.py --dtype bfloat16 --packed --check --heads 32 --kv-heads 8 --head-dim 128
    .venv/bin/python benchmarks/attention_bench.py --window 512    # sliding-window attention (Mistral's)

One step is ``jax.grad`` of ``sum(attention(q, k, v) * ct)`` with respect to q, k and v, jitted (causal;
batch 1, 8 heads, head_dim 64 by default; ``--packed`` adds segment ids: ~8 documents of random lengths per
row; ``--window W`` attends within a sliding window of W keys). Backends default to what the platform runs:
``reference``, ``xla`` and ``blockwise`` on CPU; ``reference``, ``xla``, ``cudnn`` and ``pallas`` on GPU;
``splash`` and ``pallas`` join on TPU (on CPU ``pallas`` and ``splash`` only interpret, which measures the
interpreter, not the kernel).

``--check`` adds one more worker per sequence length that runs every backend's forward and backward once
on the same inputs and compares them with ``reference`` computed in fp32 at ``HIGHEST`` matmul precision
on the same (dtype-rounded) inputs (``reference`` itself in ``--dtype`` is listed too: the error that
dtype's rounding alone gives): the relative error ``||ours - ref|| / ||ref||`` of the output and of
each of dq, dk, dv, and whether anything is not finite. That is the correctness record of a compiled
kernel (on CPU the tests do this in interpret mode).

Each (backend, seq) runs in its own worker process (this script with ``--worker``), one at a time, so
memory numbers are not polluted by earlier runs and no two workers share the cores. Per worker:

* time: the median of at least ``--reps`` steps (more until ~2 s are spent), after one warm-up step;
* XLA temp: ``jitted.lower(...).compile().memory_analysis().temp_size_in_bytes``, the scratch XLA
  plans for the whole step besides inputs and outputs: the [heads, seq, seq] scores and probabilities
  of a materializing backend live here;
* peak RSS (CPU): the process's high-water mark during the warm-up and timed steps, minus its resident
  size just before them (the mark is reset after compiling through ``/proc/self/clear_refs``);
  on GPU/TPU instead the device allocator's peak (``memory_stats()``) minus what was in use before.

The table gives each backend's numbers and their ratio to ``reference`` (the plain-jnp oracle, which
materializes the full score matrix); the raw rows go to ``benchmarks/results/attention_bench.json``
(``--out``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "attention_bench.json"
PLATFORM_BACKENDS = {
    "cpu": ["reference", "xla", "blockwise"],
    "gpu": ["reference", "xla", "cudnn", "pallas"],
    "tpu": ["reference", "xla", "blockwise", "pallas", "splash"],
}
MIN_SECONDS = 2.0  # keep timing steps past --reps until this much time is spent (short seqs are fast)
MAX_REPS = 50


# ----------------------------------------------------------------------------------------------------------
# Worker: one backend at one sequence length


def _proc_status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _reset_peak_rss() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0); False where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def make_inputs(args: argparse.Namespace, seed: int = 0):
    """q, k, v, the output cotangent (all ``args.dtype``) and segment ids (None unless ``--packed``)."""
    import jax.numpy as jnp
    import numpy as np

    dtype = jnp.dtype(args.dtype)
    shape_q = (args.batch, args.seq, args.heads, args.head_dim)
    shape_kv = (args.batch, args.seq, args.kv_heads, args.head_dim)
    rng = np.random.default_rng(seed)
    q, ct = (jnp.asarray(rng.normal(size=shape_q), dtype) for _ in range(2))
    k, v = (jnp.asarray(rng.normal(size=shape_kv), dtype) for _ in range(2))
    segments = None
    if args.packed:  # ~8 documents per row, boundaries at random positions
        starts = rng.random((args.batch, args.seq)) < 8 / args.seq
        segments = jnp.asarray(np.cumsum(starts, axis=1), jnp.int32)
    return q, k, v, ct, segments


def worker(args: argparse.Namespace) -> dict:
    import jax
    import jax.numpy as jnp

    from marin.trainer.attention import attention

    q, k, v, ct, segments = make_inputs(args)
    dtype = q.dtype

    def loss(q, k, v):
        out = attention(q, k, v, segments, backend=args.backend, window=args.window)
        return jnp.sum(out.astype(jnp.float32) * ct.astype(jnp.float32))

    t0 = time.perf_counter()
    compiled = jax.jit(jax.grad(loss, argnums=(0, 1, 2))).lower(q, k, v).compile()
    compile_s = time.perf_counter() - t0
    analysis = compiled.memory_analysis()
    row = {
        "platform": jax.default_backend(),
        "device": jax.devices()[0].device_kind,
        "compile_s": compile_s,
        "xla_temp_bytes": getattr(analysis, "temp_size_in_bytes", None),
        "xla_argument_bytes": getattr(analysis, "argument_size_in_bytes", None),
        "xla_output_bytes": getattr(analysis, "output_size_in_bytes", None),
    }

    # Start XLA's thread pools and runtime on a tiny program first, so the peak below is this step's
    # buffers rather than one-time process overhead (~40 MB on CPU, the same for every backend).
    jax.block_until_ready(jax.jit(lambda x: jnp.tanh(x @ x).sum())(jnp.ones((256, 256), dtype)))
    device = jax.devices()[0]
    stats = device.memory_stats() or {}
    device_before = stats.get("bytes_in_use")
    rss_before = _proc_status_kib("VmRSS") if _reset_peak_rss() else None

    jax.block_until_ready(compiled(q, k, v))  # warm-up
    times: list[float] = []
    while len(times) < MAX_REPS and (len(times) < args.reps or sum(times) < MIN_SECONDS):
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(q, k, v))
        times.append(time.perf_counter() - t0)
    row.update(step_ms=1e3 * statistics.median(times), reps=len(times), step_ms_min=1e3 * min(times))

    if rss_before is not None:
        row["peak_rss_delta_bytes"] = 1024 * (_proc_status_kib("VmHWM") - rss_before)
    stats = device.memory_stats() or {}
    if device_before is not None and "peak_bytes_in_use" in stats:
        row["device_peak_delta_bytes"] = stats["peak_bytes_in_use"] - device_before
    return row


def check_worker(args: argparse.Namespace) -> list[dict]:
    """For each of ``--check-seqs``, in this one process (a GPU process takes seconds to start): every
    backend's output and gradients against ``reference`` in fp32 at HIGHEST precision."""
    import jax

    rows = []
    for seq in args.check_seqs:
        try:
            rows.append({"seq": seq, **_check_one(argparse.Namespace(**{**vars(args), "seq": seq}))})
        except Exception as e:  # e.g. the fp32 reference out of memory at the longest seq: the others stand
            rows.append({"seq": seq, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"})
        print(f"[check] seq {seq}: {rows[-1].get('error', 'done')}", file=sys.stderr, flush=True)
        jax.clear_caches()
    return rows


def _check_one(args: argparse.Namespace) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from marin.trainer.attention import attention

    q, k, v, ct, segments = make_inputs(args, seed=1)

    def out_and_grads(backend, q, k, v):
        out, vjp = jax.vjp(lambda q, k, v: attention(q, k, v, segments, backend=backend, window=args.window), q, k, v)
        return (out, *vjp(ct.astype(out.dtype)))

    with jax.default_matmul_precision("highest"):
        wide = [x.astype(jnp.float32) for x in (q, k, v)]
        ref = [np.asarray(x, np.float64) for x in jax.jit(out_and_grads, static_argnums=0)("reference", *wide)]
    errors = {}
    for backend in args.backends_to_check:
        try:
            ours = jax.jit(out_and_grads, static_argnums=0)(backend, q, k, v)
        except Exception as e:  # a backend that refuses or fails to compile: recorded, the others go on
            errors[backend] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
            continue
        row = {}
        for name, a, b in zip(("out", "dq", "dk", "dv"), ours, ref):
            a = np.asarray(a.astype(jnp.float32), np.float64)
            row[f"{name}_rel"] = float(np.linalg.norm(a - b) / np.linalg.norm(b))
            row[f"{name}_max_abs"] = float(np.max(np.abs(a - b)))
            row[f"{name}_finite"] = bool(np.isfinite(a).all())
        errors[backend] = row
        print(f"[check] seq {args.seq} {backend}: {json.dumps(row)}", file=sys.stderr, flush=True)
    return {"platform": jax.default_backend(), "device": jax.devices()[0].device_kind, "errors": errors}


# ----------------------------------------------------------------------------------------------------------
# Parent: one worker at a time, then the table


def run_worker(args: argparse.Namespace, backend: str, seq: int, check: list[str] | None = None) -> dict:
    """One worker process: time ``backend`` at ``seq``, or (``check``) compare those backends with the reference."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--backend", backend, "--seq", str(seq)]
    for name in ("batch", "heads", "kv_heads", "head_dim", "dtype", "reps"):
        cmd += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    if args.packed:
        cmd.append("--packed")
    if args.window is not None:
        cmd += ["--window", str(args.window)]
    if check:
        cmd += ["--check-backends", *check, "--check-seqs", *map(str, args.seqs)]
    row = {"backend": backend, "seq": seq}
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=HERE.parent, timeout=args.timeout)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        error = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
        return {**row, "error": error[-300:]}
    return {**row, **json.loads(lines[-1])}


def probe_platform() -> str:
    """The platform, asked of a child process: on a TPU only one process may hold the chips."""
    out = subprocess.run(
        [sys.executable, "-c", "import jax; print(jax.default_backend())"], capture_output=True, text=True, check=True
    )
    return out.stdout.strip().splitlines()[-1]


def _mib(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**20:,.0f}"


def _ratio(value, base) -> str:
    return "-" if value is None or not base else f"{value / base:.2f}x"


def table(rows: list[dict]) -> str:
    memory = "device peak" if any("device_peak_delta_bytes" in r for r in rows) else "peak RSS"
    header = (
        f"{'seq':>6}  {'backend':<10} {'fwd+bwd ms':>11} {'vs ref':>7} {'XLA temp MiB':>13} {'vs ref':>7} "
        f"{memory + ' MiB':>15} {'vs ref':>7}"
    )
    lines = [header, "-" * len(header)]
    for seq in sorted({r["seq"] for r in rows}):
        at_seq = [r for r in rows if r["seq"] == seq]
        ref = next((r for r in at_seq if r["backend"] == "reference" and "error" not in r), {})
        for r in at_seq:
            if "error" in r:
                lines.append(f"{seq:>6}  {r['backend']:<10} failed: {r['error']}")
                continue
            mem_key = "device_peak_delta_bytes" if "device_peak_delta_bytes" in r else "peak_rss_delta_bytes"
            lines.append(
                f"{seq:>6}  {r['backend']:<10} {r['step_ms']:>11,.2f} {_ratio(r['step_ms'], ref.get('step_ms')):>7} "
                f"{_mib(r['xla_temp_bytes']):>13} {_ratio(r['xla_temp_bytes'], ref.get('xla_temp_bytes')):>7} "
                f"{_mib(r.get(mem_key)):>15} {_ratio(r.get(mem_key), ref.get(mem_key)):>7}"
            )
    return "\n".join(lines)


def error_table(checks: list[dict]) -> str:
    """Relative errors against the fp32 reference: out, dq, dk, dv per backend and seq."""
    lines = [f"{'seq':>6}  {'backend':<10} {'out':>9} {'dq':>9} {'dk':>9} {'dv':>9}  (||x - ref|| / ||ref||, fp32 ref)"]
    for check in checks:
        if "error" in check:
            lines.append(f"{check['seq']:>6}  check failed: {check['error']}")
            continue
        for backend, e in check["errors"].items():
            if "error" in e:
                lines.append(f"{check['seq']:>6}  {backend:<10} failed: {e['error']}")
                continue
            finite = all(e[f"{n}_finite"] for n in ("out", "dq", "dk", "dv"))
            cells = " ".join(f"{e[f'{n}_rel']:>9.2e}" for n in ("out", "dq", "dk", "dv"))
            lines.append(f"{check['seq']:>6}  {backend:<10} {cells}{'' if finite else '  NOT FINITE'}")
    return "\n".join(lines)


def aggregate(rounds: list[list[dict]]) -> list[dict]:
    """Across rounds: the median step time per (backend, seq); memory numbers are from the first round.
    Rounds not yet begun (empty) are left out; none at all gives no rows."""
    rounds = [r for r in rounds if r]
    out = []
    for row in rounds[0] if rounds else []:
        same = [r for rnd in rounds for r in rnd if (r["backend"], r["seq"]) == (row["backend"], row["seq"])]
        if "error" not in row and all("error" not in r for r in same):
            row = {**row, "step_ms": statistics.median(r["step_ms"] for r in same), "rounds": len(same)}
        out.append(row)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--backend", help=argparse.SUPPRESS)
    parser.add_argument("--seq", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--check-backends", dest="backends_to_check", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--check-seqs", type=int, nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--check-only", action="store_true", help="only the --check comparison, no timing")
    parser.add_argument("--seqs", type=int, nargs="+", default=[1024, 2048, 4096])
    parser.add_argument("--backends", nargs="+", help="default: the platform's (see the module docstring)")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--dtype", default="float32", help="float32 or bfloat16 (use bfloat16 on accelerators)")
    parser.add_argument("--packed", action="store_true", help="segment ids: ~8 packed documents per row")
    parser.add_argument("--window", type=int, help="sliding window: keys each query sees (default: all before it)")
    parser.add_argument("--check", action="store_true", help="also compare every backend with an fp32 reference")
    parser.add_argument("--reps", type=int, default=3, help="timed steps per worker, at least")
    parser.add_argument("--rounds", type=int, default=1, help="repeat every worker, in rotated order")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per worker")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where the rows go as JSON")
    args = parser.parse_args()
    if args.worker:
        print(json.dumps({"checks": check_worker(args)} if args.backends_to_check else worker(args)), flush=True)
        return

    started = time.perf_counter()
    platform = probe_platform()
    backends = args.backends or PLATFORM_BACKENDS.get(platform, PLATFORM_BACKENDS["cpu"])
    rounds = []
    for i in range(0 if args.check_only else args.rounds):
        order = backends[i % len(backends) :] + backends[: i % len(backends)]  # rotate: no backend always first
        rows = []
        for seq in args.seqs:
            for backend in order:
                rows.append(run_worker(args, backend, seq))
                r = rows[-1]
                status = r.get("error") or f"{r['step_ms']:.1f} ms, {r['reps']} reps, compile {r['compile_s']:.1f} s"
                print(f"[round {i + 1}] {backend} seq {seq}: {status}", file=sys.stderr, flush=True)
                save(args, platform, rounds + [rows], [])  # so far: a run cut short keeps what it measured
        rounds.append(sorted(rows, key=lambda r: (r["seq"], backends.index(r["backend"]))))
    rows = aggregate(rounds)
    checks = []
    if args.check or args.check_only:
        checked = backends if "reference" in backends else ["reference", *backends]  # reference: its own rounding
        out = run_worker(args, "reference", args.seqs[0], check=checked)
        checks = out["checks"] if "checks" in out else [{"seq": seq, "error": out["error"]} for seq in args.seqs]
        save(args, platform, rounds, checks)
    first = next((r for r in rows if "error" not in r), {})
    print(
        f"platform {platform} ({first.get('device', '?')}), batch {args.batch}, heads {args.heads}, "
        f"kv_heads {args.kv_heads}, head_dim {args.head_dim}, {args.dtype}, causal"
        f"{f', window {args.window}' if args.window else ''}"
        f"{', packed' if args.packed else ''}; fwd+bwd; median of >= {args.reps} steps x {args.rounds} round(s)"
    )
    print(table(rows))
    if checks:
        print(error_table(checks))
    print(f"total {time.perf_counter() - started:.0f} s")
    save(args, platform, rounds, checks)


def save(args: argparse.Namespace, platform: str, rounds: list[list[dict]], checks: list[dict]) -> None:
    """The rows so far (median over the rounds that have them) and the checks, as JSON at ``--out``."""
    rows = aggregate(rounds)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {"args": {**vars(args), "out": str(args.out)}, "platform": platform, "rows": rows, "checks": checks},
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
