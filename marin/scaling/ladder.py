"""The isoFLOP grid of a scaling ladder: which model sizes train on how many tokens at each compute budget.

    grid = isoflop_grid([1e12, 2e12, 4e12], nano_family(vocab_size=2048), LadderRules())
    [(p.budget, p.model.hidden_dim, p.steps, p.batch_size, p.learning_rate) for p in grid]

A size family is a list of model configs ordered by size. For each budget C every size whose run would
be neither too short nor too far from compute-optimal is trained for D = C / (model FLOPs per token)
tokens, so each budget's runs trace one isoFLOP curve through (ideally around) its optimum. The rules that
turn a (size, tokens) pair into a training run are written down in ``LadderRules``, one place:

- **batch**: the largest power of two of sequences that still leaves ``min_steps`` optimizer steps, within
  [``min_batch``, ``max_batch``] (a fixed step count would make small budgets' batches tiny; a fixed batch
  leaves the large models of a small budget with a handful of steps);
- **learning rate**: ``base_lr * (base_hidden / hidden) ** lr_width_exponent``, capped at ``max_lr``
  (width-scaled, muP's rule for hidden matrices with Adam; the base is the quickstart's tuned nano rate);
- **schedule**: warmup-stable-decay with the quickstart's fractions, the same for every run, so runs differ
  only in size, tokens and the two rules above.

The grid is a pure function of (budget, family, rules): a run's config, hence its step hash, does not
depend on which other budgets are in the ladder, so adding a budget adds runs and reruns none.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from marin.trainer.model.config import LlamaConfig, model_preset


@dataclasses.dataclass(frozen=True)
class LadderRules:
    seq_len: int = 128
    min_steps: int = 40
    """Fewest optimizer steps of any run (a budget's largest sizes are dropped below this)."""
    min_batch: int = 4
    max_batch: int = 64
    base_lr: float = 3e-3
    base_hidden: int = 256
    lr_width_exponent: float = 1.0
    max_lr: float = 1e-2
    min_tokens_per_param: float = 2.0
    max_tokens_per_param: float = 400.0
    """Sizes whose D/N falls outside this range at a budget are not run there (far from any optimum)."""
    warmup: float = 0.05
    decay: float = 0.3
    min_lr_ratio: float = 0.05


@dataclasses.dataclass(frozen=True)
class LadderPoint:
    budget: float
    """The nominal budget (FLOPs) this run belongs to; its own compute, ``flops``, differs by rounding."""
    model: LlamaConfig
    steps: int
    batch_size: int
    learning_rate: float

    @property
    def params(self) -> float:
        """N = model FLOPs per token / 6 (``marin.scaling.fit``'s definition of size)."""
        return self.model.flops_per_token() / 6

    @property
    def tokens(self) -> int:
        return self.steps * self.batch_size * self.model.seq_len

    @property
    def flops(self) -> float:
        return self.model.flops_per_token() * self.tokens

    @property
    def label(self) -> str:
        """``h64`` (``h64-e8k2`` for a mixture of 8 experts, top-2): the size's name inside a ladder (with the
        budget, a run's step name)."""
        m = self.model
        depth = "" if m.num_layers == NANO_LAYERS else f"d{m.num_layers}"
        return f"h{m.hidden_dim}{depth}" + (f"-e{m.num_experts}k{m.experts_per_token}" if m.is_moe else "")


NANO_WIDTHS = (16, 24, 32, 48, 64, 96, 128, 192, 256)
NANO_LAYERS = 2
"""The ``nano`` preset's depth: a size of that depth is labelled by its width alone (``h64``), any other
with its depth too (``h64d4``)."""
DEEP_WIDTHS = (16, 24, 32, 40, 48, 56, 64, 80, 96)


def nano_family(vocab_size: int = 8192, seq_len: int = 128, widths: Sequence[int] = NANO_WIDTHS) -> list[LlamaConfig]:
    """The ``nano`` preset's shape (2 layers, SwiGLU width 8/3 of hidden) at ``widths`` up to its own 256:
    sizes about 1.5-2x apart in N at a fixed depth, so an isoFLOP curve is sampled evenly in log N. Heads
    are 32 wide (one head below 64)."""
    return [_nano_shape(hidden, NANO_LAYERS, vocab_size, seq_len) for hidden in widths]


def deep_family(vocab_size: int = 8192, seq_len: int = 128, widths: Sequence[int] = DEEP_WIDTHS) -> list[LlamaConfig]:
    """The ``nano`` shape grown in depth with width: ``width / 16`` layers, rounded half up (h16 has 1, h64 has 4,
    h96 has 6), an aspect ratio of 16. At a small vocabulary a fixed 2-layer family puts most of N in its output
    head (42-70% at widths 16-96 with 2,048 tokens), so its larger sizes add little but head; here the layers
    hold 18% of N at h16 and 80% at h96, as in the ladders of Chinchilla and Kaplan et al., whose models grow in
    both. Sizes are 1.2-1.9x apart in N (N = 40k to 1.0M at a 2,048-token vocabulary)."""
    return [_nano_shape(hidden, max(1, (hidden + 8) // 16), vocab_size, seq_len) for hidden in widths]


def _nano_shape(hidden: int, layers: int, vocab_size: int, seq_len: int) -> LlamaConfig:
    return dataclasses.replace(
        model_preset("nano"),
        vocab_size=vocab_size,
        seq_len=seq_len,
        hidden_dim=hidden,
        num_layers=layers,
        mlp_dim=8 * round(hidden * 8 / 3 / 8),
        num_heads=max(1, hidden // 32),
        num_kv_heads=max(1, hidden // 32),
    )


def moe_family(
    family: Sequence[LlamaConfig], num_experts: int = 8, experts_per_token: int = 2, **router: float
) -> list[LlamaConfig]:
    """Each size of a dense ``family`` as a mixture of experts with the same *active* MLP: ``num_experts`` experts
    of width ``mlp_dim / experts_per_token``, top-``experts_per_token`` (``exp_dense_vs_moe``'s construction;
    ``router`` sets the router's loss coefficients). A ladder of it is a ladder in active parameters: its sizes'
    N (``LadderPoint.params``, FLOPs per token / 6) and every budget's token counts are those of the dense sizes
    (plus each layer's small router), while each holds about ``num_experts / experts_per_token`` times the
    MLP parameters."""
    out = []
    for model in family:
        if model.mlp_dim % experts_per_token:
            raise ValueError(f"mlp_dim {model.mlp_dim} does not split into {experts_per_token} experts' widths")
        out.append(
            dataclasses.replace(
                model,
                mlp_dim=model.mlp_dim // experts_per_token,
                num_experts=num_experts,
                experts_per_token=experts_per_token,
                **router,
            )
        )
    return out


def batch_size(tokens: float, rules: LadderRules) -> int:
    sequences = tokens / (rules.seq_len * rules.min_steps)
    batch = rules.min_batch
    while batch * 2 <= min(sequences, rules.max_batch):
        batch *= 2
    return batch


def learning_rate(model: LlamaConfig, rules: LadderRules) -> float:
    return min(rules.max_lr, rules.base_lr * (rules.base_hidden / model.hidden_dim) ** rules.lr_width_exponent)


def budget_points(budget: float, family: Sequence[LlamaConfig], rules: LadderRules) -> list[LadderPoint]:
    """The runs of one budget: every size of ``family`` that the rules admit there."""
    points = []
    for model in family:
        if model.seq_len != rules.seq_len:
            raise ValueError(f"family model has seq_len {model.seq_len}, the rules {rules.seq_len}")
        tokens = budget / model.flops_per_token()
        ratio = tokens / (model.flops_per_token() / 6)
        if not rules.min_tokens_per_param <= ratio <= rules.max_tokens_per_param:
            continue
        batch = batch_size(tokens, rules)
        steps = round(tokens / (batch * rules.seq_len))
        if steps < rules.min_steps:
            continue
        points.append(LadderPoint(budget, model, steps, batch, learning_rate(model, rules)))
    return points


def isoflop_grid(budgets: Sequence[float], family: Sequence[LlamaConfig], rules: LadderRules) -> list[LadderPoint]:
    """Every budget's runs; a budget with fewer than three admitted sizes is an error (no parabola)."""
    grid = []
    for budget in budgets:
        points = budget_points(budget, family, rules)
        if len(points) < 3:
            raise ValueError(
                f"budget {budget:.3g} admits {len(points)} size(s) of the family under {rules}; an isoFLOP "
                "parabola needs 3: widen the family or the tokens-per-param range, or lower min_steps"
            )
        grid.extend(points)
    return grid


def nearest_compute_optimal(
    family: Sequence[LlamaConfig], budget: float, tokens_per_param: float = 20.0
) -> LlamaConfig:
    """The size of ``family`` whose tokens per parameter at ``budget`` (D/N, D = budget / FLOPs per token) is
    nearest ``tokens_per_param`` in ratio: the run a ladder should predict, chosen before it runs (Hoffmann et
    al.'s 20 tokens per parameter, not the ladder's own fitted optimum, which is known only after)."""
    if not family:
        raise ValueError("nearest_compute_optimal: the family is empty")

    def distance(model: LlamaConfig) -> float:
        n = model.flops_per_token() / 6
        return abs(math.log(budget / model.flops_per_token() / n / tokens_per_param))

    return min(family, key=distance)


def target_point(budget: float, model: LlamaConfig, rules: LadderRules) -> LadderPoint:
    """The run a ladder predicts: ``model`` trained on ``budget``'s tokens under the same rules."""
    tokens = budget / model.flops_per_token()
    batch = batch_size(tokens, rules)
    return LadderPoint(budget, model, round(tokens / (batch * rules.seq_len)), batch, learning_rate(model, rules))
