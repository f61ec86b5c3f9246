"""What a benchmark's numbers depend on: the host's CPU model (two kinds of host rank libraries differently),
and the code measured (``export_revision``: the lab's package as of an older commit, for before/after); and
the fresh-process runs and the report a side-by-side benchmark shares (``run_worker``, ``write_report``)."""

import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HERE = ROOT / "benchmarks"


def cpu_model() -> str:
    """``lscpu``'s model name, from /proc/cpuinfo (``platform.processor()`` elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def export_revision(rev: str) -> Path:
    """The ``marin`` package as of git revision ``rev``, exported to a temporary directory (for a
    before/after peer: the same worker code runs against the older package, first on its path)."""
    out = Path(tempfile.mkdtemp(prefix="bench-baseline-"))
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "marin"], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive.stdout, check=True)
    return out


def trainer_env(huge_pages: bool = True) -> dict[str, str]:
    """The environment the executor starts a CPU training step's worker with (``experiments.defaults.
    trainer_resources``): the trainer's malloc policy as glibc tunables, huge pages included, which a process
    cannot give itself once started (``marin.allocator``). The lab's training workers run with it; peers keep
    their own defaults. ``huge_pages=False``: the same less ``glibc.malloc.hugetlb`` (what huge pages give)."""
    from marin.allocator import large_buffers_env

    tunables = large_buffers_env()["GLIBC_TUNABLES"].split(":")
    if not huge_pages:
        tunables = [t for t in tunables if t.split("=", 1)[0] != "glibc.malloc.hugetlb"]
    return {"GLIBC_TUNABLES": ":".join(tunables)}


def run_worker(cmd: list[str], label: str, timeout: float, env: dict[str, str] | None = None) -> dict | None:
    """Run a benchmark's worker (``cmd``) in a fresh process on the CPU, the repository and ``benchmarks/`` on its
    path, ``env`` added to this process's environment; its result is the JSON of its last stdout line. A worker
    that fails prints the tail of its stderr and gives None, so the other peers still run."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(HERE)]), "JAX_PLATFORMS": "cpu", **(env or {})}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if proc.returncode != 0:
        print(f"[bench] {label} failed:\n{proc.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def write_report(report: dict, path: Path) -> None:
    """The report as JSON at ``path``, with the load average after the runs (beside the one before)."""
    report["load_avg_after"] = os.getloadavg()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2))
    print(f"\nwrote {path}")
