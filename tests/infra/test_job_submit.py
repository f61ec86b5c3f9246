"""The launch guide's job submission (docs/cluster.md), run verbatim against a local Ray head.

The two documented commands (the `export` that keeps .git in the upload, and `ray job submit` of
hello_world with MARIN_PREFIX) are read from docs/cluster.md and run by bash; only the dashboard address
and the bucket are replaced. The head is a Ray started by a child process with its dashboard and job
server (what `ray up` starts on a real head); it is shut down by closing the child's stdin, so nothing
else's Ray on this machine is touched (never `ray stop`).
"""

import json
import os
import re
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAD = """
import sys, time, ray
from ray.dashboard.consts import DASHBOARD_AGENT_ADDR_NODE_ID_PREFIX
from ray.experimental import internal_kv
ray.init(include_dashboard=True, dashboard_host="127.0.0.1", dashboard_port=int(sys.argv[1]), num_cpus=2,
         log_to_driver=False)
# The job server hands submissions to the head node's dashboard agent and waits only 10 s for it to
# register (ray.dashboard.consts.WAIT_AVAILABLE_AGENT_TIMEOUT); on a loaded machine the agent can take
# longer to start, so wait for its address in the GCS (what the job server looks up) before "ready".
key = DASHBOARD_AGENT_ADDR_NODE_ID_PREFIX + ray.get_runtime_context().get_node_id()
deadline = time.monotonic() + 180
while not internal_kv._internal_kv_get(key, namespace=b"dashboard"):
    if time.monotonic() > deadline:
        sys.exit("the dashboard agent did not register within 180 s")
    time.sleep(0.5)
print("ready", flush=True)
sys.stdin.read()
ray.shutdown()
"""


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


@pytest.fixture
def ray_head(tmp_path):
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MARIN_PREFIX")}
    env.update(RAY_TMPDIR=tempfile.mkdtemp(prefix="mrayj", dir="/tmp"), RAY_AUTH_MODE="disabled",
               RAY_USAGE_STATS_ENABLED="0", PATH=f"{Path(sys.executable).parent}:{env.get('PATH', '')}")
    head = subprocess.Popen([sys.executable, "-c", HEAD, str(port)], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = head.stdout.readline()
        if line.strip() != "ready":
            head.kill()
            pytest.fail(f"local Ray head with job server did not start: {head.communicate()[1][-3000:]}")
        yield port, env
    finally:
        if head.poll() is None:
            head.stdin.close()
            try:
                head.wait(timeout=60)
            except subprocess.TimeoutExpired:
                head.kill()
                head.wait()


@pytest.mark.slow
def test_documented_job_submission_runs_an_experiment_on_a_ray_cluster(ray_head, tmp_path):
    port, env = ray_head
    prefix = tmp_path / "lab"
    export, submit = documented_submission()
    submit = submit.replace("http://127.0.0.1:8265", f"http://127.0.0.1:{port}").replace("gs://YOUR_BUCKET/lab", str(prefix))
    out = subprocess.run(["bash", "-c", f"{export}\n{submit}"], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    assert re.search(r"Job 'raysubmit_\w+' succeeded", out.stdout + out.stderr), out.stdout[-3000:]

    [stats] = prefix.glob("hello/stats-*/stats.json")
    assert json.loads(stats.read_text())["count"] == 1000
    [record_path] = (prefix / "experiments").glob("hello_world-*.json")
    record = json.loads(record_path.read_text())
    # .git travelled with the working dir: the record names the file as in the repo, at a real commit
    assert record["caller_file"] == "experiments/hello_world.py", record["caller_file"]
    assert re.fullmatch(r"[0-9a-f]{40}", record["git_commit"] or "")
    subprocess.run(["git", "cat-file", "-e", f"{record['git_commit']}:experiments/hello_world.py"], cwd=ROOT, check=True)

    from marin.report import Links, write_report

    files = write_report(str(ROOT / "experiments" / "hello_world.py"), str(prefix), str(tmp_path / "r.md"),
                         Links(repo_url="https://github.com/example/lab"))
    body = Path(files.markdown).read_text()
    assert f"https://github.com/example/lab/blob/{record['git_commit']}/experiments/hello_world.py" in body
    assert body.count("✅ SUCCESS") == 2
