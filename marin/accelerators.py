"""Keep JAX off libtpu on a host without TPU chips, so that installing the TPU compiler costs CPU processes nothing.

libtpu (the ``tpu-compile`` extra: XLA's TPU compiler, for ``marin.trainer.aot``) registers a TPU backend that
every process initializes with its first ``jax.devices()``: it looks for chips, asks the GCE metadata service
for the accelerator type (seconds where that address does not fail at once: +2 s per process measured on one of
the lab's hosts) and prints two warnings about unset TPU variables. ``import marin`` runs
``keep_jax_off_absent_tpu()`` first: where libtpu is installed, no TPU chip is attached and the caller chose no
platform, it sets ``JAX_PLATFORMS=cpu`` (and ``TPU_SKIP_MDS_QUERY=1``), so JAX never starts the TPU backend;
compiling for a TPU topology still works (libtpu is loaded on demand). With a CUDA or ROCm plugin installed too,
only the metadata probe is skipped (the GPU stays the default).
"""

from __future__ import annotations

import glob
import importlib.util
import os
import sys
from collections.abc import MutableMapping

_GOOGLE_PCI_VENDOR = "0x1ae0"


def tpu_chips_attached(root: str = "/") -> bool:
    """Whether this host has TPU chips: an accel device node or a Google PCI device (what jax's own
    ``hardware_utils`` reads)."""
    if glob.glob(os.path.join(root, "dev/accel*")) or glob.glob(os.path.join(root, "dev/vfio/[0-9]*")):
        return True
    for vendor in glob.glob(os.path.join(root, "sys/bus/pci/devices/*/vendor")):
        try:
            with open(vendor) as f:
                if f.read().strip() == _GOOGLE_PCI_VENDOR:
                    return True
        except OSError:
            continue
    return False


def keep_jax_off_absent_tpu(environ: MutableMapping[str, str] | None = None, root: str = "/") -> str | None:
    """Choose the CPU for JAX when libtpu is installed but no TPU is attached (and ``JAX_PLATFORMS`` is unset);
    returns the platforms set, or None when it left JAX's choice alone."""
    environ = os.environ if environ is None else environ
    if "JAX_PLATFORMS" in environ or importlib.util.find_spec("libtpu") is None or tpu_chips_attached(root):
        return None
    environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
    if importlib.util.find_spec("jax_plugins") is not None:  # a GPU plugin: keep JAX's own platform choice
        return None
    environ["JAX_PLATFORMS"] = "cpu"
    jax = sys.modules.get("jax")
    if jax is not None and environ is os.environ:  # imported before marin: the env var was read already
        from jax._src import xla_bridge  # noqa: PLC0415

        if not xla_bridge.backends_are_initialized():
            jax.config.update("jax_platforms", "cpu")
    return "cpu"
