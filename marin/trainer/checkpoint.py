"""Checkpoints: the whole train state, written in the background, restored bit for bit.

Layout under ``<run>/checkpoints`` (any URL: local, gs://, s3:// via tensorstore; others via fsspec)::

    step-00000120/
        params/embed/ ...            one zarr3 array per leaf of the TrainState pytree
        opt_state/1/mu/layers/wq/ ...
        step/  rng/
        manifest.json                written LAST: step, kind, shape/dtype/crc32 of every leaf, and the
                                     run's metadata (the model config: a checkpoint describes itself)

A directory without ``manifest.json`` is an unfinished write (the process died mid-save, or the manifest
was lost) and is skipped with a warning naming it. ``restore_latest`` tries complete checkpoints newest
first; one whose manifest or arrays are missing, unreadable or fail their checksum is damaged and skipped
with a warning naming what and why (falling back to the one before). When complete checkpoints exist
but none can be read, that is ``NoUsableCheckpoint``, an error listing each and why: a run never starts
over from step 0 in silence and ends "successfully" (``CheckpointConfig.restart_if_unusable`` allows it,
loudly). A checkpoint of a *different* model (its manifest and its arrays agree with each other but not
with the model asked for) is ``IncompatibleCheckpoint``, an error, never a fallback; a manifest that
disagrees with its own arrays is damage, not a different model.

Two kinds, as in Levanter: *temporary* checkpoints every ``save_interval_minutes`` (each one deletes
the temporaries before it) bound the work lost to preemption; *permanent* ones every ``keep_every``
steps, and at the end of training, are kept.

Saving copies the state to host memory (the one blocking part: the step donates its buffers, so the
copy must be taken before the next step runs), then a background thread writes it; a new save first
waits for the previous one.

Files hold whole (unsharded) arrays, so a checkpoint is independent of the mesh that wrote it: a run
saved under FSDP on 8 devices restores under tensor parallelism, or on one device. ``restore`` reads each
array on the host and places it with the sharding the template asks for.

Multi-host (``distributed.py``): every process takes part in the host copy (arrays other processes hold
parts of are gathered, a collective), the time-based decision to save is process 0's, broadcast so all
processes save at the same step, and only process 0 writes files. The gather holds the whole state in
each host's memory once per save: fine to a few billion parameters on TPU/GPU hosts (hundreds of GB of
RAM); beyond that, per-process writes of each shard (zarr chunks aligned with the shards) are the next step.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import logging
import re
import time
import zlib
from typing import Any

import jax
import numpy as np
import tensorstore as ts

from marin.storage import delete, exists, is_local, join, list_dir, open_url, read_bytes, split_bucket, write_atomic
from marin.storage.paths import local_path
from marin.trainer import distributed

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1
_STEP_DIR = re.compile(r"step-(\d+)$")
_TENSORSTORE_SCHEMES = ("gs", "s3")


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckpointConfig:
    save_interval_minutes: float | None = 10.0
    """Write a temporary checkpoint when this much time has passed since the last save; None: never."""
    keep_every: int | None = None
    """Write a permanent checkpoint every this many steps; None: only the final one."""
    async_save: bool = True
    """Write in a background thread (the host copy of the state is still taken synchronously)."""
    restart_if_unusable: bool = False
    """When checkpoints exist but every one is damaged: False (the default) stops the run with
    ``NoUsableCheckpoint``; True starts over from step 0 with a warning naming what was skipped."""

    def __post_init__(self):
        if self.save_interval_minutes is not None and self.save_interval_minutes <= 0:
            raise ValueError(
                f"CheckpointConfig.save_interval_minutes must be > 0 or None, got {self.save_interval_minutes}"
            )
        if self.keep_every is not None and self.keep_every <= 0:
            raise ValueError(f"CheckpointConfig.keep_every must be > 0 or None, got {self.keep_every}")


class IncompatibleCheckpoint(ValueError):
    """The checkpoint holds a different model or optimizer than the one being restored into."""


class CorruptCheckpoint(RuntimeError):
    """A complete-looking checkpoint whose data cannot be read back intact."""


class NoUsableCheckpoint(CorruptCheckpoint):
    """Checkpoints exist, but every one is damaged: resuming would silently restart from step 0."""


def leaf_names(tree: Any) -> list[str]:
    """Path-like names of a pytree's leaves: ``params/layers/wq``, ``opt_state/1/mu/embed``, ..."""

    def name(path) -> str:
        parts = []
        for key in path:
            for attr in ("key", "name", "idx"):
                if hasattr(key, attr):
                    parts.append(str(getattr(key, attr)))
                    break
        return "/".join(parts)

    return [name(path) for path, _ in jax.tree_util.tree_flatten_with_path(tree)[0]]


