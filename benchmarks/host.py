"""What a benchmark's numbers depend on: the host's CPU model (two kinds of host rank libraries differently),
and the code measured (``export_revision``: the lab's package as of an older commit, for before/after)."""

import platform
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


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
