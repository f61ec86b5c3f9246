"""Where metrics go: a JSONL log in the run's output directory, wandb, and a progress bar.

    tracker = build_tracker(TrackerConfig(), output_path, run_config, resume_step=120)
    tracker.log(121, {"train/loss": 3.2, "train/tokens_per_s": 5400.0})
    tracker.finish()

``tracker.json`` records the wandb run (``{"wandb_url", "wandb_id"}``) for the experiment report.
``metrics.jsonl`` holds one ``{"step": ..., <metric>: ...}`` object per line; on resume, lines past the
resumed step (written by the killed run after its last checkpoint) are dropped, so the log always
matches the state. wandb runs offline unless ``WANDB_API_KEY`` is set or ``wandb_mode`` says otherwise.

MFU divides model FLOPs/s by the peak of the devices in use, looked up by ``device_kind`` in
``PEAK_FLOPS_PER_DEVICE`` (bf16 dense peaks from vendor data sheets; the CPU entry is the fp32 matmul
rate measured on the lab's 2-core machines by ``benchmarks/trainer_bench.py``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from typing import Any

import jax

from marin.progress import progress_bar
from marin.storage import exists, is_local, join, open_url, read_text, write_atomic
from marin.storage.paths import local_path
from marin.trainer.wandb_file import wait_until_complete

logger = logging.getLogger(__name__)

# device_kind substring (lower case) -> peak FLOP/s per device. First match wins, so specific names first.
PEAK_FLOPS_PER_DEVICE: tuple[tuple[str, float], ...] = (
    ("tpu v6", 918e12),  # v6e (Trillium)
    ("tpu v5 lite", 197e12),  # v5e
    ("tpu v5e", 197e12),
    ("tpu v5", 459e12),  # v5p
    ("tpu v4", 275e12),
    ("h200", 989e12),
    ("h100", 989e12),  # SXM, dense bf16
    ("a100", 312e12),
    ("cpu", 400e9),  # measured: fp32 matmul, 2 cores (see docs/trainer.md)
)


def peak_flops_per_device(device: jax.Device | None = None) -> float | None:
    kind = (device or jax.devices()[0]).device_kind.lower()
    for name, peak in PEAK_FLOPS_PER_DEVICE:
        if name in kind:
            return peak
    return None


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrackerConfig:
    wandb: bool = True
    """Log to Weights & Biases too."""
    wandb_project: str = "marin"
    wandb_mode: str | None = None
    """"online", "offline" or "disabled"; None: online iff WANDB_API_KEY is set."""
    progress_bar: bool = True
    peak_flops_per_device: float | None = None
    """Override the table for MFU (FLOP/s of one device)."""

    def __post_init__(self):
        if self.wandb_mode not in (None, "online", "offline", "disabled"):
            raise ValueError(
                f"TrackerConfig.wandb_mode must be online/offline/disabled or None, got {self.wandb_mode!r}"
            )


class JsonlLog:
    """``metrics.jsonl``: appended locally; rewritten whole (atomically) on object stores."""

    def __init__(self, url: str, resume_step: int):
        self.url = url
        self._lines: list[str] = []
        if exists(url):
            kept = [line for line in read_text(url).splitlines() if line and json.loads(line)["step"] <= resume_step]
            self._lines = [line + "\n" for line in kept]
        write_atomic(url, "".join(self._lines))
        self._file = open(local_path(url), "a") if is_local(url) else None  # noqa: SIM115 (kept open)

    def write(self, record: dict) -> None:
        line = json.dumps(record) + "\n"
        if self._file is not None:
            self._file.write(line)
            self._file.flush()
        else:
            self._lines.append(line)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
        else:
            with open_url(self.url, "w") as f:
                f.write("".join(self._lines))


class Tracker:
    """Metrics to ``metrics.jsonl``, W&B and a progress bar; a disabled tracker (every process of a
    multi-host job but the primary) does nothing, so N processes never write one log."""

    def __init__(
        self,
        config: TrackerConfig,
        output_path: str,
        run_config: dict,
        resume_step: int,
        total_steps: int,
        enabled: bool = True,
    ):
        self.enabled = enabled
        self.wandb_run = self.bar = None
        if not enabled:
            return
        self.jsonl = JsonlLog(join(output_path, "metrics.jsonl"), resume_step)
        self.wandb_run = _start_wandb(config, output_path, run_config) if config.wandb else None
        if self.wandb_run is not None:  # the experiment report links the run from here
            url = self.wandb_run.get_url() if hasattr(self.wandb_run, "get_url") else None
            write_atomic(
                join(output_path, "tracker.json"), json.dumps({"wandb_url": url, "wandb_id": self.wandb_run.id})
            )
        if config.progress_bar:
            self.bar = progress_bar(total_steps, "train", unit="step", initial=resume_step)

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        if not self.enabled:
            return
        record = {"step": step, **{k: _plain(v) for k, v in metrics.items()}}
        self.jsonl.write(record)
        if self.wandb_run is not None:
            self.wandb_run.log(record, step=step)

    def progress(self, step: int, loss: float, tokens_per_s: float) -> None:
        if self.bar is not None:
            self.bar.n = step
            self.bar.set_postfix(loss=f"{loss:.3f}", tok_s=f"{tokens_per_s:,.0f}", refresh=True)

    def finish(self) -> None:
        if not self.enabled:
            return
        self.jsonl.close()
        if self.bar is not None:
            self.bar.close()
        if self.wandb_run is not None:
            run_file = self.wandb_run.settings.sync_file
            self.wandb_run.finish()
            wait_until_complete(run_file)  # finish() returns before the service has flushed the run's log


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


def _start_wandb(config: TrackerConfig, output_path: str, run_config: dict):
    mode = config.wandb_mode or ("online" if os.environ.get("WANDB_API_KEY") else "offline")
    if mode == "disabled":
        return None
    import wandb

    directory = local_path(output_path) if is_local(output_path) else None
    run_id = os.path.basename(output_path.rstrip("/")).replace("/", "-") or None
    logger.info("wandb %s run %s", mode, run_id)
    return wandb.init(
        project=config.wandb_project, id=run_id, resume="allow", mode=mode, dir=directory, config=run_config
    )
