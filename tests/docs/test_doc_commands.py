"""Specific checks of some documented commands (test_run_doc_commands.py runs every one as written)."""

import json
import os
import re
import socket
import subprocess
import sys
import tomllib
import urllib.request
from pathlib import Path

from marin.storage import exists, glob, read_text
from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve_and_get(args: list[str], port: int, log: Path) -> str:
    """Start ``python -m data_browser <args>``, return the body of ``/`` once it answers (waited for as long as
    it runs: issue 47), stop it."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "data_browser", *args], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    page = []

    def answered() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as r:
                page.append(r.read().decode())
                return True
        except OSError:
            return False

    try:
        wait_for(answered, "the data browser to serve", proc=proc, log=log, poll_s=0.3)
        return page[0]
    finally:
        proc.terminate()
        proc.wait(timeout=30)  # a shutdown, not work


def test_data_browser_command_lines_serve(tmp_path, gcs_prefix):
    makefile = (ROOT / "Makefile").read_text()
    assert "-m data_browser --root ./local_store" in makefile  # what `make browse` runs
    local = tmp_path / "local_store"
    (local / "experiments").mkdir(parents=True)
    (local / "experiments" / "hello_world-0000.json").write_text(json.dumps({"steps": []}))

    port = _free_port()  # docs: --root ./local_store --root gs://bucket/prefix --port 5000
    page = _serve_and_get(["--root", str(local), "--root", gcs_prefix, "--port", str(port)], port, tmp_path / "a.log")
    assert str(local) in page and gcs_prefix in page and "hello_world-0000.json" in page

    port = _free_port()
    config = tmp_path / "browser.yaml"
    config.write_text(f"roots: ['{local}']\nport: {port}\n")
    page = _serve_and_get(["--config_path", str(config)], port, tmp_path / "b.log")
    assert str(local) in page and gcs_prefix not in page


def test_hello_world_on_a_gs_prefix(gcs_prefix, ray_address):
    env = {**os.environ, "RAY_ADDRESS": ray_address}  # join the session's Ray: its workers reach the emulator
    env.pop("MARIN_PREFIX", None)
    out = subprocess.run(
        [sys.executable, "experiments/hello_world.py", "--prefix", f"{gcs_prefix}/lab"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"outputs are under {gcs_prefix}/lab: ran 2" in out.stdout
    [stats] = glob(f"{gcs_prefix}/lab/hello/stats-*/stats.json")
    assert json.loads(read_text(stats))["count"] == 1000
    assert exists(next(iter(glob(f"{gcs_prefix}/lab/experiments/hello_world-*.json"))))


def test_exp11_dry_run_reuses_the_quickstart(tmp_path):
    """The example experiment of the exp<ISSUE>_<what>.py convention: its steps are the quickstart's own,
    plus a control run that differs only in the mixture, and its dry run works on a laptop."""
    from experiments import exp11_mixture_shift as exp11
    from experiments import quickstart
    from marin.execution import Executor
    from marin.report.render import issue_number

    assert issue_number("experiments/exp11_mixture_shift.py", None) == 11
    plan = Executor(prefix="gs://x").plan([exp11.shifted_eval, exp11.constant_eval])
    quick = {p.identity for p in Executor(prefix="gs://x").plan([quickstart.STEPS["evaluation"]]).steps}
    new = [p for p in plan.steps if p.identity not in quick]
    assert sorted(p.name for p in new) == ["checkpoints/exp11-constant-mixture", "evaluation/exp11-constant-mixture"]
    by_name = {p.name: p for p in plan.steps}
    control, shifted = by_name["checkpoints/exp11-constant-mixture"], by_name["checkpoints/quickstart-nano"]
    differing = {k for k in control.version["config"] if control.version["config"][k] != shifted.version["config"][k]}
    assert differing == {"data.stages"} and control.version["inputs"] == shifted.version["inputs"]
    assert len(control.version["config"]["data.stages"]) == 1 and len(shifted.version["config"]["data.stages"]) == 2

    env = {k: v for k, v in os.environ.items() if k not in ("MARIN_PREFIX", "RAY_ADDRESS")}
    out = subprocess.run(
        [sys.executable, "experiments/exp11_mixture_shift.py", "--dry_run", "true", "--prefix", str(tmp_path / "lab")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert len(re.findall(r"^run ", out.stdout, re.M)) == 17 and not (tmp_path / "lab").exists()  # 15 + 2 new


def test_documented_extras_exist_and_dev_installs_them():
    """`pip install -e ".[X]"` in the docs names a real extra, and `make test` (dev) installs what it holds."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    extras = pyproject["project"]["optional-dependencies"]
    documented = set()
    for page in (ROOT / "docs").glob("*.md"):
        documented |= {
            e
            for group in re.findall(r"install -e ['\"]\.\[([\w,-]+)\]['\"]", page.read_text())
            for e in group.split(",")
        }
    assert {"gcs", "s3", "cluster", "dev"} <= documented

    def requirements(extra: str) -> set[str]:
        out = set()
        for req in extras[extra]:
            nested = re.fullmatch(r"marin\[([\w,-]+)\]", req)
            out |= set().union(*(requirements(e) for e in nested.group(1).split(","))) if nested else {req}
        return out

    dev = requirements("dev")
    for extra in documented:
        assert extra in extras, extra
        names = {re.split(r"[<>=\[;]", r)[0] for r in requirements(extra)}
        assert names <= {re.split(r"[<>=\[;]", r)[0] for r in dev}, (extra, names)
