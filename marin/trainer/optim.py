"""AdamW with learning-rate schedules, a weight-decay mask, global-norm clipping and optional EMA.

    opt = OptimizerConfig(learning_rate=3e-3, schedule="wsd", warmup=0.05, decay=0.2, min_lr_ratio=0.1)
    tx = opt.build(num_train_steps=1000, axes=param_axes(model_cfg))   # an optax GradientTransformation
    opt.lr_schedule(1000)(999)                                           # the lr of the last update

Schedules take ``step`` = the number of updates already applied (the first update uses ``lr(0)``).
With peak ``p``, floor ``f = min_lr_ratio * p``, ``W`` warmup steps and ``T`` total steps:

- warmup (every schedule):  ``lr(t) = p * (t + 1) / W``                       for ``t < W``
- ``constant``:              ``p``
- ``linear``:                ``p - (p - f) * (t - W) / (T - W)``
- ``cosine``:                ``f + (p - f) * (1 + cos(pi * (t - W) / (T - W))) / 2``
- ``wsd``  (warmup-stable-decay, Hu et al. 2024 "MiniCPM"): ``p`` until ``T - D``, then linear to ``f``
  over the last ``D`` steps: ``p - (p - f) * (t - (T - D)) / D``
- ``wsd_s`` (Wen et al. 2024): cycles ending at ``cycles = (c1, c2, ...)`` and ``T``; each cycle is a WSD
  of its own length (the first warms up over ``W``, later ones over ``rewarmup`` from ``f``), decaying
  over the last ``decay`` fraction of the cycle. Checkpoints at the cycle ends are the decayed models.

``warmup`` and ``decay`` below 1 are fractions of ``T`` (of the cycle for ``wsd_s``), otherwise steps.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax

from marin.trainer.axes import EMBED, VOCAB

logger = logging.getLogger(__name__)

SCHEDULES = ("constant", "linear", "cosine", "wsd", "wsd_s")
Schedule = Callable[[jax.Array | int], jax.Array]


@dataclasses.dataclass(frozen=True, kw_only=True)
class OptimizerConfig:
    learning_rate: float = 3e-4
    """Peak learning rate."""
    weight_decay: float = 0.1
    """Decoupled (AdamW) decay, applied only to matrices that are neither norms nor embeddings."""
    beta1: float = 0.9
    beta2: float = 0.95
    epsilon: float = 1e-8
    max_grad_norm: float | None = 1.0
    """Clip the global gradient norm to this; None disables clipping."""
    schedule: str = "wsd"
    """One of constant, linear, cosine, wsd, wsd_s (formulas in the module docstring)."""
    warmup: float = 0.05
    """Warmup length: a fraction of the run if < 1, else a number of steps."""
    decay: float | None = None
    """wsd / wsd_s: length of the decay phase (fraction if < 1, else steps); default 0.2."""
    min_lr_ratio: float = 0.1
    """The schedule's floor as a fraction of the peak."""
    cycles: tuple[int, ...] = ()
    """wsd_s: steps at which all but the last cycle end (the last ends at num_train_steps)."""
    rewarmup: float = 0.0
    """wsd_s: warmup of every cycle after the first (fraction of the cycle if < 1, else steps)."""
    decay_embeddings: bool = False
    """Also weight-decay the embedding and output projection (Llama does not)."""
    ema_decay: float | None = None
    """Keep an exponential moving average of the parameters with this decay (e.g. 0.999); None: off."""

    def __post_init__(self):
        if self.schedule not in SCHEDULES:
            raise ValueError(f"OptimizerConfig.schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if self.learning_rate <= 0:
            raise ValueError(f"OptimizerConfig.learning_rate must be > 0, got {self.learning_rate}")
        if not 0 <= self.min_lr_ratio <= 1:
            raise ValueError(f"OptimizerConfig.min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")
        for name in ("warmup", "rewarmup", "weight_decay"):
            if getattr(self, name) < 0:
                raise ValueError(f"OptimizerConfig.{name} must be >= 0, got {getattr(self, name)}")
        if self.decay is not None and self.decay <= 0:
            raise ValueError(f"OptimizerConfig.decay must be > 0, got {self.decay}")
        if self.max_grad_norm is not None and self.max_grad_norm <= 0:
            raise ValueError(f"OptimizerConfig.max_grad_norm must be > 0 or None, got {self.max_grad_norm}")
        if list(self.cycles) != sorted(set(self.cycles)) or any(c <= 0 for c in self.cycles):
            raise ValueError(f"OptimizerConfig.cycles must be increasing positive steps, got {self.cycles}")
        if self.ema_decay is not None and not 0 < self.ema_decay < 1:
            raise ValueError(f"OptimizerConfig.ema_decay must be in (0, 1) or None, got {self.ema_decay}")
        if self.cycles and self.schedule != "wsd_s":
            raise ValueError(f"OptimizerConfig.cycles is only used by schedule='wsd_s', got {self.schedule!r}")

    def lr_schedule(self, num_train_steps: int) -> Schedule:
        if self.schedule != "wsd_s":
            return _phase_schedule(self, 0, num_train_steps, self.warmup, warm_from=0.0)
        bounds = (0, *self.cycles, num_train_steps)
        if bounds[-2] >= num_train_steps:
            raise ValueError(f"OptimizerConfig.cycles {self.cycles} must end before num_train_steps={num_train_steps}")
        floor = self.learning_rate * self.min_lr_ratio
        pieces = [
            _phase_schedule(
                self, start, end, self.warmup if i == 0 else self.rewarmup, warm_from=0.0 if i == 0 else floor
            )
            for i, (start, end) in enumerate(zip(bounds[:-1], bounds[1:]))
        ]
        return lambda step: _select_cycle(pieces, bounds, step)

    def build(self, num_train_steps: int, axes: Any) -> optax.GradientTransformation:
        """AdamW over parameters whose logical axes are given by ``axes`` (the tree of ``param_axes``)."""
        schedule = self.lr_schedule(num_train_steps)
        parts = [] if self.max_grad_norm is None else [optax.clip_by_global_norm(self.max_grad_norm)]
        parts += [
            optax.scale_by_adam(b1=self.beta1, b2=self.beta2, eps=self.epsilon),
            optax.add_decayed_weights(self.weight_decay, mask=self.decay_mask(axes)),
            optax.scale_by_learning_rate(schedule),
        ]
        return optax.chain(*parts)

    def decay_mask(self, axes: Any) -> Any:
        """True for parameters to decay: matrices (rank >= 2 without the layers axis), not embeddings."""

        def decays(leaf_axes: tuple) -> bool:
            named = [a for a in leaf_axes if a != "layers"]
            if len(named) < 2:
                return False  # norms (and any vector)
            return self.decay_embeddings or not (VOCAB in named and EMBED in named)

        return jax.tree.map(decays, axes, is_leaf=lambda x: isinstance(x, tuple))


def _steps(value: float, total: int) -> int:
    return int(round(value * total)) if value < 1 else int(value)


def _phase_schedule(cfg: OptimizerConfig, start: int, end: int, warmup: float, warm_from: float) -> Schedule:
    """One warmup + (constant | linear | cosine | wsd) phase over steps [start, end)."""
    peak, floor = cfg.learning_rate, cfg.learning_rate * cfg.min_lr_ratio
    length = end - start
    w = _steps(warmup, length)
    decay_steps = _steps(0.2 if cfg.decay is None else cfg.decay, length)
    if w >= length:
        raise ValueError(f"schedule {cfg.schedule!r}: warmup of {w} steps does not fit in {length} steps")
    if cfg.schedule in ("wsd", "wsd_s") and w + decay_steps > length:
        raise ValueError(
            f"schedule {cfg.schedule!r}: warmup ({w}) + decay ({decay_steps}) steps do not fit in {length} steps"
        )

    def schedule(step):
        t = jnp.asarray(step, jnp.float32) - start
        warm = warm_from + (peak - warm_from) * (t + 1) / max(w, 1)
        if cfg.schedule == "constant":
            main = jnp.full_like(t, peak)
        elif cfg.schedule == "linear":
            main = peak - (peak - floor) * (t - w) / (length - w)
        elif cfg.schedule == "cosine":
            main = floor + (peak - floor) * 0.5 * (1 + jnp.cos(jnp.pi * (t - w) / (length - w)))
        else:  # wsd, wsd_s
            decay_start = length - decay_steps
            main = jnp.where(t < decay_start, peak, peak - (peak - floor) * (t - decay_start) / decay_steps)
        return jnp.where(t < w, warm, main)

    return schedule


def _select_cycle(pieces: list[Schedule], bounds: tuple[int, ...], step) -> jax.Array:
    step = jnp.asarray(step)
    lr = pieces[0](step)
    for piece, start in zip(pieces[1:], bounds[1:-1]):
        lr = jnp.where(step >= start, piece(step), lr)
    return lr


def update_ema(ema: Any, params: Any, decay: float) -> Any:
    """Exponential moving average of the parameters: ``ema <- decay * ema + (1 - decay) * params``."""
    return jax.tree.map(lambda e, p: decay * e + (1.0 - decay) * p, ema, params)
