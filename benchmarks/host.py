"""What a benchmark's numbers depend on: the host's CPU model (two kinds of host rank libraries differently)."""

import platform
from pathlib import Path


def cpu_model() -> str:
    """``lscpu``'s model name, from /proc/cpuinfo (``platform.processor()`` elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"
