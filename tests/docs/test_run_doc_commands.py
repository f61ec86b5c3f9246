"""Every command shown in README.md and docs/*.md, run as written, in a scratch copy of the repository.

The scratch copy links the repository's files (and its .venv) into a temp dir, so commands that write into
the working directory (``./local_store``, ``reports/``, ``site/``, ``benchmarks/results/``) write there.
Commands run with ``bash -c`` in document order of need (the quickstart first), with the venv's ``bin`` first
on PATH and the session's Ray cluster in ``RAY_ADDRESS`` (its workers reach the object-store servers).

A command is changed only by the rewrites in ``REWRITES`` (each says why: scratch paths instead of /tmp,
the GCS server instead of a real bucket, a free port) and is not run only when it is listed in
``NOT_RUN`` with its reason: commands that need a cloud account (``tests/docs/test_docs.py``'s
``NEEDS_CLOUD``), and the few that cannot run inside a test run, each naming where else it runs.
"""

from __future__ import annotations

import concurrent.futures
import glob
import os
import shutil
import subprocess
import sys
import time
import types
import urllib.request
from pathlib import Path

import pytest

from tests.docs.test_docs import NEEDS_CLOUD, documented_commands
from tests.object_store_servers import free_port
from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]

NOT_RUN: dict[str, str] = {
    **{command: f"needs a cloud account: {why}" for command, why in NEEDS_CLOUD.items()},
    "make test": "it is this test run",
    **{
        command: (
            "lowers or restores vm.max_map_count, a setting of the whole machine, to reproduce the suite's old "
            "segfault (a run of this test once crashed its own suite that way); tests/test_memory_maps.py tests "
            "the release that prevents it"
        )
        for command in (
            "echo 5000 > /proc/sys/vm/max_map_count",
            "echo 65530 > /proc/sys/vm/max_map_count",
            *(
                f"MARIN_MAPS_HEADROOM={headroom} .venv/bin/python -m pytest tests/trainer/test_model.py "
                "tests/trainer/test_chunked_loss.py tests/trainer/test_fp8.py tests/trainer/test_loop.py"
                for headroom in ("1e9", "0.5")
            ),
        )
    },
    "python experiments/exp11_mixture_shift.py": (
        "trains a second 200-step nano run and evaluates it (2.5 minutes, the suite's largest single cost) through "
        "the code path of make quickstart, which runs here; its --dry_run runs here (the plan: the quickstart's "
        "steps and the control arm)"
    ),
    "python -m marin.report experiments/exp11_mixture_shift.py --prefix ./local_store --out reports/exp11.md": (
        "needs the exp11 run above; the same report command runs here on the quickstart, and tests/report runs it "
        "on a hand-made prefix with every step state"
    ),
    "python experiments/shakespeare_char.py": (
        "2,000 iterations (~2 minutes); tests/experiments/test_shakespeare_char.py runs the same DAG at 150 iterations "
        "and its --dry_run runs here"
    ),
    "python experiments/exp43_books_ladder.py": (
        "16 ladder runs and a target (~30-35 minutes); tests/experiments/test_exp43_books_ladder.py runs a tiny "
        "ladder on the same books and its --dry_run runs here"
    ),
    "python benchmarks/nanogpt_shakespeare.py": (
        "needs nanoGPT's checkout under benchmarks/peers (not part of the repository) and ~5 minutes; its lab side is "
        "the experiment above, its nanoGPT side nanoGPT's own train.py"
    ),
    ".venv/bin/python benchmarks/sft_bench.py": (
        "minutes of training at its default sizes; tests/chat/test_sft_bench.py runs the same script at small sizes"
    ),
    ".venv/bin/python benchmarks/dpo_bench.py": (
        "minutes of DPO steps in two frameworks, three rounds; its lab peer is the step tests/posttrain trains and "
        "checks against TRL, its TRL peer the DPOTrainer tests/posttrain/test_trl_parity.py runs"
    ),
    ".venv/bin/python benchmarks/attention_bench.py --dtype bfloat16 --seqs 4096 8192 16384": (
        "needs a GPU or TPU (seq 16384 on CPU takes hours); the same script runs at default sizes here"
    ),
    **{
        f"bash benchmarks/gpu_proof.sh {phase}": (
            "needs an NVIDIA GPU (the first phases ran on lent H100 and H200 machines: benchmarks/results/gpu/); its "
            "scripts run on CPU in tests/trainer/test_attention_bench.py and tests/trainer/test_gpu_bench_scripts.py"
        )
        for phase in ("attention", "kernels", "training", "serving", "levers3")
    },
    "ray job submit --address http://127.0.0.1:8265 --working-dir . --runtime-env-json "
    '\'{"env_vars": {"MARIN_PREFIX": "gs://YOUR_BUCKET/lab"}}\' -- python experiments/hello_world.py': (
        "needs a Ray head with a job server on :8265; tests/infra/test_job_submit.py starts one and runs this "
        "command verbatim"
    ),
}

