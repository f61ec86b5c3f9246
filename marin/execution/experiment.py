"""Experiment records: ``<prefix>/experiments/<script>-<hash>.json``, one per distinct DAG of a script.

A record lets anyone go from outputs back to the code that made them (caller file, git commit, dirty
flag, remote) and lets a dry run explain *why* a step will rerun: it compares each step's version with
the same-named step in the script's most recent earlier record and names the changed fields.
"""

from __future__ import annotations

import getpass
import hashlib
import json
import os
import subprocess
import sys
import time
from typing import Any

from marin.execution.plan import Plan, PlannedStep
from marin.storage import glob as storage_glob
from marin.storage import join, read_text, write_atomic

RECORD_FORMAT_VERSION = 1


def caller_file() -> str | None:
    """The script being run (``__main__``), if any."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    return os.path.abspath(path) if path else None


def script_name(path: str | None) -> str:
    return os.path.splitext(os.path.basename(path))[0] if path else "interactive"


def _git(args: list[str], cwd: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_info(path: str | None) -> dict[str, Any]:
    """Commit, dirty flag, remote and the file's repo-relative path; Nones outside a git checkout."""
    cwd = os.path.dirname(path) if path else os.getcwd()
    root = _git(["rev-parse", "--show-toplevel"], cwd)
    if root is None:
        return {"git_commit": None, "git_dirty": None, "git_remote": None, "caller_file": path}
    status = _git(["status", "--porcelain", "--untracked-files=no"], root)
    return {
        "git_commit": _git(["rev-parse", "HEAD"], root),
        "git_dirty": bool(status),
        "git_remote": _git(["config", "--get", "remote.origin.url"], root),
        "caller_file": os.path.relpath(path, root) if path else None,
    }


def step_entry(p: PlannedStep) -> dict[str, Any]:
    return {
        "name": p.name,
        "identity": p.identity,
        "output_path": p.output_path,
        "fn": p.fn_name,
        "description": p.step.description,
        "version": p.version,
        "dependencies": [d.identity for d in p.deps],
        "nonblocking_dependencies": [d.identity for d in p.nonblocking_deps],
    }


def build_record(plan: Plan, path: str | None, description: str | None) -> dict[str, Any]:
    steps = [step_entry(p) for p in plan.steps]
    return {
        "format_version": RECORD_FORMAT_VERSION,
        "script": script_name(path),
        "description": description,
        "prefix": plan.prefix,
        "user": _user(),
        "created": time.time(),
        **git_info(path),
        "steps": steps,
    }


def record_url(plan: Plan, script: str) -> str:
    digest = hashlib.sha256(" ".join(sorted(p.identity for p in plan.steps)).encode()).hexdigest()[:8]
    return join(plan.prefix, "experiments", f"{script}-{digest}.json")


def write_record(url: str, record: dict[str, Any]) -> None:
    write_atomic(url, json.dumps(record, indent=2, sort_keys=True))


def previous_record(plan: Plan, script: str, exclude: str) -> dict[str, Any] | None:
    """The newest earlier record of this script under the prefix, other than ``exclude``."""
    pattern = join(plan.prefix, "experiments", f"{script}-*.json")
    best = None
    for url in storage_glob(pattern):
        if url == exclude:
            continue
        try:
            record = json.loads(read_text(url))
        except (OSError, ValueError):
            continue
        if record.get("script") != script:  # e.g. "train-big-*.json" also matches script "train"
            continue
        if best is None or record.get("created", 0) > best.get("created", 0):
            best = record
    return best


def changed_fields(old_version: dict[str, Any], new_version: dict[str, Any]) -> list[str]:
    """Human-readable differences between two versions of a step: ``field: old → new``."""
    changes = []
    for section in ("config", "inputs"):
        old, new = old_version.get(section, {}), new_version.get(section, {})
        for key in sorted(set(old) | set(new)):
            if key not in old:
                changes.append(f"{key}: (absent) → {_short(new[key])}")
            elif key not in new:
                changes.append(f"{key}: {_short(old[key])} → (absent)")
            elif old[key] != new[key]:
                label = f"{key} (input)" if section == "inputs" else key
                changes.append(f"{label}: {_short(old[key])} → {_short(new[key])}")
    return changes


def _short(value: Any, limit: int = 80) -> str:
    text = json.dumps(value, sort_keys=True) if not isinstance(value, str) else value
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return os.environ.get("USER", "unknown")
