"""Optional test dependencies: a skip on a developer's machine, an error under ``make test``.

``make test`` (hence CI) sets ``MARIN_REQUIRE_ALL=1`` and installs every dependency itself (the dev and
export-test extras, Debian chromium): there a missing one must fail the run, naming it, instead of
turning its tests into silent skips. ``MARIN_REQUIRE_OBJECT_STORES=1`` does the same for the gs:// and
s3:// servers alone (tests/object_store_servers.py).

    torch = require_module("torch", "CPU torch (the export-test extra)")
    pytestmark = require_path("/usr/bin/chromium", "Debian chromium (make chromium)")
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest


class MissingTestDependency(RuntimeError):
    """A dependency the test run was told to require (MARIN_REQUIRE_ALL=1) is not installed."""


def require_all() -> bool:
    return os.environ.get("MARIN_REQUIRE_ALL") == "1"


def require_object_stores() -> bool:
    return require_all() or os.environ.get("MARIN_REQUIRE_OBJECT_STORES") == "1"


def missing(what: str, detail: str) -> None:
    """Skip, or under MARIN_REQUIRE_ALL=1 fail, because ``what`` is unavailable."""
    message = f"needs {what}: {detail}"
    if require_all():
        raise MissingTestDependency(f"{message} (MARIN_REQUIRE_ALL=1: install it, e.g. `make test` does)")
    pytest.skip(message, allow_module_level=True)


def require_module(name: str, what: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as e:
        missing(what, f"cannot import {name} ({e})")
        raise  # unreachable: missing() raised


def require_path(path: str, what: str) -> str:
    if not os.path.exists(path):
        missing(what, f"{path} does not exist")
    return path