def checkpoint_dir(base: str, step: int) -> str:
    return join(base, f"step-{step:08d}")


def list_checkpoints(base: str) -> list[tuple[int, str]]:
    """(step, url) of every checkpoint directory with a manifest, oldest first."""
    return scan_checkpoints(base)[0]


def scan_checkpoints(base: str) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """``(complete, unfinished)``: (step, url) of the checkpoint directories with a manifest and of those
    without one (an interrupted save, or a lost manifest), each oldest first."""
    complete, unfinished = [], []
    for url in list_dir(base):
        match = _STEP_DIR.search(url.rstrip("/"))
        if match:
            (complete if exists(join(url, "manifest.json")) else unfinished).append((int(match.group(1)), url))
    return sorted(complete), sorted(unfinished)


# ----------------------------------------------------------------------------------------------------------
# One array: tensorstore (zarr3) where it has a driver, otherwise .npy bytes through fsspec.


def _kvstore(url: str) -> dict | None:
    if is_local(url):
        return {"driver": "file", "path": local_path(url)}
    scheme, bucket, path = split_bucket(url)
    if scheme not in _TENSORSTORE_SCHEMES:
        return None
    return {"driver": "gcs" if scheme == "gs" else "s3", "bucket": bucket, "path": path.rstrip("/") + "/"}


def _write_array(url: str, array: np.ndarray) -> Any:
    """Start writing; returns something with ``.result()``."""
    kv = _kvstore(url)
    if kv is None:  # raw bytes; shape and dtype live in the manifest (np.save loses bfloat16)
        with open_url(join(url, "array.bin"), "wb") as f:
            f.write(np.ascontiguousarray(array).tobytes())
        return _Done()
    store = ts.open({"driver": "zarr3", "kvstore": kv}, create=True, dtype=array.dtype, shape=array.shape).result()
    return store.write(array)


