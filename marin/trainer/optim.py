"""Optimizers (AdamW, Muon, Lion, Adafactor, SOAP, Schedule-Free AdamW) with learning-rate schedules, a
weight-decay mask, global-norm clipping and optional EMA.

    opt = OptimizerConfig(learning_rate=3e-3, schedule="wsd", warmup=0.05, decay=0.2, min_lr_ratio=0.1)
    tx = opt.build(num_train_steps=1000, axes=param_axes(model_cfg))   # an optax GradientTransformation
    opt.lr_schedule(1000)(999)                                           # the lr of the last update
    OptimizerConfig(kind="muon", learning_rate=0.02, muon_adam_learning_rate=3e-3)

Every kind is ``clip -> direction -> decoupled weight decay -> -lr(t)``, the decay masked by ``decay_mask``
(matrices, not norms; embeddings only with ``decay_embeddings``) and multiplied by the learning rate as in
torch's AdamW, Muon and Lion. The direction, per kind (docs/optimizers.md lists it per parameter):

- ``adamw``: Adam's ``m / (sqrt(v) + eps)`` (``beta1``, ``beta2``, ``epsilon``) on every parameter.
- ``muon``: on the hidden matrices, chosen by logical axes (``marin.trainer.muon.matrix_dims``), momentum
  ``muon_momentum`` (Nesterov by default) orthogonalized by ``muon_ns_steps`` Newton–Schulz steps and scaled
  by ``muon_lr_scaling``; on the embedding, the output head, the norms and any other parameter, Adam as
  above at peak ``muon_adam_learning_rate`` (default: ``learning_rate``), on the same schedule.
- ``lion``: ``sign(beta1 * m + (1 - beta1) * g)``, then ``m <- beta2 * m + (1 - beta2) * g`` (Chen et al.
  2023, optax's ``scale_by_lion``; the paper's betas are 0.9 and 0.99, and its lr 3-10x smaller than AdamW's).
- ``adafactor``: optax's ``adafactor`` (factored second moments, decay rate 0.8, update clipping at RMS 1)
  with momentum ``beta1`` and without its relative step (``multiply_by_parameter_scale=False``), so the
  learning rate means what it means for AdamW; its weight decay is ``weight_decay`` times the learning rate
  too, as above (optax's own ``weight_decay_rate`` is not multiplied by it).
- ``soap``: on the hidden matrices, Adam (``beta1``, ``beta2``, ``epsilon``) in the eigenbasis of Shampoo's
  preconditioner, refreshed every ``soap_precondition_frequency`` updates (Vyas et al. 2024;
  ``marin.trainer.soap``; the paper's betas are 0.95 and 0.95); AdamW on the other parameters, same lr.
- ``schedule_free_adamw``: optax's ``contrib.schedule_free`` around momentum-free AdamW (Defazio et al. 2024,
  "The Road Less Scheduled"): the gradient is taken at ``y = beta1 * x + (1 - beta1) * z``, ``z`` takes the
  AdamW step (``beta2``, ``epsilon``, the decay at ``y``), and ``x`` is the average of the ``z``s weighted by
  ``lr**2``. The trainer's parameters are ``y``; ``x``, what is evaluated, checkpointed as the model,
  exported, sampled and served, is kept where an EMA would be (``keeps_average``), and
  ``schedule_free_eval_params(opt_state, params)`` computes it from any state. Meant for
  ``schedule="constant"`` with warmup: the averaging replaces the decay. Equal to the authors'
  ``schedulefree.AdamWScheduleFree``; optax's own weighs each ``z`` by the next update's learning rate (the
  same without warmup).

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

from marin.identity import added_field
from marin.trainer.axes import EMBED, VOCAB
from marin.trainer.muon import LR_SCALINGS, NS_DTYPES, MatrixDims, is_axes, matrix_dims, scale_by_muon
from marin.trainer.soap import scale_by_soap

logger = logging.getLogger(__name__)

SCHEDULES = ("constant", "linear", "cosine", "wsd", "wsd_s")
KINDS = ("adamw", "muon", "lion", "adafactor", "soap", "schedule_free_adamw")
Schedule = Callable[[jax.Array | int], jax.Array]


@dataclasses.dataclass(frozen=True, kw_only=True)
class OptimizerConfig:
    kind: str = "adamw"
    """One of adamw, muon, lion, adafactor, soap, schedule_free_adamw (the module docstring says what each does
    to which parameter)."""
    learning_rate: float = 3e-4
    """Peak learning rate (for muon: of the hidden matrices)."""
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
    muon_momentum: float = 0.95
    muon_nesterov: bool = True
    muon_ns_steps: int = 5
    muon_ns_dtype: str = added_field("float32")
    """The operands of Newton–Schulz's matmuls: float32, or bfloat16 as torch's and Keller Jordan's Muon (fp32
    accumulation either way; docs/optimizers.md measures both)."""
    muon_lr_scaling: str = "jordan"
    """jordan: sqrt(max(1, fan_out / fan_in)) (Keller Jordan; torch's "original"); moonlight:
    0.2 * sqrt(max(fan_in, fan_out)) (Liu et al. 2025; torch's "match_rms_adamw": AdamW's lr carries over)."""
    muon_adam_learning_rate: float | None = None
    """muon: peak lr of the parameters that get AdamW (embedding, output head, norms); None: learning_rate."""
    soap_precondition_frequency: int = 10
    """soap: refresh the eigenbases every this many updates (the authors' default)."""
    soap_shampoo_beta: float | None = None
    """soap: decay of the preconditioner's statistics L and R; None: beta2."""

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"OptimizerConfig.kind must be one of {KINDS}, got {self.kind!r}")
        if self.muon_lr_scaling not in LR_SCALINGS:
            raise ValueError(
                f"OptimizerConfig.muon_lr_scaling must be one of {LR_SCALINGS}, got {self.muon_lr_scaling!r}"
            )
        if self.muon_ns_dtype not in NS_DTYPES:
            raise ValueError(
                f"OptimizerConfig.muon_ns_dtype must be one of {tuple(NS_DTYPES)}, got {self.muon_ns_dtype!r}"
            )
        if not 0 <= self.muon_momentum < 1 or self.muon_ns_steps < 1:
            raise ValueError(
                f"OptimizerConfig: muon_momentum must be in [0, 1) and muon_ns_steps >= 1, got "
                f"{self.muon_momentum} and {self.muon_ns_steps}"
            )
        if self.soap_precondition_frequency < 1:
            raise ValueError(
                f"OptimizerConfig.soap_precondition_frequency must be >= 1, got {self.soap_precondition_frequency}"
            )
        if self.muon_adam_learning_rate is not None and self.muon_adam_learning_rate <= 0:
            raise ValueError(f"OptimizerConfig.muon_adam_learning_rate must be > 0, got {self.muon_adam_learning_rate}")
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
        if self.schedule_free and self.ema_decay is not None:
            raise ValueError(
                "OptimizerConfig.ema_decay must be None with kind='schedule_free_adamw': its own average x is "
                f"what is evaluated and exported (got ema_decay={self.ema_decay})"
            )
        if self.schedule_free and not 0 < self.beta1 < 1:
            raise ValueError(
                f"OptimizerConfig.beta1 (schedule-free's interpolation) must be in (0, 1), got {self.beta1}"
            )
        if self.cycles and self.schedule != "wsd_s":
            raise ValueError(f"OptimizerConfig.cycles is only used by schedule='wsd_s', got {self.schedule!r}")

    @property
    def schedule_free(self) -> bool:
        return self.kind == "schedule_free_adamw"

    @property
    def keeps_average(self) -> bool:
        """Whether the train state keeps averaged parameters (the EMA, or schedule-free's ``x``): those are then
        what is evaluated, saved as the model and exported (``marin.trainer.step.next_average``)."""
        return self.ema_decay is not None or self.schedule_free

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
        """The optimizer over parameters whose logical axes are given by ``axes`` (the tree of ``param_axes``)."""
        schedule = self.lr_schedule(num_train_steps)
        clip = [] if self.max_grad_norm is None else [optax.clip_by_global_norm(self.max_grad_norm)]
        decay = optax.add_decayed_weights(self.weight_decay, mask=self.decay_mask(axes))
        step = optax.scale_by_learning_rate(schedule)
        adam = optax.scale_by_adam(b1=self.beta1, b2=self.beta2, eps=self.epsilon)
        if self.kind == "adamw":
            return optax.chain(*clip, adam, decay, step)
        if self.kind == "lion":
            return optax.chain(*clip, optax.scale_by_lion(b1=self.beta1, b2=self.beta2), decay, step)
        if self.schedule_free:
            rms = optax.scale_by_rms(decay=self.beta2, eps=self.epsilon, eps_in_sqrt=False, bias_correction=True)
            # optax weighs update k's z by lr(k + 1) (its count starts at 1); the authors' reference
            # (schedulefree's AdamWScheduleFree) by the lr that update used, lr(k): the latter, shifted back
            this_step_lr = lambda count: schedule(count - 1)  # noqa: E731
            base = optax.chain(*clip, rms, decay, step)
            return optax.contrib.schedule_free(base, this_step_lr, b1=self.beta1)
        if self.kind == "adafactor":
            factored = optax.adafactor(
                learning_rate=None,
                momentum=self.beta1 or None,
                multiply_by_parameter_scale=False,
            )  # with learning_rate None: the direction only (the sign and lr come below, as for the others)
            return optax.chain(*clip, factored, optax.scale(-1.0), decay, step)
        dims = jax.tree.map(matrix_dims, axes, is_leaf=is_axes)
        labels = jax.tree.map(lambda d: "matrix" if isinstance(d, MatrixDims) else "adam", dims, is_leaf=_is_dims)
        if self.kind == "soap":
            soap = scale_by_soap(
                dims,
                b1=self.beta1,
                b2=self.beta2,
                shampoo_beta=self.soap_shampoo_beta,
                eps=self.epsilon,
                precondition_frequency=self.soap_precondition_frequency,
            )
            return optax.chain(*clip, optax.transforms.partition({"matrix": soap, "adam": adam}, labels), decay, step)
        muon = scale_by_muon(
            dims,
            momentum=self.muon_momentum,
            nesterov=self.muon_nesterov,
            ns_steps=self.muon_ns_steps,
            lr_scaling=self.muon_lr_scaling,
            ns_dtype=self.muon_ns_dtype,
        )
        ratio = (self.muon_adam_learning_rate or self.learning_rate) / self.learning_rate
        adam_ratio = jax.tree.map(lambda label: 1.0 if label == "matrix" else ratio, labels)
        return optax.chain(
            *clip,
            optax.transforms.partition({"matrix": muon, "adam": adam}, labels),
            decay,
            step,
            _scale_leaves(adam_ratio),
        )

    def decay_mask(self, axes: Any) -> Any:
        """True for parameters to decay: matrices that read or write the residual stream (an ``embed`` axis and
        another, besides ``layers`` and ``experts``), not embeddings; never norms, QK-norm weights, biases or a
        MoE's router (``[layers, embed, experts]``)."""

        def decays(leaf_axes: tuple) -> bool:
            named = [a for a in leaf_axes if a not in ("layers", "experts")]
            if len(named) < 2 or EMBED not in named:
                return False  # norms, biases and QK-norm weights ([heads, head_dim] under OLMo 2's)
            return self.decay_embeddings or VOCAB not in named

        return jax.tree.map(decays, axes, is_leaf=lambda x: isinstance(x, tuple))


def _is_dims(x: Any) -> bool:
    return x is None or isinstance(x, MatrixDims)


def _scale_leaves(factors: Any) -> optax.GradientTransformation:
    """Multiply each update leaf by its own constant (muon: the AdamW part's lr relative to the matrices')."""

    def update(updates, state, params=None):
        del params
        return jax.tree.map(lambda u, f: u if f == 1.0 else u * jnp.asarray(f, u.dtype), updates, factors), state

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update)


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


