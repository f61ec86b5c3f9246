"""The session's processes share compiled bytecode outside the source tree (``tests/conftest.py``): a Ray worker
or subprocess that imports the lab reads the bytecode an earlier one wrote instead of compiling the sources
again, and no ``__pycache__`` appears in the repository."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import conftest

ROOT = Path(__file__).resolve().parents[1]


def test_a_subprocess_writes_the_labs_bytecode_under_the_sessions_prefix_not_into_the_tree():
    if not conftest.SHARED_BYTECODE:
        pytest.skip("the caller writes bytecode beside the sources (no PYTHONDONTWRITEBYTECODE): nothing to share")
    prefix = os.environ["PYTHONPYCACHEPREFIX"]
    assert "PYTHONDONTWRITEBYTECODE" not in os.environ
    subprocess.run([sys.executable, "-c", "import marin.storage.paths"], cwd=ROOT, check=True)
    source = ROOT / "marin" / "storage" / "paths.py"
    cached = Path(prefix + str(source.parent))  # the prefix mirrors the source's directory, no __pycache__ level
    assert any(p.name.startswith("paths.") and p.suffix == ".pyc" for p in cached.iterdir())
    assert not (source.parent / "__pycache__").exists()