SCRATCH_DIRS = {"local_store", "reports", "site", "wandb", ".pytest_cache", "build", "dist"}
"""Outputs of the commands: never linked from the repository, created in the scratch copy."""
COPIED_DIRS = {"benchmarks"}
"""Directories whose scripts write beside themselves (``benchmarks/results/``): their files are copied."""

# First the steps whose outputs other commands read.
FIRST = ("make quickstart", "python experiments/hello_world.py")
SERVERS = ("make browse", "python -m data_browser", "python -m marin.inference.serve")


def rewrite(command: str, scratch: Path, gcs_prefix: str, port: int) -> str:
    """``REWRITES`` applied to one command."""
    for old, new in REWRITES:
        command = command.replace(old, new.format(scratch=scratch, gcs=gcs_prefix, port=port))
    if "<hash>" in command:  # a path the reader fills in from their own ./local_store
        words = []
        for word in command.split(" "):
            if "<hash>" in word:
                # eight hex digits, not "*": quickstart-nano-<hash> must not also match quickstart-nano-instruct-…
                [match] = glob.glob(str(scratch / word.replace("<hash>", "[0-9a-f]" * 8)))
                word = os.path.relpath(match, scratch)
            words.append(word)
        command = " ".join(words)
    return command


REWRITES: list[tuple[str, str]] = [
    ("/tmp/", "{scratch}/tmp/"),  # scratch outputs, not the machine's /tmp
    ("gs://bucket/prefix", "{gcs}/browse"),  # the GCS server instead of a real bucket
    ("gs://my-bucket/lab", "{gcs}/lab"),
    ("--port 5000", "--port {port}"),  # a free port: test runs share the machine
    ("--port 8000", "--port {port}"),
    # make's install stamps count as current (-o): the venv is this test run's own, with every extra the targets
    # install already in (the dev extra holds them). Without it, CI's fresh venv (no .installed-browser stamp)
    # ran `pip install -e ".[browser]"` from here, mid-run, pointing the venv's editable install at this scratch
    # copy.
    ("make quickstart", "make -o .venv/.installed-base quickstart"),
    ("make browse", "make -o .venv/.installed-browser browse BROWSE_FLAGS='--port {port}'"),
    # Installing would rewrite this test run's own environment; a dry run resolves the extra against the index,
    # with the venv's setuptools as the build backend (an isolated build env, set up anew for each of the five
    # commands, was half of each one's time: ~12 s of the suite).
    ("pip install -e", "pip install --dry-run --no-build-isolation -e"),
    # Its seq 2048 and 4096 rows cost a minute of the suite; seq 1024 runs the same code path per backend
    # (tests/trainer/test_attention_bench.py checks the script's output itself).
    (
        ".venv/bin/python benchmarks/attention_bench.py",
        ".venv/bin/python benchmarks/attention_bench.py --seqs 1024",
    ),
    # Its warm-up compiles every program a request can need: 20 at the quickstart model's 256 positions (36 s of the
    # suite), 11 at 64 (18 s); the same warm-up and serving code (tests/inference checks the programs themselves).
    ("python -m marin.inference.serve", "python -m marin.inference.serve --max_model_len 64"),
    # Its 36,000 documents per domain (for a GPU run) cost 18 s of the suite; 2,000 run the same steps
    # (tests/trainer/test_gpu_bench_scripts.py trains on such a cache).
    (
        "benchmarks/train_run.py prepare --out .gpudata",
        "benchmarks/train_run.py prepare --out .gpudata --docs-per-domain 2000",
    ),
]


def scratch_copy(scratch: Path, with_venv: bool = True) -> None:
    scratch.mkdir(parents=True, exist_ok=True)
    for entry in ROOT.iterdir():
        if entry.name in SCRATCH_DIRS or (entry.name == ".venv" and not with_venv):
            continue
        if entry.name in COPIED_DIRS:
            (scratch / entry.name).mkdir()
            for child in entry.iterdir():  # copies: a script resolving its own path must find the scratch copy
                if child.is_file():
                    shutil.copy2(child, scratch / entry.name / child.name)
            continue
        (scratch / entry.name).symlink_to(entry)


def order(command: str) -> int:
    for i, prefix in enumerate(FIRST):
        if command.startswith(prefix):
            return i
    return len(FIRST) + (1 if command.startswith(SERVERS) else 0)


