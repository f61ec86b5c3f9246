"""DPO-family losses on sequence log-probabilities, with TRL's metric names and meanings.

    cfg = PreferenceLossConfig(type="sigmoid", beta=0.1)
    loss, chosen_rewards, rejected_rewards = preference_loss(cfg, logps, ref_logps, lengths)   # each [pairs]

``logps`` and ``ref_logps`` are [pairs, 2] sums of log p(reply token) over each reply (column 0 the chosen
reply, column 1 the rejected one) under the policy and the frozen reference; ``lengths`` [pairs, 2] their
token counts. With ``Δ = (logπ(c) − logπ_ref(c)) − (logπ(r) − logπ_ref(r))``:

==============  ===========================================================================  =================
type            per-pair loss                                                                 TRL 1.16
==============  ===========================================================================  =================
sigmoid         −(1−ε)·logσ(βΔ) − ε·logσ(−βΔ)   (DPO, Rafailov et al. 2023; ε: cDPO smoothing)    ``sigmoid`` (ε=0)
robust          (−(1−ε)·logσ(βΔ) + ε·logσ(−βΔ)) / (1−2ε)   (rDPO, Chowdhury et al. 2024)          ``robust``
hinge           max(0, 1 − βΔ)   (SLiC, Zhao et al. 2023)                                          ``hinge``
ipo             (Δc/|c| − Δr/|r| − 1/(2β))²   (IPO, Azar et al. 2023; TRL's per-token normalisation)  ``ipo``
simpo           −(1−ε)·logσ(β(m̄c − m̄r) − γ) − ε·logσ(−(β(m̄c − m̄r) − γ)), m̄ = logπ/|reply|          CPO ``simpo``
==============  ===========================================================================  =================

SimPO (Meng et al. 2024) is reference-free and length-normalised: no reference model at all. The rewards are
``β·(logπ − logπ_ref)`` per reply (``β·m̄`` for SimPO, as TRL's CPOTrainer logs them), and the metrics are
TRL's: ``rewards/chosen``, ``rewards/rejected`` (mean rewards), ``rewards/accuracies`` (share of pairs whose
chosen reward is strictly higher), ``rewards/margins`` (mean chosen − rejected reward), ``logps/chosen``,
``logps/rejected`` (mean policy log-probabilities; per-token means for SimPO, as CPOTrainer's).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from marin.validation import check

LOSS_TYPES = ("sigmoid", "robust", "hinge", "ipo", "simpo")
METRICS = (
    "rewards/chosen",
    "rewards/rejected",
    "rewards/accuracies",
    "rewards/margins",
    "logps/chosen",
    "logps/rejected",
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class PreferenceLossConfig:
    type: str = "sigmoid"
    """One of ``LOSS_TYPES`` (module docstring)."""
    beta: float = 0.1
    """β: the inverse temperature of the implicit reward (how far the policy may move from the reference);
    IPO's τ. Marin's UltraFeedback DPO used 0.01, TRL defaults to 0.1, SimPO's recipes use 2-10."""
    label_smoothing: float = 0.0
    """ε: the probability that a pair's label is flipped (sigmoid, robust, simpo); in [0, 0.5)."""
    simpo_gamma: float = 0.5
    """SimPO's target reward margin γ (the paper's γ, i.e. TRL's ``simpo_gamma``); SimPO only."""

    def __post_init__(self):
        check("PreferenceLossConfig", "type", self.type, lambda v: v in LOSS_TYPES, f"one of {LOSS_TYPES}")
        check("PreferenceLossConfig", "beta", self.beta, lambda v: v > 0, "> 0")
        check("PreferenceLossConfig", "label_smoothing", self.label_smoothing, lambda v: 0 <= v < 0.5, "in [0, 0.5)")
        smoothed = ("sigmoid", "robust", "simpo")
        if isinstance(self.label_smoothing, float) and self.label_smoothing and self.type not in smoothed:
            raise ValueError(
                f"PreferenceLossConfig.label_smoothing is {self.label_smoothing} but loss {self.type!r} has no label "
                f"smoothing; use one of {smoothed}"
            )

    @property
    def reference_free(self) -> bool:
        """Whether the loss needs no reference model (SimPO)."""
        return self.type == "simpo"


def _smoothed_logistic(logits: jax.Array, epsilon: float) -> jax.Array:
    return -(1 - epsilon) * jax.nn.log_sigmoid(logits) - epsilon * jax.nn.log_sigmoid(-logits)


def preference_loss(
    cfg: PreferenceLossConfig, logps: jax.Array, ref_logps: jax.Array | None, lengths: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Per-pair loss and the chosen and rejected rewards (no gradient through the rewards), each [pairs]."""
    beta, epsilon = cfg.beta, cfg.label_smoothing
    if cfg.reference_free:
        mean = logps / jnp.maximum(lengths, 1)  # [pairs, 2] per-token log-probabilities
        logits = beta * (mean[:, 0] - mean[:, 1]) - cfg.simpo_gamma
        rewards = jax.lax.stop_gradient(beta * mean)
        return _smoothed_logistic(logits, epsilon), rewards[:, 0], rewards[:, 1]
    ratios = logps - ref_logps  # [pairs, 2]: log π/π_ref of each reply
    delta = ratios[:, 0] - ratios[:, 1]
    if cfg.type == "sigmoid":
        loss = _smoothed_logistic(beta * delta, epsilon)
    elif cfg.type == "robust":
        loss = (-(1 - epsilon) * jax.nn.log_sigmoid(beta * delta) + epsilon * jax.nn.log_sigmoid(-beta * delta)) / (
            1 - 2 * epsilon
        )
    elif cfg.type == "hinge":
        loss = jax.nn.relu(1 - beta * delta)
    else:  # ipo: per-token log-ratios, as TRL normalises them (confirmed with the IPO authors, says TRL)
        per_token = ratios / jnp.maximum(lengths, 1)
        loss = jnp.square(per_token[:, 0] - per_token[:, 1] - 1 / (2 * beta))
    rewards = jax.lax.stop_gradient(beta * ratios)
    return loss, rewards[:, 0], rewards[:, 1]


def metric_sums(
    cfg: PreferenceLossConfig, logps: jax.Array, lengths: jax.Array, chosen: jax.Array, rejected: jax.Array, valid
) -> dict[str, jax.Array]:
    """TRL's metrics as sums over the valid pairs (``valid`` [pairs], 0/1); divided by the pair count they are
    TRL's batch means."""
    reported = logps / jnp.maximum(lengths, 1) if cfg.reference_free else logps
    reported = jax.lax.stop_gradient(reported)
    values = {
        "rewards/chosen": chosen,
        "rewards/rejected": rejected,
        "rewards/accuracies": (chosen > rejected).astype(jnp.float32),
        "rewards/margins": chosen - rejected,
        "logps/chosen": reported[:, 0],
        "logps/rejected": reported[:, 1],
    }
    return {name: jnp.sum(value * valid) for name, value in values.items()}