def _read_array(url: str, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    kv = _kvstore(url)
    if kv is None:
        with open_url(join(url, "array.bin"), "rb") as f:
            return np.frombuffer(f.read(), dtype=dtype).reshape(shape)
    return np.asarray(ts.open({"driver": "zarr3", "kvstore": kv}, open=True).result().read().result())


class _Done:
    def result(self) -> None:
        return None


def _crc32(array: np.ndarray) -> int:
    return zlib.crc32(np.ascontiguousarray(array).view(np.uint8).reshape(-1))


# ----------------------------------------------------------------------------------------------------------


class Checkpointer:
    """Saves and restores ``TrainState``s under ``base`` (e.g. ``<output_path>/checkpoints``)."""

    def __init__(self, base: str, config: CheckpointConfig, metadata: dict | None = None):
        self.base, self.config = base, config
        self.metadata = metadata or {}
        """Stored in every manifest: the loop puts the model config here, so a checkpoint describes itself."""
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint")
        self._pending: concurrent.futures.Future | None = None
        self._last_save = time.monotonic()

    def due(self, step: int) -> str | None:
        """ "permanent", "temporary" or None for the state after ``step`` completed updates."""
        if self.config.keep_every and step % self.config.keep_every == 0:
            return "permanent"
        interval = self.config.save_interval_minutes
        if interval is None:
            return None
        # Clocks differ between hosts: process 0 decides for all (one tiny broadcast per step).
        if distributed.agree(int(time.monotonic() - self._last_save >= interval * 60)):
            return "temporary"
        return None

    def save(self, state: Any, step: int, kind: str) -> None:
        """Copy ``state`` to host now; write it (in the background if ``async_save``)."""
        self.wait()
        names = leaf_names(state)
        # A copy (np.array(copy=True) or a gather): the caller's next step donates these buffers.
        arrays = [distributed.to_host(leaf) for leaf in jax.tree.leaves(state)]
        self._last_save = time.monotonic()
        if not distributed.is_primary():
            return
        if self.config.async_save:
            self._pending = self._pool.submit(self._write, step, kind, names, arrays)
        else:
            self._write(step, kind, names, arrays)

    def wait(self) -> None:
        """Block until the background save (if any) finished; re-raise its error."""
        if self._pending is not None:
            pending, self._pending = self._pending, None
            pending.result()

    def close(self) -> None:
        self.wait()
        self._pool.shutdown()

    def _write(self, step: int, kind: str, names: list[str], arrays: list[np.ndarray]) -> None:
        start = time.monotonic()
        target = checkpoint_dir(self.base, step)
        delete(target, recursive=True)  # leftovers of an interrupted save of the same step
        writes = [_write_array(join(target, name), array) for name, array in zip(names, arrays)]
        for w in writes:
            w.result()
        leaves = {n: {"shape": list(a.shape), "dtype": str(a.dtype), "crc32": _crc32(a)} for n, a in zip(names, arrays)}
        manifest = {
            "format_version": FORMAT_VERSION,
            "step": step,
            "kind": kind,
            "time": time.time(),
            "leaves": leaves,
            "metadata": self.metadata,
        }
        write_atomic(join(target, "manifest.json"), json.dumps(manifest, indent=1))
        logger.info("saved %s checkpoint at step %d to %s in %.1fs", kind, step, target, time.monotonic() - start)
        self._delete_old_temporaries(step)

    def _delete_old_temporaries(self, newest: int) -> None:
        """Delete the temporaries older than ``newest``; a damaged one is left alone (it cannot say whether
        it is temporary) with a warning, and a failed delete is a warning too: a save never fails for this."""
        for step, url in list_checkpoints(self.base):
            if step >= newest:
                continue
            try:
                if read_manifest(url).get("kind") != "temporary":
                    continue
                logger.info("deleting superseded temporary checkpoint %s", url)
                delete(url, recursive=True)
            except (CorruptCheckpoint, OSError) as e:
                logger.warning("left checkpoint %s in place while deleting old temporaries: %s", url, e)

    def restore_latest(self, template: Any) -> tuple[Any, int] | None:
        """The newest intact checkpoint as a tree shaped like ``template``, with its step; None if none."""
        return restore_latest(self.base, template)


def read_manifest(url: str) -> dict:
    try:
        return json.loads(read_bytes(join(url, "manifest.json")))
    except (OSError, ValueError) as e:
        raise CorruptCheckpoint(f"{url}: unreadable manifest: {e}") from e


def restore(url: str, template: Any, *, root: str | None = None, on_host: bool = False) -> Any:
    """The checkpoint at ``url`` shaped like ``template``: the whole train state, or with ``root="params"``
    only the parameters (the EMA, if the run kept one: it is what was evaluated), without reading the
    optimizer state. Leaves come back as host arrays with ``on_host``; otherwise each is placed like its
    template leaf (a ``NamedSharding`` on it is honoured whatever mesh wrote the checkpoint, since the files
    hold whole arrays)."""
    manifest = read_manifest(url)
    names = leaf_names(template)
    if root is not None:
        root = "ema" if root == "params" and any(n.startswith("ema/") for n in manifest["leaves"]) else root
        names = [f"{root}/{name}" for name in names]
        missing = [n for n in names if n not in manifest["leaves"]]
        if missing:
            raise IncompatibleCheckpoint(f"{url}: no leaves {missing[:5]} (a different model?)")
    elif sorted(names) != sorted(manifest["leaves"]):
        missing, extra = set(names) - set(manifest["leaves"]), set(manifest["leaves"]) - set(names)
        raise IncompatibleCheckpoint(f"{url}: leaves differ; missing {sorted(missing)[:5]}, extra {sorted(extra)[:5]}")
    leaves = jax.tree.leaves(template)
    arrays = [_read_leaf(url, name, manifest["leaves"][name], leaf) for name, leaf in zip(names, leaves)]
    logger.info("restored checkpoint %s (step %d)", url, manifest["step"])
    if not on_host:
        arrays = [_place(a, leaf) for a, leaf in zip(arrays, leaves)]
    return jax.tree.unflatten(jax.tree.structure(template), arrays)


def restore_latest(
    base: str, template: Any, *, root: str | None = None, step: int | None = None, on_host: bool = False
) -> tuple[Any, int] | None:
    """``restore`` of the newest intact checkpoint under ``base`` (or of ``step``), with its step; None if
    there is none. Unfinished and damaged checkpoints are skipped with a warning naming each and why
    (falling back to the one before); if complete checkpoints exist and all are damaged, that is
    ``NoUsableCheckpoint``; one of a different model is ``IncompatibleCheckpoint``."""
    complete, unfinished = (
        [(s, url) for s, url in found if step is None or s == step] for found in scan_checkpoints(base)
    )
    for _, url in unfinished:
        logger.warning("skipping checkpoint %s: no manifest.json (a save in progress or cut short, or lost)", url)
    damaged = []
    for found, url in reversed(complete):
        try:
            return restore(url, template, root=root, on_host=on_host), found
        except CorruptCheckpoint as e:
            logger.warning("checkpoint %s is corrupt (%s); falling back to the previous one", url, e)
            damaged.append(f"{url}: {e}")
    if damaged:
        raise NoUsableCheckpoint(
            f"{base}: every checkpoint is damaged, so none can be resumed; "
            + "; ".join(damaged)
            + ". Restore a good copy, or set CheckpointConfig.restart_if_unusable to start over from step 0"
        )
    return None


def restore_params(base: str, template: Any, step: int | None = None) -> tuple[Any, int]:
    """Host copies of the parameters of the newest intact checkpoint under ``base`` (or of ``step``): what
    evaluation, export and generation need, without the optimizer state's memory."""
    restored = restore_latest(base, template, root="params", step=step, on_host=True)
    if restored is None:
        raise FileNotFoundError(f"{base}: no complete checkpoint" + (f" at step {step}" if step is not None else ""))
    return restored


def checkpoint_metadata(base: str, step: int | None = None) -> dict:
    """What the run stored beside its newest checkpoint (or ``step``'s): ``{"model": <LlamaConfig as a
    dict>, ...}``; empty for checkpoints written before metadata existed."""
    candidates = [url for s, url in list_checkpoints(base) if step is None or s == step]
    if not candidates:
        raise FileNotFoundError(f"{base}: no complete checkpoint" + (f" at step {step}" if step is not None else ""))
    for url in reversed(candidates):  # the newest readable manifest
        try:
            return read_manifest(url).get("metadata", {})
        except CorruptCheckpoint as e:
            logger.warning("skipping checkpoint %s: %s", url, e)
    raise NoUsableCheckpoint(f"{base}: no checkpoint has a readable manifest")


def check_optimizer(base: str, kind: str) -> None:
    """Refuse to resume a run whose checkpoints hold another optimizer's state (``"optimizer"`` in their
    metadata, stored since it existed): restoring it would fail on the leaves or, where they happen to match,
    continue with another algorithm's moments; starting the state over would silently lose it."""
    if not list_checkpoints(base):
        return
    try:
        stored = checkpoint_metadata(base).get("optimizer")
    except NoUsableCheckpoint:
        return  # restore_latest says what is wrong with them
    if stored is not None and stored != kind:
        raise IncompatibleCheckpoint(
            f"{base}: its checkpoints hold the state of optimizer {stored!r}, but this run's OptimizerConfig.kind "
            f"is {kind!r}; resume with {stored!r}, or start a new run (initialize_from=<that run> starts a new "
            f"optimizer from its parameters)"
        )


def _stored_shape(url: str) -> tuple[str, list[int]] | None:
    """(dtype, shape) the stored array itself records (its zarr metadata); None if that cannot be read.
    Only for tensorstore URLs (raw bytes keep no shape: there the manifest is the only record)."""
    kv = _kvstore(url)
    try:
        store = ts.open({"driver": "zarr3", "kvstore": kv}, open=True).result()
    except (OSError, ValueError, RuntimeError):
        return None
    return str(np.dtype(store.dtype.numpy_dtype)), list(store.shape)


def _read_leaf(url: str, name: str, meta: dict, like: Any) -> np.ndarray:
    expected = (str(np.dtype(like.dtype)), list(like.shape))
    if (meta["dtype"], list(meta["shape"])) != expected:
        stored = _stored_shape(join(url, name)) if _kvstore(url) is not None else (meta["dtype"], list(meta["shape"]))
        if stored != (meta["dtype"], list(meta["shape"])):
            # The manifest disagrees with its own array: damage, not a different model.
            raise CorruptCheckpoint(
                f"{name}: the manifest says {meta['dtype']}{meta['shape']} but the stored array is "
                + (f"{stored[0]}{stored[1]}" if stored else "unreadable")
            )
        raise IncompatibleCheckpoint(
            f"{url}: {name} is {meta['dtype']}{meta['shape']}, expected {expected[0]}{expected[1]}: this checkpoint "
            "holds a different model (its manifest and arrays agree); train it under a new output_path"
        )
    try:
        array = _read_array(join(url, name), np.dtype(like.dtype), tuple(like.shape))
    except (OSError, ValueError, RuntimeError) as e:  # tensorstore raises ValueError/RuntimeError subclasses
        raise CorruptCheckpoint(f"{name}: {e}") from e
    if array.shape != tuple(like.shape) or _crc32(array) != meta["crc32"]:
        raise CorruptCheckpoint(f"{name}: checksum mismatch")
    return array


def _place(array: np.ndarray, like: Any) -> jax.Array:
    sharding = getattr(like, "sharding", None)
    if not isinstance(sharding, jax.sharding.NamedSharding):
        return jax.numpy.asarray(array)
    # Each device receives only its own slice of the host array (a process only materialises the
    # shards of its addressable devices, which is what a multi-host restore needs).
    return jax.make_array_from_callback(array.shape, sharding, lambda index: array[index])