def env_for(ray_address: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MARIN_PREFIX", "PYTEST_CURRENT_TEST")}
    venv_bin = str(Path(sys.executable).parent)
    return {**env, "PATH": f"{venv_bin}:{env.get('PATH', '')}", "RAY_ADDRESS": ray_address, "WANDB_SILENT": "true"}


def answers(port: int) -> bool:
    """The server on ``port`` answers ``/`` with 200 (each documented server's readiness)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as response:
            return response.status == 200
    except OSError:
        return False


def serve(command: str, cwd: Path, env: dict, port: int) -> None:
    """Start a documented server, wait until it answers for as long as it runs (a busy host may take minutes to
    import and compile: issue 47; the test's timeout bounds a hung one), stop it. Its output goes to a file, which
    a pipe nobody reads while waiting would fill and block."""
    log = cwd.parent / f"serve-{port}.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            ["bash", "-c", f"exec {command}"],
            cwd=cwd,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_for(lambda: answers(port), f"{command!r} to serve on {port}", proc=proc, log=log, poll_s=0.3)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 15)
            proc.wait(timeout=30)  # a shutdown, not work: a server that ignores SIGTERM for 30 s is a bug


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_every_documented_command_runs(tmp_path, gcs_prefix, ray_address, quickstart_run):
    """The quickstart's outputs are seeded from the session's run of the same DAG (same hashes), so
    ``make quickstart`` here is its documented no-op rerun; tests/experiments/test_quickstart.py checks the
    training itself."""
    commands = sorted((c for c in documented_commands(readme=True) if c not in NOT_RUN), key=order)
    assert "make quickstart" in commands and "python experiments/hello_world.py" in commands
    scratch = tmp_path / "repo"
    scratch_copy(scratch)
    shutil.copytree(quickstart_run["prefix"], scratch / "local_store")
    (scratch / "tmp").mkdir()
    env = env_for(ray_address)
    ran = []

    def run(command: str, concrete: str, cwd: Path) -> None:
        # no bound of its own: a command runs as long as it works (the test's timeout bounds a hung one)
        out = subprocess.run(["bash", "-c", concrete], cwd=cwd, env=env, capture_output=True, text=True, check=False)
        failure = f"{command!r} (run as {concrete!r}) failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
        assert out.returncode == 0, failure

    # The pip dry runs only read the package index and write nothing: all at once (they wait on the index).
    dry_runs = {c: rewrite(c, scratch, gcs_prefix, 0) for c in commands}
    dry_runs = {c: concrete for c, concrete in dry_runs.items() if "pip install --dry-run" in concrete}
    with concurrent.futures.ThreadPoolExecutor(len(dry_runs) or 1) as pool:
        for future in [pool.submit(run, c, concrete, scratch) for c, concrete in dry_runs.items()]:
            future.result()
    ran += list(dry_runs)
    for command in (c for c in commands if c not in dry_runs):
        port = free_port()
        if command == "python -m data_browser --config_path browser.yaml":
            (scratch / "browser.yaml").write_text(f"roots: ['./local_store']\nport: {port}\n")
        concrete = rewrite(command, scratch, gcs_prefix, port)
        cwd = scratch
        if command == "python3.11 -m venv .venv":  # in a copy without the test run's own .venv
            cwd = tmp_path / "fresh"
            scratch_copy(cwd, with_venv=False)
        if command.startswith(SERVERS):
            serve(concrete, cwd, env, port)
        else:
            run(command, concrete, cwd)
        ran.append(command)
    assert (scratch / "site" / "index.html").exists() and list((scratch / "reports").glob("*.md"))
    assert (tmp_path / "fresh" / ".venv" / "bin" / "python").exists()
    assert len(ran) == len(commands)


def test_every_skip_has_a_reason_and_names_a_documented_command():
    shown = documented_commands(readme=True)
    assert set(NOT_RUN) <= set(shown), sorted(set(NOT_RUN) - set(shown))
    assert all(reason.strip() for reason in NOT_RUN.values())


SLOW_SERVER = """
import http.server, sys, time
print("importing and compiling", flush=True)
time.sleep(float(sys.argv[2]))
http.server.test(HandlerClass=http.server.SimpleHTTPRequestHandler, port=int(sys.argv[1]), bind="127.0.0.1")
"""


def test_serve_waits_for_a_server_as_long_as_it_runs(tmp_path, monkeypatch):
    """Issue 47: on a loaded host ``python -m marin.inference.serve`` had printed nothing after the fixed 120 s
    (still importing and compiling) and the test failed. Here the clock the wait could read runs 100 s per
    reading, so a server that answers after 3 s of real time has taken minutes to hours by it: any wall-clock
    bound on the wait would fire."""
    import tests.waiting

    readings = iter(range(0, 10**9, 100))
    fast_clock = types.SimpleNamespace(monotonic=lambda: float(next(readings)), time=lambda: float(next(readings)))
    fast_clock.sleep = time.sleep
    for module in (tests.waiting, sys.modules[__name__]):
        monkeypatch.setattr(module, "time", fast_clock)
    (tmp_path / "cwd").mkdir()
    (tmp_path / "slow_server.py").write_text(SLOW_SERVER)
    port = free_port()
    serve(f"{sys.executable} {tmp_path / 'slow_server.py'} {port} 3", tmp_path / "cwd", dict(os.environ), port)
    assert (tmp_path / f"serve-{port}.log").read_text().startswith("importing and compiling")


def test_serve_fails_at_once_with_the_output_of_a_server_that_exits(tmp_path):
    (tmp_path / "cwd").mkdir()
    started = time.monotonic()
    with pytest.raises(pytest.fail.Exception, match="No module named .no_such_module."):
        serve(f"{sys.executable} -c 'import no_such_module'", tmp_path / "cwd", dict(os.environ), free_port())
    assert time.monotonic() - started < 60
