"""``TrainerConfig.host_processes``: data parallelism over one machine's cores through shared memory."""

import dataclasses
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import jax
import numpy as np
import pytest

from marin.trainer import TrainerConfig, train
from marin.trainer.host_parallel import HostGroup, PeerLost, SharedMemorySum, cores_for
from marin.trainer.loop import Objective
from marin.trainer.mesh import MeshConfig
from tests.trainer.tiny_run import STEPS, tiny_config

ROOT = Path(__file__).resolve().parents[2]
PEER = """
import sys, json, numpy as np
from marin.trainer.host_parallel import SharedMemorySum
name, size, rank, world, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
summed = SharedMemorySum(name, None, rank, world, create=False, timeout=60)
out = [summed(np.arange(size, dtype=np.float32) * (rank + 1) + step / 3).tobytes().hex() for step in range(steps)]
print(json.dumps(out))
"""


def _contribution(rank: int, step: int, size: int) -> np.ndarray:
    return np.arange(size, dtype=np.float32) * (rank + 1) + np.float32(step / 3)


def test_shared_memory_sum_gives_every_rank_the_same_bits_in_rank_order():
    """Three processes, five steps (both buffers used twice): each rank gets the slots summed in rank order,
    bit for bit, so replicas that start equal stay equal."""
    name, size, world, steps = f"marin_test_{uuid.uuid4().hex[:8]}", 1000, 3, 5
    peers = [  # started first, as train() starts its helpers: they wait for rank 0's segment and read its size
        subprocess.Popen(
            [sys.executable, "-c", PEER, name, str(size), str(rank), str(world), str(steps)],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},  # the session's bytecode prefix too
        )
        for rank in (1, 2)
    ]
    time.sleep(0.5)
    summed = SharedMemorySum(name, size, 0, world, create=True, timeout=60)
    try:
        mine = [summed(_contribution(0, step, size)) for step in range(steps)]
        theirs = [json.loads(p.communicate(timeout=120)[0]) for p in peers]
        assert all(p.returncode == 0 for p in peers)
    finally:
        summed.close(unlink=True)
    for step in range(steps):
        expected = _contribution(0, step, size) + _contribution(1, step, size) + _contribution(2, step, size)
        assert mine[step].tobytes() == expected.tobytes()
        assert all(bytes.fromhex(t[step]) == expected.tobytes() for t in theirs)


def test_contributions_are_an_aligned_block_that_xla_reads_in_place():
    """The step's input is the segment itself: each step's block of rows starts 64-byte aligned (both parities,
    any vector length), so ``jax.device_put(..., may_alias=True)`` hands XLA:CPU the shared memory without a
    copy; the rows are the ranks' vectors, and a block stays intact until the rank's call after next."""
    name = f"marin_test_{uuid.uuid4().hex[:8]}"
    summed = SharedMemorySum(name, 1001, 0, 1, create=True, timeout=1)
    try:
        blocks = []
        for step, n in enumerate((1001, 999, 1001)):
            block = summed.contributions(np.full(n, step, np.float32))
            assert block.shape == (1, n) and block.flags.c_contiguous and block.ctypes.data % 64 == 0
            on_device = jax.device_put(block, may_alias=True)
            assert on_device.unsafe_buffer_pointer() == block.ctypes.data
            blocks.append((block, on_device))
            del on_device
        assert blocks[0][0].ctypes.data == blocks[2][0].ctypes.data != blocks[1][0].ctypes.data  # two buffers
        assert float(blocks[1][1][0, 0]) == 1.0 and float(blocks[2][1][0, 0]) == 2.0
    finally:
        blocks = None
        summed.close(unlink=True)


def test_a_missing_or_dead_peer_is_an_error_naming_it_not_a_hang():
    name = f"marin_test_{uuid.uuid4().hex[:8]}"
    summed = SharedMemorySum(name, 8, 0, 2, create=True, timeout=0.3)
    try:
        with pytest.raises(PeerLost, match="host process 1 did not reach step 1 within"):
            summed(np.zeros(8, np.float32))
        with pytest.raises(PeerLost, match="no host process announced the update program within"):
            summed.await_announcement(1, "the update program")
        summed.announce(1)
        summed.await_announcement(1, "the update program")  # announced: returns at once
        summed.timeout, summed.alive = 60, lambda: False
        with pytest.raises(PeerLost, match="host process 1 exited during step 2"):
            summed(np.zeros(8, np.float32))
        with pytest.raises(PeerLost, match="a host process exited before announcing the gradient program"):
            summed.await_announcement(0, "the gradient program")
        with pytest.raises(ValueError, match="at most 8 values"):
            summed(np.zeros(9, np.float32))
    finally:
        summed.close(unlink=True)


