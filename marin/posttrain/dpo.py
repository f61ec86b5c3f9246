"""``train_dpo``: preference optimization of an SFT checkpoint against itself, frozen, as the reference.

    step = ExecutorStep(name="checkpoints/nano-dpo", fn=train_dpo, config=TrainDpoConfig(
        output_path=this_output_path(), model=..., initialize_from=sft_step,
        train_pairs=prefs / "train", validation_pairs={"prefs": prefs / "validation"},
        reference_logps=reference_step, loss=PreferenceLossConfig(type="sigmoid", beta=0.1),
        trainer=TrainerConfig(num_train_steps=100, batch_size=16)))   # batch_size counts pairs

Nothing here is a second trainer: the trainer's loop runs an ``Objective`` (the DPO loss over packed pair
batches, ``marin.posttrain.objective``), so checkpoints (the policy's state only), bitwise resume, W&B and the
JSONL metrics log are pretraining's, and the output directory is a training run's: export, serving, the chat
CLI (``sft.json`` names the chat tokenizer) and evals read it unchanged. Metrics are TRL's names under
``train/`` (``train/rewards/accuracies`` ...) and, for each validation pair set, ``eval/<set>/...``.

The reference is ``initialize_from``'s parameters. With ``reference_logps`` (a ``compute_reference_logps``
step) its log-probabilities come from disk; without, the reference model runs forward in every step. SimPO
needs no reference at all.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from collections.abc import Mapping

import jax

from marin.chat.preference_cache import PairCache
from marin.identity import runtime_field
from marin.posttrain.batches import PairBatches, usable_pairs
from marin.posttrain.losses import PreferenceLossConfig
from marin.posttrain.objective import dpo_loss_fn, eval_fn, evaluate_pairs
from marin.posttrain.reference import load_reference_logps
from marin.storage import join, write_atomic
from marin.trainer import distributed
from marin.trainer.loop import Objective, RunConfig, initial_params, train
from marin.trainer.model import init_params
from marin.trainer.sft import SFT_INFO

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainDpoConfig(RunConfig):
    train_pairs: str
    """A pair cache (``tokenize_preferences``' ``train/``)."""
    validation_pairs: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Name -> a held-out pair cache, evaluated every ``trainer.eval_every`` steps and after the last."""
    loss: PreferenceLossConfig = dataclasses.field(default_factory=PreferenceLossConfig)
    reference_logps: str | None = None
    """A ``compute_reference_logps`` output holding ``train`` and every validation set; None: the reference model
    runs forward in each step (and each eval)."""
    num_epochs: float | None = None
    """If set, replaces ``trainer.num_train_steps`` by ``ceil(num_epochs * usable pairs / batch_size)``."""
    seed: int = 0
    """Keys the order of the pairs (a fresh Feistel permutation per epoch)."""
    max_eval_pairs: int = 512
    """Pairs evaluated per validation set, from its start."""
    packing: bool = runtime_field(True)
    """Pack whole sequences into rows (False: one sequence per row). Same numbers, different speed."""

    def __post_init__(self):
        super().__post_init__()
        if not self.initialize_from:
            raise ValueError(
                "TrainDpoConfig.initialize_from must name the SFT run (or a Hugging Face checkpoint directory) to "
                "start from and compare to"
            )
        if isinstance(self.num_epochs, (int, float)) and not self.num_epochs > 0:
            raise ValueError(f"TrainDpoConfig.num_epochs must be > 0, got {self.num_epochs}")


def _reference(config: TrainDpoConfig, name: str, pairs: PairCache):
    if config.loss.reference_free or config.reference_logps is None:
        return None
    return load_reference_logps(config.reference_logps, name, pairs, config.model.seq_len)


def _batches(config: TrainDpoConfig) -> tuple[PairBatches, dict[str, PairBatches], int]:
    """Training batches (with the step count they were sized for), validation batches."""
    trainer, seq_len = config.trainer, config.model.seq_len
    train_pairs = PairCache.open(config.train_pairs)
    vocab = train_pairs.ledger["vocab_size"]
    if vocab > config.model.vocab_size:
        raise ValueError(f"{config.train_pairs}: tokenizer of {vocab} tokens, the model has {config.model.vocab_size}")
    steps = trainer.num_train_steps
    if config.num_epochs is not None:
        usable = usable_pairs(train_pairs, seq_len)
        steps = max(1, math.ceil(config.num_epochs * len(usable) / trainer.batch_size))
        logger.info(
            "%g epochs of %d pairs at %d pairs per step: %d steps",
            config.num_epochs,
            len(usable),
            trainer.batch_size,
            steps,
        )
    train_batches = PairBatches(
        train_pairs,
        seq_len=seq_len,
        pairs_per_step=trainer.batch_size,
        seed=config.seed,
        num_steps=steps,
        num_microbatches=trainer.num_microbatches,
        packing=config.packing,
        reference_logps=_reference(config, "train", train_pairs),
    )
    validation = {}
    eval_pairs = trainer.eval_batch_size or trainer.batch_size
    for name, url in config.validation_pairs.items():
        pairs = PairCache.open(url)
        if not len(usable_pairs(pairs, seq_len)):  # e.g. no validation_fraction: nothing held out
            logger.info("validation pairs %r: none usable, not evaluated", name)
            continue
        steps_needed = math.ceil(min(len(pairs), config.max_eval_pairs) / eval_pairs)
        validation[name] = PairBatches(
            pairs,
            seq_len=seq_len,
            pairs_per_step=eval_pairs,
            shuffle=False,
            num_steps=steps_needed,
            packing=config.packing,
            reference_logps=_reference(config, name, pairs),
        )
    return train_batches, validation, steps


def dpo_objective(config: TrainDpoConfig) -> tuple[Objective, int]:
    """The loop's objective for ``config`` and the number of steps it runs."""
    train_batches, validation, steps = _batches(config)
    policy = config.trainer.precision
    loss_fn = dpo_loss_fn(config.model, config.loss, policy)
    frozen = None
    if not config.loss.reference_free and config.reference_logps is None:
        template = jax.eval_shape(lambda: init_params(config.model, jax.random.PRNGKey(0), dtype=policy.param))
        frozen, _ = initial_params(config.initialize_from, config.model, template)  # a run or an HF directory
    step = eval_fn(loss_fn, policy)
    eval_steps = {
        name: min(b.num_eval_steps, -(-config.max_eval_pairs // b.pairs_per_step)) for name, b in validation.items()
    }

    def evaluate(params, reference) -> dict[str, float]:
        out = {}
        for name, batches in validation.items():
            metrics = evaluate_pairs(step, params, reference, (batches.batch(s) for s in range(eval_steps[name])))
            out.update({f"eval/{name}/{key}": value for key, value in metrics.items()})
        return out

    objective = Objective(
        loss_fn=loss_fn,
        make_batch=train_batches.batch,
        tokens_per_step=train_batches.rows * config.model.seq_len,
        evaluate=evaluate if validation else None,
        frozen=frozen,
    )
    return objective, steps


def train_dpo(config: TrainDpoConfig) -> None:
    distributed.initialize()  # before is_primary (a no-op on one host)
    objective, steps = dpo_objective(config)
    config = dataclasses.replace(config, trainer=dataclasses.replace(config.trainer, num_train_steps=steps))
    if distributed.is_primary():
        tokenizer = PairCache.open(config.train_pairs).ledger["tokenizer"]
        info = {
            "chat_tokenizer": tokenizer,
            "tokenizers": [tokenizer],
            "num_train_steps": steps,
            "initialize_from": config.initialize_from,
            "dpo": {**dataclasses.asdict(config.loss), "reference_logps": config.reference_logps},
        }
        write_atomic(join(config.output_path, SFT_INFO), json.dumps(info, indent=2))
    train(config, objective)
