"""The launch guide's job submission (docs/cluster.md), run verbatim against a local Ray head.

The two documented commands (the `export` that keeps .git in the upload, and `ray job submit` of
hello_world with MARIN_PREFIX) are read from docs/cluster.md and run by bash; only the dashboard address
and the bucket are replaced. The head is a Ray started by a child process with its dashboard and job
server (what `ray up` starts on a real head); it is shut down by terminating that `ray start --block`, so
nothing else's Ray on this machine is touched (never `ray stop`).
"""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
AGENT_READY = """
import sys, time, ray
from ray.dashboard.consts import DASHBOARD_AGENT_ADDR_NODE_ID_PREFIX
from ray.experimental import internal_kv
ray.init(address=sys.argv[1], log_to_driver=False)
# The job server hands a submission to the head node's dashboard agent, found under this key in the GCS.
key = DASHBOARD_AGENT_ADDR_NODE_ID_PREFIX + ray.get_runtime_context().get_node_id()
deadline = time.monotonic() + 120
while not internal_kv._internal_kv_get(key, namespace=b"dashboard"):
    if time.monotonic() > deadline:
        sys.exit("the dashboard agent did not register within 120 s")
    time.sleep(0.5)
"""
PORTS = (
    "port",
    "dashboard-port",
    "dashboard-agent-listen-port",
    "dashboard-agent-grpc-port",
    "runtime-env-agent-port",
    "metrics-export-port",
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def documented_submission() -> list[str]:
    """The export line and the hello_world `ray job submit` line of docs/cluster.md."""
    text = (ROOT / "docs" / "cluster.md").read_text()
    export = re.search(r"^export RAY_OVERRIDE_RUNTIME_ENV_DEFAULT_EXCLUDES=.*$", text, re.M).group(0)
    submit = re.search(r"^ray job submit .* -- python experiments/hello_world\.py$", text, re.M).group(0)
    return [export, submit]


def _start_head() -> tuple[subprocess.Popen, dict, dict, str, str | None]:
    """`ray start --head --block` on free ports, waited for until its dashboard agent registers: the head,
    its ports, the environment to reach it, its temp dir, and why it did not start (None once it has)."""
    ports = {name: _free_port() for name in PORTS}
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MARIN_PREFIX")}
    env.update(
        RAY_TMPDIR=(ray_tmp := tempfile.mkdtemp(prefix="mrayj", dir="/tmp")),
        RAY_AUTH_MODE="disabled",
        RAY_USAGE_STATS_ENABLED="0",
        PATH=f"{Path(sys.executable).parent}:{env.get('PATH', '')}",
    )
    args = [
        "ray",
        "start",
        "--head",
        "--block",
        "--num-cpus",
        "2",
        "--include-dashboard",
        "true",
        "--dashboard-host",
        "127.0.0.1",
        *(f"--{name}={port}" for name, port in ports.items()),
    ]
    head = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    ready = subprocess.run(
        [sys.executable, "-c", AGENT_READY, f"127.0.0.1:{ports['port']}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    failure = None
    if ready.returncode != 0:
        head.terminate()
        failure = f"{ready.stderr[-2000:]}\n{head.communicate(timeout=60)[0][-2000:]}"
    return head, ports, env, ray_tmp, failure


def _stop_head(head: subprocess.Popen, ray_tmp: str) -> None:
    if head.poll() is None:
        head.terminate()  # `ray start --block` stops the processes it started on SIGTERM
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            head.kill()
            head.wait()
    shutil.rmtree(ray_tmp, ignore_errors=True)


@pytest.fixture
def ray_head():
    """A local Ray head with its job server, on free ports: every port explicit, because the defaults are fixed
    numbers (the dashboard agent's 52365) that another Ray on this machine, such as the test session's, already
    holds; the agent then never starts and every submission fails with "No available agent". Ray gives its own
    raylet a fixed 30 s to register with the GCS, which a loaded 2-core host once exceeded in a full `make test`
    ("The current node timed out during startup"): such a head is started once more, on fresh ports."""
    for attempt in (1, 2):
        head, ports, env, ray_tmp, failure = _start_head()
        if failure is None:
            break
        _stop_head(head, ray_tmp)
        if attempt == 2 or "timed out during startup" not in failure:
            pytest.fail(f"local Ray head with job server did not start: {failure}")
    try:
        yield ports["dashboard-port"], env
    finally:
        _stop_head(head, ray_tmp)


@pytest.mark.slow
def test_documented_job_submission_runs_an_experiment_on_a_ray_cluster(ray_head, tmp_path):
    port, env = ray_head
    prefix = tmp_path / "lab"
    export, submit = documented_submission()
    submit = submit.replace("http://127.0.0.1:8265", f"http://127.0.0.1:{port}").replace(
        "gs://YOUR_BUCKET/lab", str(prefix)
    )
    out = subprocess.run(
        ["bash", "-c", f"{export}\n{submit}"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    assert re.search(r"Job 'raysubmit_\w+' succeeded", out.stdout + out.stderr), out.stdout[-3000:]

    [stats] = prefix.glob("hello/stats-*/stats.json")
    assert json.loads(stats.read_text())["count"] == 1000
    [record_path] = (prefix / "experiments").glob("hello_world-*.json")
    record = json.loads(record_path.read_text())
    # .git travelled with the working dir: the record names the file as in the repo, at a real commit
    assert record["caller_file"] == "experiments/hello_world.py", record["caller_file"]
    assert re.fullmatch(r"[0-9a-f]{40}", record["git_commit"] or "")
    subprocess.run(
        ["git", "cat-file", "-e", f"{record['git_commit']}:experiments/hello_world.py"], cwd=ROOT, check=True
    )

    from marin.report import Links, write_report

    files = write_report(
        str(ROOT / "experiments" / "hello_world.py"),
        str(prefix),
        str(tmp_path / "r.md"),
        Links(repo_url="https://github.com/example/lab"),
    )
    body = Path(files.markdown).read_text()
    assert f"https://github.com/example/lab/blob/{record['git_commit']}/experiments/hello_world.py" in body
    assert body.count("✅ SUCCESS") == 2
