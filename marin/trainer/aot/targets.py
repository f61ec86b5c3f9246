"""TPU slices as the cluster configs name them, and their devices without a TPU (libtpu's compiler).

    target = parse_target("2 x v5e-256")     # TpuTarget(generation="v5e", chips=256, slices=2)
    devices = topology_devices(target)        # 512 compile-only TPU devices, slice_index 0 and 1

Names follow Cloud TPU's accelerator types: ``v5e-N``/``v6e-N`` count chips; ``v4-N``/``v5p-N`` count
TensorCores, two per chip (a ``v4-8`` is 4 chips in one host, each one JAX device: megacore). A prefix
``K x`` asks for K slices joined by the data-centre network (multislice). Topologies and wrap-arounds are
those of MaxText's ``accelerator_to_spec_map.py``; chip figures are Cloud TPU's documentation
(docs/tpu.md cites each page).
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
import os
import re

GIB = 1024**3
TPU_EXTRA = "tpu-compile"
"""The pyproject extra that installs libtpu (``pip install -e ".[tpu-compile]"``)."""


@dataclasses.dataclass(frozen=True)
class Chip:
    """One TPU generation's chip: what a program may use and how fast it can go."""

    name: str
    hbm_bytes: int
    """HBM per chip (v4 32 GiB, v5e 16 GiB, v5p 95 GiB, v6e 32 GiB)."""
    peak_flops: float
    """bf16 dense peak per chip."""
    hbm_bytes_per_s: float
    ici_bytes_per_s: float | None
    """Inter-chip interconnect per chip (the docs' "ICI bandwidth"); None where not published per chip."""
    dcn_bytes_per_s: float | None
    """Data-centre network per chip (per-pod or per-host figures divided by chips); None where unpublished."""
    topology_prefix: str
    """libtpu's name for the generation in a topology string ("v5e:2x2", "v5:2x2x1")."""
    chip_config: str
    """"megacore" (one device per chip of two TensorCores: v4, v5p) or "default"."""
    cores_per_chip: int
    """TensorCores per chip: the N of a ``v4-N`` name counts cores."""


CHIPS: dict[str, Chip] = {
    "v4": Chip("v4", 32 * GIB, 275e12, 1200e9, None, None, "v4", "megacore", 2),
    "v5e": Chip("v5e", 16 * GIB, 197e12, 819e9, 1600e9 / 8, 6.4e12 / 8 / 256, "v5e", "default", 1),
    "v5p": Chip("v5p", 95 * GIB, 459e12, 2765e9, 4800e9 / 8, 50e9 / 8, "v5", "megacore", 2),
    "v6e": Chip("v6e", 32 * GIB, 918e12, 1640e9, 3584e9 / 8, 25.6e12 / 8 / 256, "v6e", "default", 1),
}

# chips per slice -> topology (MaxText's table): 2-D tori for v5e/v6e, 3-D for v4/v5p.
_TORUS_2D = {1: "1x1", 4: "2x2", 8: "2x4", 16: "4x4", 32: "4x8", 64: "8x8", 128: "8x16", 256: "16x16"}
_TORUS_3D = {
    4: "2x2x1",
    8: "2x2x2",
    16: "2x2x4",
    32: "2x4x4",
    64: "4x4x4",
    128: "4x4x8",
    192: "4x4x12",
    256: "4x8x8",
    512: "8x8x8",
    768: "8x8x12",
    1024: "8x8x16",
    2048: "8x16x16",
    4096: "16x16x16",
}
_TOPOLOGIES = {"v4": _TORUS_3D, "v5e": _TORUS_2D, "v5p": _TORUS_3D, "v6e": _TORUS_2D}


def known_targets() -> list[str]:
    """Every slice name ``parse_target`` accepts (each may be prefixed by ``K x`` for K slices)."""
    return [
        f"{gen}-{chips * CHIPS[gen].cores_per_chip}"
        for gen, table in _TOPOLOGIES.items()
        for chips in sorted(table)
        if not (gen == "v4" and chips > 2048)
    ]


