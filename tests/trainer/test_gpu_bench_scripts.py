"""The scripts of the GPU proof (``benchmarks/gpu_proof.sh``, docs/trainer.md "On a GPU") run here on CPU
at tiny sizes, so a lease is never spent on a script that was broken before it left: the attention
correctness check, the cuDNN probe, the FP8 benchmark and the real training run on a prepared token cache."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str, timeout: int = 240) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_attention_check_compares_every_backend_with_an_fp32_reference(tmp_path):
    out = tmp_path / "check.json"
    proc = _run(
        "benchmarks/attention_bench.py",
        *("--check-only", "--packed", "--seqs", "64", "--heads", "4", "--kv-heads", "2", "--head-dim", "16"),
        *("--backends", "xla", "blockwise", "--out", str(out)),
    )
    assert "||x - ref|| / ||ref||" in proc.stdout
    [check] = json.loads(out.read_text())["checks"]
    assert check["seq"] == 64 and set(check["errors"]) == {"reference", "xla", "blockwise"}
    for errors in check["errors"].values():  # fp32 inputs: every backend within fp32 rounding of the reference
        for part in ("out", "dq", "dk", "dv"):
            assert errors[f"{part}_finite"] and errors[f"{part}_rel"] < 1e-5, errors


def test_cudnn_probe_checks_and_times_every_way_of_masking():
    """At tiny sizes on CPU: the reference in bf16 and Pallas (interpreted) are measured against fp32, and
    the cuDNN peers are recorded as refused with their reason instead of failing the probe."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import cudnn_attention_probe as probe

    checks, times = [], []
    probe.check(checks, seq=64, heads=4, kv_heads=2, head_dim=16)
    assert {r["segments"] for r in checks} == {"one", "packed", "many"}
    assert [r["route"] for r in checks if r["backend"] == "pallas"] == [0, 1, 2]
    for r in checks:
        if r["backend"] in ("reference bf16", "pallas"):
            assert all(1e-4 < r[part] < 1e-2 for part in ("out", "dq", "dk", "dv")), r  # bf16 rounding
        else:
            assert "error" in r, r  # no GPU here: cuDNN refuses
    probe.timed(times, 1, 64, 4, 2, 16, reps=1)
    assert [r["ms"] for r in times if r["backend"] == "pallas"] and all(r.get("ms", 1) > 0 for r in times)


def test_fp8_bench_reports_quantization_error_and_no_fp8_gemm_on_cpu(tmp_path):
    out = tmp_path / "fp8.json"
    proc = _run("benchmarks/fp8_bench.py", "--models", "tiny", "--tokens", "256", "--reps", "2", "--out", str(out))
    assert "f8 GEMMs" in proc.stdout
    rows = json.loads(out.read_text())["rows"]
    assert [r["proj"] for r in rows] == ["q/o", "k/v", "gate/up", "down"]
    for r in rows:
        # bf16 rounding ~2e-3; e4m3 operands ~3.7e-2 forward, e5m2 gradients ~5.9e-2 (docs/fp8.md)
        assert all(r[f"bf16_{p}_rel"] < 5e-3 for p in ("y", "dx", "dw")), r
        assert 2e-2 < r["fp8_y_rel"] < 6e-2 and all(4e-2 < r[f"fp8_{p}_rel"] < 9e-2 for p in ("dx", "dw")), r
        assert r["fp8_gemm_calls"] == 0  # XLA:CPU emulates FP8; on an H100 the count was 3
        assert r["bf16_fwd_bwd_ms"] > 0 and r["fp8_fwd_bwd_ms"] > 0


def test_train_run_prepares_the_bundled_cache_and_trains_on_it(tmp_path):
    data = tmp_path / "data"
    _run("benchmarks/train_run.py", "prepare", "--out", str(data), "--docs-per-domain", "300")
    cache = json.loads((data / "tokenized" / "train" / "cache.json").read_text())
    assert cache  # a complete token cache (its ledger is written last)
    summary_path = tmp_path / "summary.json"
    _run(
        "benchmarks/train_run.py",
        *("run", "--cache", str(data / "tokenized"), "--config", "nano", "--steps", "4", "--batch", "2"),
        *("--log-every", "2", "--out", str(tmp_path / "run"), "--json", str(summary_path)),
    )
    summary = json.loads(summary_path.read_text())
    assert summary["steps"] == 4 and summary["batch_tokens"] == 2 * 256 and summary["tokens_per_s"] > 0
    assert summary["final_loss"] < summary["first_loss"]  # it trains on the bundled text
    assert summary["eval"]["eval/bundled/bpb"] > 0
    assert (tmp_path / "run" / "checkpoints").is_dir() and (tmp_path / "run" / "metrics.jsonl").exists()


def test_serving_bench_in_gpu_mode_runs_the_server_and_records_a_failed_peer(tmp_path):
    """``gpu_proof.sh serving``'s command at a tiny size on this CPU: the server runs with the served context
    bounded (``--max_model_len``) and reports every concurrency; ``transformers``, which asks for CUDA, fails
    here and is recorded with its error while the benchmark still writes its table."""
    out = tmp_path / "serving.json"
    proc = _run(
        "benchmarks/serving_bench.py",
        *("--device", "gpu", "--preset", "nano", "--concurrency", "1", "2", "--requests_per_client", "1"),
        *("--max_tokens", "4", "--peers", "server", "transformers", "--peer_timeout", "200", "--out", str(out)),
        timeout=400,
    )
    record = json.loads(out.read_text())
    assert set(record["median"]) == {"server"} and set(record["median"]["server"]) == {"1", "2"}
    for c in ("1", "2"):
        assert record["median"]["server"][c]["output_tokens_per_s"] > 0
        assert record["median"]["server"][c]["requests"] == int(c)
    [failed] = record["rounds"]["transformers"]
    assert "CUDA" in failed["error"]
    assert "transformers failed" in proc.stdout and record["host"]["jax"] and "gpu" in record["host"]


def test_serving_bench_stops_a_peer_past_its_budget_with_the_server_it_started(tmp_path):
    """A lease's time limit: a peer still running when ``--budget`` is spent is stopped and recorded as timed
    out (the run still writes its JSON), and the server process it started is stopped with it."""
    import psutil

    out = tmp_path / "serving.json"
    _run(
        "benchmarks/serving_bench.py",
        *("--preset", "nano", "--concurrency", "1", "--requests_per_client", "1", "--max_tokens", "4"),
        *("--peers", "server", "--budget", "8", "--out", str(out)),
        timeout=120,
    )
    [stopped] = json.loads(out.read_text())["rounds"]["server"]
    assert stopped["error"].startswith("timed out")
    left = [
        p.info["cmdline"]
        for p in psutil.process_iter(["cmdline"])
        if "marin.inference.serve" in (p.info["cmdline"] or [])
    ]
    assert not left, left