def test_cores_are_split_into_contiguous_shares():
    assert [cores_for(r, 2, [0, 1, 2]) for r in range(2)] == [[0, 1], [2]]
    assert [cores_for(r, 2, [4, 5]) for r in range(2)] == [[4], [5]]
    with pytest.raises(ValueError, match="host_processes=3 needs a core per process"):
        cores_for(0, 3, [0, 1])


def test_config_validation_names_the_field():
    with pytest.raises(ValueError, match="host_processes must be an int in 1..8"):
        TrainerConfig(num_train_steps=1, batch_size=8, host_processes=0)
    with pytest.raises(ValueError, match=r"batch_size \(12\) must split into host_processes \(2\) x num_micro"):
        TrainerConfig(num_train_steps=1, batch_size=12, host_processes=2, num_microbatches=4)
    assert TrainerConfig(num_train_steps=1, batch_size=12, host_processes=2, num_microbatches=3).host_processes == 2


def _tiny(out: Path, hosts: int):
    cfg = tiny_config(out, MeshConfig(data=1, fsdp=1, tensor=1), "dp", evaluate=True)
    return dataclasses.replace(cfg, trainer=dataclasses.replace(cfg.trainer, host_processes=hosts))


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
@pytest.mark.timeout(600)
def test_two_processes_train_as_one_and_only_rank_0_writes(tmp_path, caplog):
    """The tiny model's 5 steps as two processes (each on 8 of the batch's 16 rows, 2 microbatches each) equal
    the one-process run within float rounding; rank 0 alone logs, evaluates and checkpoints. This process
    started JAX's runtime long before: a warning says so. Rank 0 gets its cores and its compilation-cache
    settings back (the group shares one cache while it trains)."""
    one = train(_tiny(tmp_path / "one", 1))
    cores, cache = os.sched_getaffinity(0), jax.config.jax_compilation_cache_dir
    two = train(_tiny(tmp_path / "two", 2))
    assert os.sched_getaffinity(0) == cores  # rank 0 (this process) got its cores back
    assert jax.config.jax_compilation_cache_dir == cache
    assert "JAX's runtime started before train()" in caplog.text
    assert two.step == one.step == STEPS
    assert two.train_loss == pytest.approx(one.train_loss, abs=1e-5)
    assert two.eval_metrics == pytest.approx(one.eval_metrics, rel=1e-5)
    for a, b in zip(jax.tree.leaves(one.state.params), jax.tree.leaves(two.state.params)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)
    lines = [json.loads(line) for line in (tmp_path / "two" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines if "train/loss" in m] == list(range(1, STEPS + 1))  # one writer, no duplicates
    written = sorted(p.name for p in (tmp_path / "two" / "checkpoints").iterdir())
    assert written == sorted(p.name for p in (tmp_path / "one" / "checkpoints").iterdir())


PINS_FIRST = """
import dataclasses, json, sys
from jax._src.xla_bridge import backends_are_initialized
from marin.trainer import host_parallel
from marin.trainer.mesh import MeshConfig
from marin.trainer.train_lm import train_lm
from tests.trainer.tiny_run import tiny_config

pin, seen = host_parallel.pin_to_cores, []
def first_pin_then_stop(cores):
    seen.append(backends_are_initialized())
    pin(cores)
    if len(seen) == 1:
        raise KeyboardInterrupt  # rank 0 pinned, before its helpers start: enough
host_parallel.pin_to_cores = first_pin_then_stop
cfg = tiny_config(sys.argv[1], MeshConfig(data=1, fsdp=1, tensor=1), "dp")
try:
    train_lm(dataclasses.replace(cfg, trainer=dataclasses.replace(cfg.trainer, host_processes=2)))
except KeyboardInterrupt:
    pass
print(json.dumps(seen))
"""


def test_the_executors_entry_point_pins_rank_0_before_jaxs_runtime_starts(tmp_path):
    """XLA sizes its CPU thread pool from the cores a process may use when the runtime starts. Through
    ``train_lm`` (what an experiment's step runs) rank 0 must pin itself first: a runtime started before the
    pinning ran a two-thread pool on one core (22.0 instead of 20.6 ms a step on the Shakespeare benchmark)."""
    done = subprocess.run(
        [sys.executable, "-c", PINS_FIRST, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1]) == [False]


def test_what_host_processes_cannot_do_is_refused_before_training(tmp_path):
    config = _tiny(tmp_path, 2)
    objective = Objective(loss_fn=None, make_batch=lambda step: {}, tokens_per_step=1)
    with pytest.raises(ValueError, match="only pretraining's next-token objective splits over processes"):
        train(config, objective)


def test_rank_0_stops_with_an_error_when_a_helper_dies(tmp_path):
    """A helper that fails (here: it is handed something that is not a config) exits; rank 0, waiting for its
    first gradient exchange, raises instead of spinning."""
    with pytest.raises(PeerLost, match="host process 1 exited"):
        with HostGroup("not a config", 2, [[0], [0]]) as group:
            group.open(16)(np.zeros(16, np.float32))
