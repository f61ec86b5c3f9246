"""Which test and which thread, when a test run dies of a signal.

CI keeps the head and the tail of a run's output. A crash's faulthandler dump lists every thread, the
loopback servers' idle handler threads first, so the crashing thread's stack fell in the cut: stop 59's
CI run died of a segmentation fault during ``tests/report`` and the lines kept did not say where. With
``MARIN_CRASH_LOG`` set (``make test`` sets it), ``tests/conftest.py`` sends the dump to that file and
writes each test's id beside it as the test starts; ``python -m tests.crash_log FILE``, which ``make test``
runs when pytest fails, prints the test and the crashing thread's stack, a few lines at the very end.
"""

from __future__ import annotations

import faulthandler
import glob
import os
import sys
import threading

FRAMES = 20
"""Frames of the crashing thread printed, innermost first, leaving out pytest's and pluggy's own."""
RUNNER_PARTS = ("/_pytest/", "/pluggy/")
_open: list = []  # the dump file stays open (faulthandler writes to its descriptor) for the whole run
_path: list[str] = []  # the dump's path, once enabled
_notes: list[str] = []  # lines about the process's state, written beside each test's id


def running_path(path: str) -> str:
    return path + ".running"


def enable(path: str) -> None:
    """Dumps on a fatal signal go to ``path`` (emptied now), every thread's stack included."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    dump = open(path, "w")  # noqa: SIM115 - closed by the process's exit, after any dump
    _open.append(dump)
    _path.append(path)
    faulthandler.enable(file=dump, all_threads=True)
    started("(collection)")


def note(line: str) -> None:
    """A line about the process's state (its memory mappings, from tests/conftest.py) that the running file
    carries from the next test on, replacing the previous note; printed in the summary under the test's id."""
    _notes[:] = [line]


def started(nodeid: str) -> None:
    """Records the test now starting and the names of the Python threads alive (faulthandler's dump gives only
    their ids); a no-op unless ``enable`` ran in this process."""
    if _path:
        # again at every test: a library that calls faulthandler.enable() (Ray's worker setup does, when it finds
        # it off) would send the dump to the test's captured stderr, which dies with the process
        faulthandler.enable(file=_open[0], all_threads=True)
        names = "".join(f"0x{t.ident:016x} {t.name}\n" for t in threading.enumerate() if t.ident is not None)
        with open(running_path(_path[0]), "w") as f:
            f.write(nodeid + "\n" + "".join(line + "\n" for line in _notes) + names)


def summary(dump: str, running: str | None) -> list[str]:
    """The fatal error's line, the test that was running, the crashing thread's name and stack, and how many
    other threads the dump lists; nothing when the dump is empty (pytest failed without a crash)."""
    lines = dump.splitlines()
    if not any(line.startswith("Fatal Python error") for line in lines):
        return []
    nodeid, *rest = (running or "(unknown)").strip().splitlines()
    names = dict(line.split(" ", 1) for line in rest if line.startswith("0x") and " " in line)
    out = [line for line in lines if line.startswith("Fatal Python error")][:1]
    out.append(f"while running: {nodeid}")
    out += [line for line in rest if not line.startswith("0x")]
    threads = [i for i, line in enumerate(lines) if line.startswith(("Thread 0x", "Current thread 0x"))]
    current = [i for i in threads if lines[i].startswith("Current thread")]
    if current:
        start = current[0]
        end = next((i for i in threads if i > start), None)
        block = lines[start:end]
        block = [line for line in block if line.strip() and not line.startswith("Extension modules")]
        frames = [line for line in block[1:] if not any(part in line for part in RUNNER_PARTS)]
        ident = block[0].split()[2]
        out += [f"{block[0]} [{names.get(ident, 'a thread started after the test began')}]", *frames[:FRAMES]]
        if len(frames) > FRAMES:
            out.append(f"  ... {len(frames) - FRAMES} outer frames")
    else:  # faulthandler marks no thread current when the signal hit a thread Python never ran in
        out.append("(no Python thread was current: the signal hit a native thread, XLA's, Ray's or gRPC's)")
    out.append(f"{len(threads) - len(current)} other threads in the dump")
    return out


def main(argv: list[str]) -> int:
    """Print the crash report of ``path`` and of every xdist worker's ``path.<worker id>``."""
    [path] = argv
    for dump_path in [path, *sorted(glob.glob(glob.escape(path) + ".gw*[0-9]"))]:
        try:
            with open(dump_path) as f:
                dump = f.read()
        except FileNotFoundError:
            continue
        try:
            with open(running_path(dump_path)) as f:
                running = f.read()
        except FileNotFoundError:
            running = None
        report = summary(dump, running)
        if report:
            print("\n".join(["", f"== the run crashed ({dump_path}) =="] + report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
