"""Post-training: what follows SFT, on the trainer and the inference engine; neither of them imports this package.

Preference optimization (DPO and its kin) of an SFT checkpoint against a frozen reference is here; RL with
verifiable rewards (GRPO) is the subpackage ``marin.posttrain.rl`` (docs/rl.md).

It sits above the trainer and inference (it runs the trainer's loop with its own ``Objective`` and loads
reference models through ``marin.inference``) and reads the chat package's pair caches; neither the trainer
nor inference imports it. ``losses`` holds the DPO-family losses and TRL's metrics, ``batches`` packs pairs
into rows, ``objective`` turns rows into reply log-probabilities and a loss, ``reference`` computes the
reference model's log-probabilities once as a step, ``dpo`` is the step that trains (``train_dpo``).
"""

from marin.posttrain.batches import PairBatches
from marin.posttrain.dpo import TrainDpoConfig, dpo_objective, train_dpo
from marin.posttrain.losses import LOSS_TYPES, METRICS, PreferenceLossConfig, preference_loss
from marin.posttrain.objective import dpo_loss_fn, sequence_logps
from marin.posttrain.reference import ReferenceLogpsConfig, compute_reference_logps, load_reference_logps

__all__ = [
    "LOSS_TYPES",
    "METRICS",
    "PairBatches",
    "PreferenceLossConfig",
    "ReferenceLogpsConfig",
    "TrainDpoConfig",
    "compute_reference_logps",
    "dpo_loss_fn",
    "dpo_objective",
    "load_reference_logps",
    "preference_loss",
    "sequence_logps",
    "train_dpo",
]
