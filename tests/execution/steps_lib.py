"""Step functions for executor tests. Each call leaves a trace in a calls directory so tests can count
how many times a step's function really ran (across processes and Ray workers)."""

import dataclasses
import json
import os
import time

from marin.storage import join, read_text, write_atomic


@dataclasses.dataclass(frozen=True)
class TraceConfig:
    calls_dir: str
    label: str
    output_path: str
    inputs: tuple = ()
    payload: object = None
    sleep_s: float = 0.0
    fail: bool = False


def trace_step(config: TraceConfig) -> None:
    """Record the call, optionally sleep or fail, then write ``result.json`` holding the inputs' results."""
    os.makedirs(config.calls_dir, exist_ok=True)
    with open(os.path.join(config.calls_dir, f"{config.label.replace('/', '_')}.calls"), "a") as f:
        f.write(f"{os.getpid()} {time.time()}\n")
    time.sleep(config.sleep_s)
    if config.fail:
        raise RuntimeError(f"step {config.label} was told to fail")
    upstream = []
    for path in config.inputs:
        upstream.append(json.loads(read_text(path)))  # any backend: the inputs may be gs:// or s3:// URLs
    write_atomic(join(config.output_path, "result.json"), json.dumps({"label": config.label, "upstream": upstream}))


def call_counts(calls_dir: str) -> dict[str, int]:
    out = {}
    if os.path.isdir(calls_dir):
        for name in os.listdir(calls_dir):
            with open(os.path.join(calls_dir, name)) as f:
                out[name[: -len(".calls")]] = sum(1 for _ in f)
    return out


@dataclasses.dataclass(frozen=True)
class ProbeConfig:
    output_path: str
    distribution: str


def probe_environment(config: ProbeConfig) -> None:
    """Write which interpreter ran the step and the installed version of a distribution."""
    import importlib.metadata
    import sys

    doc = {"python": sys.executable, "version": importlib.metadata.version(config.distribution)}
    write_atomic(join(config.output_path, "probe.json"), json.dumps(doc))


@dataclasses.dataclass(frozen=True)
class HostConfig:
    output_path: str
    fail_process: int | None = None


def host_step(config: HostConfig) -> None:
    """One host of a multi-host step: join the jax.distributed job the runner described, all-gather every
    process's index through a real collective, and write what this host saw to ``host-<index>.json``."""
    from marin import multihost
    from marin.trainer import distributed

    coordinates = multihost.coordinates()
    if coordinates is not None and coordinates[2] == config.fail_process:
        raise RuntimeError(f"process {coordinates[2]} was told to fail")
    distributed.initialize()
    import jax
    import numpy as np
    from jax.experimental import multihost_utils

    gathered = multihost_utils.process_allgather(np.int32(jax.process_index() + 1))
    doc = {
        "process_index": jax.process_index(),
        "process_count": jax.process_count(),
        "pid": os.getpid(),
        "coordinates": list(coordinates or ()),
        "gathered": np.asarray(gathered).tolist(),
        "env": {n: os.environ[n] for n in ("MARIN_TEST_ENV", "GLIBC_TUNABLES") if n in os.environ},
    }
    write_atomic(join(config.output_path, f"host-{jax.process_index()}.json"), json.dumps(doc))


@dataclasses.dataclass(frozen=True)
class EnvConfig:
    output_path: str
    names: tuple[str, ...] = ()


def env_step(config: EnvConfig) -> None:
    """Write the named environment variables as this step's process sees them (``env.json``)."""
    write_atomic(join(config.output_path, "env.json"), json.dumps({n: os.environ.get(n) for n in config.names}))