@dataclasses.dataclass(frozen=True)
class TpuTarget:
    generation: str
    chips: int
    """Chips per slice."""
    slices: int = 1

    @property
    def chip(self) -> Chip:
        return CHIPS[self.generation]

    @property
    def total_chips(self) -> int:
        return self.chips * self.slices

    @property
    def topology(self) -> str:
        """Chips per slice along each torus dimension, e.g. "16x16"."""
        return _TOPOLOGIES[self.generation][self.chips]

    @property
    def name(self) -> str:
        single = f"{self.generation}-{self.chips * self.chip.cores_per_chip}"
        return single if self.slices == 1 else f"{self.slices} x {single}"

    @property
    def wrap(self) -> tuple[bool, bool, bool]:
        """Torus wrap-around links per dimension: full pods (16 on a 2-D side, 4x4x4 cubes and up) have them."""
        dims = [int(d) for d in self.topology.split("x")]
        if len(dims) == 2:
            return (dims[0] == 16, dims[1] == 16, False)
        return (True, True, True) if self.chips >= 64 else (False, False, False)


def parse_target(name: str) -> TpuTarget:
    """``"v5e-4"``, ``"v4-2048"``, ``"2 x v5e-256"`` (also ``2xv5e-256``) -> a TpuTarget; an unknown name is a
    ValueError listing the known ones."""
    match = re.fullmatch(r"\s*(?:(\d+)\s*[xX×]\s*)?(v4|v5e|v5p|v6e|v5litepod)-(\d+)\s*", name)
    if match:
        slices, gen, count = int(match.group(1) or 1), match.group(2), int(match.group(3))
        gen = "v5e" if gen == "v5litepod" else gen
        cores = CHIPS[gen].cores_per_chip
        if count % cores == 0 and count // cores in _TOPOLOGIES[gen] and slices >= 1:
            return TpuTarget(gen, count // cores, slices)
    raise ValueError(
        f"unknown TPU target {name!r}; known slices: {', '.join(known_targets())} (prefix 'K x ' for K slices, "
        "e.g. '2 x v5e-256')"
    )


def libtpu_requirement() -> str | None:
    """The libtpu version the installed jax pins for its ``tpu`` extra (e.g. "libtpu==0.0.42.*"), if any."""
    for requirement in importlib.metadata.requires("jax") or []:
        if requirement.startswith("libtpu") and 'extra == "tpu"' in requirement:
            return requirement.split(";")[0].strip()
    return None


def check_libtpu() -> None:
    """Raise naming what to install when libtpu is missing or is not the one the installed jax was built with."""
    import jax  # noqa: PLC0415

    wanted = libtpu_requirement()
    if importlib.util.find_spec("libtpu") is None:
        raise ModuleNotFoundError(
            f"compiling for a TPU needs libtpu (XLA's TPU compiler), which is not installed: "
            f'pip install -e ".[{TPU_EXTRA}]" (or pip install "jax[tpu]=={jax.__version__}")'
        )
    if wanted is None:
        return
    from packaging.requirements import Requirement  # noqa: PLC0415

    found = importlib.metadata.version("libtpu")
    if not Requirement(wanted).specifier.contains(found, prereleases=True):
        raise RuntimeError(
            f"libtpu {found} is installed but jax {jax.__version__} was built against {wanted}: "
            f'pip install "{wanted}" (or pip install "jax[tpu]=={jax.__version__}")'
        )


def _quiet_libtpu_env(target: TpuTarget) -> None:
    """On a machine without TPU chips libtpu probes the GCE metadata service for the accelerator type and warns
    about unset worker hostnames; say there is nothing to probe (only where the caller did not)."""
    os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
    single = f"{target.generation}-{target.chips * target.chip.cores_per_chip}"
    os.environ.setdefault("TPU_ACCELERATOR_TYPE", single.replace("v5e-", "v5litepod-"))
    os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")


def topology_devices(target: TpuTarget) -> list:
    """The target's devices as libtpu describes them (compile-only: nothing runs on them), slices in order."""
    check_libtpu()
    from jax.experimental import topologies  # noqa: PLC0415

    _quiet_libtpu_env(target)
    chip = target.chip
    description = topologies.get_topology_desc(
        topology_name=f"{chip.topology_prefix}:{target.topology}",
        platform="tpu",
        chip_config_name=chip.chip_config,
        chips_per_host_bounds=(2, 2, 1) if target.chips >= 4 else (1, 1, 1),
        num_slices=target.slices,
        wrap=target.wrap,
    )
    devices = list(description.devices)
    if len(devices) != target.total_chips:
        raise RuntimeError(f"libtpu described {len(devices)} devices for {target.name}, expected {target.total_chips}")
    return devices