def schedule_free_eval_params(opt_state: Any, params: Any) -> Any:
    """Schedule-Free's evaluation point ``x``, the model of a ``kind="schedule_free_adamw"`` run, from its
    optimizer state (which holds ``z``) and its parameters ``params`` (``y``, where gradients are taken)::

        result = train(config)                                                 # a schedule-free run
        x = schedule_free_eval_params(result.state.opt_state, result.state.params)

    ``x = (y - (1 - beta1) * z) / beta1`` (optax's ``contrib.schedule_free_eval_params``), a tree shaped like
    ``params``; pure, so it jits. The trainer keeps this ``x`` in its state where an EMA would be
    (``TrainState.ema``): the eval hook measures it, checkpoints save it as the model, and so export,
    evaluation, samples and the server read it. Any other optimizer's state is refused."""
    if not isinstance(opt_state, optax.contrib.ScheduleFreeState):
        raise ValueError(
            f"schedule_free_eval_params: opt_state is a {type(opt_state).__name__}, not the state of "
            "OptimizerConfig(kind='schedule_free_adamw'); other kinds evaluate their params (or their EMA)"
        )
    if jax.tree.structure(opt_state.z) != jax.tree.structure(params):
        raise ValueError(
            "schedule_free_eval_params: params are not shaped like the optimizer state's z (the y of the same "
            f"run): {jax.tree.structure(params)} against {jax.tree.structure(opt_state.z)}"
        )
    return optax.contrib.schedule_free_eval_params(opt_state, params)


def update_ema(ema: Any, params: Any, decay: float) -> Any:
    """Exponential moving average of the parameters: ``ema <- decay * ema + (1 - decay) * params``."""
    return jax.tree.map(lambda e, p: decay * e + (1.0 - decay) * p, ema, params)
