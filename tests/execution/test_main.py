"""executor_main as users run it: experiment scripts in subprocesses, flags, prefixes, exit codes."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from marin.execution import ExecutorMainConfig
from marin.execution.main import _list_args
from marin.execution.ray_runner import extra_requirements
from marin.execution.status import StatusFileError, current_state

ROOT = Path(__file__).resolve().parents[2]
HELLO = ROOT / "experiments" / "hello_world.py"


def run_script(script, *args, cwd, env=None):
    environment = {k: v for k, v in os.environ.items() if k not in ("MARIN_PREFIX", "RAY_ADDRESS")}
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, str(script), *args], cwd=cwd, env=environment, capture_output=True, text=True
    )


def test_hello_world_default_prefix_run_rerun_and_dry_run(tmp_path):
    first = run_script(HELLO, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    store = tmp_path / "local_store"
    assert f"outputs are under {store}: ran 2" in first.stdout
    [stats_dir] = (store / "hello").glob("stats-*")
    stats = json.loads((stats_dir / "stats.json").read_text())
    assert stats["count"] == 1000 and abs(stats["mean"]) < 0.15 and 0.85 < stats["std"] < 1.15
    [record] = (store / "experiments").glob("hello_world-*.json")
    record = json.loads(record.read_text())
    assert record["caller_file"] == "experiments/hello_world.py" and len(record["steps"]) == 2
    assert record["description"].startswith("Executor 101")

    again = run_script(HELLO, cwd=tmp_path)
    assert again.returncode == 0 and "ran 0, reused 2 of 2" in again.stdout
    assert "starting a local Ray" not in again.stderr  # nothing to do: Ray never starts
    # ... and a no-op rerun never imports Ray or JAX at all (the bulk of a cold start's time)
    probe = (
        "import runpy, sys\nsys.argv = [sys.argv[1]]\ntry:\n    runpy.run_path(sys.argv[0], run_name='__main__')\n"
        "except SystemExit as e:\n    assert not e.code, e.code\n"
        "print('IMPORTED', sorted(m for m in ('jax', 'ray', 'torch') if m in sys.modules))"
    )
    noop = subprocess.run(
        [sys.executable, "-c", probe, str(HELLO)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k not in ("MARIN_PREFIX", "RAY_ADDRESS")},
    )
    assert noop.returncode == 0 and "IMPORTED []" in noop.stdout, noop.stdout + noop.stderr

    dry = run_script(HELLO, "--dry_run", "true", cwd=tmp_path)
    assert dry.returncode == 0
    assert dry.stdout.count("skip") == 2 and "identity: n=1000, seed=0" in dry.stdout


def test_marin_prefix_env_and_flag(tmp_path):
    dry = run_script(HELLO, "--dry_run", "true", cwd=tmp_path, env={"MARIN_PREFIX": str(tmp_path / "env")})
    assert f"dry run under {tmp_path / 'env'}:" in dry.stdout
    dry = run_script(
        HELLO,
        "--dry_run",
        "true",
        "--prefix",
        "memory://lab",
        cwd=tmp_path,
        env={"MARIN_PREFIX": str(tmp_path / "env")},
    )
    assert "dry run under memory://lab:" in dry.stdout and "memory://lab/hello/numbers-" in dry.stdout
    assert not (tmp_path / "env").exists() and not (tmp_path / "local_store").exists()


def test_url_without_installed_backend_is_one_clear_line(tmp_path):
    from marin.storage import MissingBackend, filesystem

    try:
        import gcsfs  # noqa: F401
    except ImportError:
        with pytest.raises(MissingBackend, match=r"gs://b/x: no filesystem for gs:// \(install the 'gcs' extra"):
            filesystem("gs://b/x")
    with pytest.raises(MissingBackend, match=r"nope://x: no filesystem for nope://"):
        filesystem("nope://x")


def test_failed_run_exits_nonzero_listing_failures(tmp_path):
    script = tmp_path / "broken.py"
    script.write_text(
        "import dataclasses\n"
        "from marin.execution import ExecutorStep, executor_main, this_output_path\n"
        "@dataclasses.dataclass(frozen=True)\n"
        "class C:\n    output_path: str\n"
        "def boom(c):\n    raise ValueError('bad input in ' + c.output_path)\n"
        "executor_main(steps=[ExecutorStep(name='x/boom', fn=boom, config=C(this_output_path()))])\n"
    )
    result = run_script(script, "--prefix", str(tmp_path / "s"), cwd=tmp_path)
    assert result.returncode == 1
    assert "x/boom-" in result.stderr and "ValueError: bad input in" in result.stderr
    rerun = run_script(script, "--prefix", str(tmp_path / "s"), cwd=tmp_path)
    assert rerun.returncode == 1 and "--force_run_failed true" in rerun.stderr


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--run_only", "a", "b.*"], ["a", "b.*"]),
        (["--run_only", "tok/.*", "--dry_run", "true"], ["tok/.*"]),
        (["--run_only=it's"], ["it's"]),
        (["--run_only", "[x, y]"], ["x", "y"]),
    ],
)
def test_run_only_accepts_several_regexes(argv, expected):
    import draccus

    assert draccus.parse(ExecutorMainConfig, args=_list_args(argv)).run_only == expected


def test_corrupt_status_file_is_a_clear_error(tmp_path):
    (tmp_path / ".executor_status").write_text('{"state": "RUNNING", "time": 1}\n{"state": "SUCC')
    with pytest.raises(StatusFileError, match=r"\.executor_status, line 2: not a status event"):
        current_state(str(tmp_path))


def test_pip_extras_resolve_to_requirements_from_package_metadata():
    reqs = extra_requirements(("dev",))
    assert any(r.startswith("pytest") for r in reqs) and not any("jax" in r for r in reqs)
    with pytest.raises(ValueError, match="not extras of 'marin'"):
        extra_requirements(("nonexistent",))
