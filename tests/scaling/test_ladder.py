"""The isoFLOP grid's rules, and the ladder builder's step identities (adding a budget reruns nothing)."""

import dataclasses

import pytest

from experiments import exp27_nano_ladder
from marin.execution.plan import plan_steps
from marin.scaling.ladder import (
    LadderRules,
    budget_points,
    deep_family,
    isoflop_grid,
    nano_family,
    nearest_compute_optimal,
    target_point,
)


def test_each_budget_runs_the_admitted_sizes_at_its_compute_under_the_written_rules():
    rules = LadderRules(seq_len=128, min_steps=40, max_tokens_per_param=160.0)
    family = nano_family(vocab_size=2048, seq_len=128)
    grid = isoflop_grid([1e12, 4e12], family, rules)
    for p in grid:
        assert p.flops == pytest.approx(p.budget, rel=0.02)  # rounding to whole steps only
        assert rules.min_tokens_per_param <= p.tokens / p.params <= rules.max_tokens_per_param
        assert p.steps >= rules.min_steps and p.batch_size & (p.batch_size - 1) == 0
        assert p.learning_rate == min(rules.max_lr, rules.base_lr * rules.base_hidden / p.model.hidden_dim)
        assert p.params == p.model.flops_per_token() / 6
    # the same size at a larger budget trains longer, not with another batch or rate
    small = {p.label: p for p in grid if p.budget == 1e12}
    large = {p.label: p for p in grid if p.budget == 4e12}
    for label in small.keys() & large.keys():
        assert large[label].tokens == pytest.approx(4 * small[label].tokens, rel=0.02)
    assert len(large) >= 3 and min(p.params for p in large.values()) > min(p.params for p in small.values())
    # sizes are ~1.5-2x apart
    sizes = [m.flops_per_token() for m in family]
    assert all(1.3 < b / a < 2.2 for a, b in zip(sizes, sizes[1:], strict=False))


def test_the_deep_family_grows_in_depth_with_width_and_labels_its_depth():
    family = deep_family(vocab_size=2048, seq_len=128)
    assert [(m.hidden_dim, m.num_layers) for m in family] == [
        (16, 1), (24, 2), (32, 2), (40, 3), (48, 3), (56, 4), (64, 4), (80, 5), (96, 6)
    ]  # fmt: skip
    sizes = [m.flops_per_token() / 6 for m in family]
    assert all(1.15 < b / a < 2.0 for a, b in zip(sizes, sizes[1:], strict=False))
    head = [m.vocab_size * m.hidden_dim / n for m, n in zip(family, sizes, strict=True)]
    assert head[-1] < 0.25 < 0.7 < head[0]  # the layers, not the head, carry the large sizes' N
    nano = nano_family(vocab_size=2048, seq_len=128, widths=(96,))
    assert nano[0].vocab_size * 96 / (nano[0].flops_per_token() / 6) > 0.4  # where the 2-layer family's stays
    grid = isoflop_grid([2e12, 8e12], family, LadderRules(seq_len=128, min_steps=1500, max_batch=16))
    labels = {p.label for p in grid}
    assert {"h32", "h40d3", "h64d4"} <= labels  # the nano depth (2) is left out of a label, any other is in it
    # a width at two depths gets two labels, hence two step names
    same_width = dataclasses.replace(family[2], num_layers=3)
    assert target_point(2e12, same_width, LadderRules()).label == "h32d3"
    assert target_point(2e12, family[2], LadderRules()).label == "h32"


def test_a_ladders_target_is_the_size_nearest_twenty_tokens_per_parameter():
    nano, deep = nano_family(vocab_size=2048, seq_len=128), deep_family(vocab_size=2048, seq_len=128)
    picked = {
        (name, budget): nearest_compute_optimal(family, budget)
        for name, family in (("nano", nano), ("deep", deep))
        for budget in (1.6e13, 3.2e13)
    }
    assert {k: (m.hidden_dim, m.num_layers) for k, m in picked.items()} == {
        ("nano", 1.6e13): (96, 2), ("nano", 3.2e13): (96, 2), ("deep", 1.6e13): (64, 4), ("deep", 3.2e13): (80, 5)
    }  # fmt: skip
    for (_, budget), model in picked.items():  # 12-25 tokens per parameter: the nearest the families offer
        n = model.flops_per_token() / 6
        assert 12 < budget / model.flops_per_token() / n < 25
    assert nearest_compute_optimal(deep, 3.2e13, tokens_per_param=80.0).hidden_dim < 80  # more data: a smaller size
    with pytest.raises(ValueError, match="empty"):
        nearest_compute_optimal([], 1e12)


def test_a_budget_admitting_fewer_than_three_sizes_is_an_error():
    family = nano_family(vocab_size=2048, seq_len=128, widths=(16, 24, 32))
    with pytest.raises(ValueError, match=r"budget 1e\+14 admits 0 size"):
        isoflop_grid([1e12, 1e14], family, LadderRules(max_tokens_per_param=160.0))
    assert len(budget_points(1e12, family, LadderRules(max_tokens_per_param=160.0))) == 3
    target = target_point(4e12, family[-1], LadderRules())
    assert target.flops == pytest.approx(4e12, rel=0.02)


def identities(ladder) -> dict[str, str]:
    return {p.name: p.identity for p in plan_steps(ladder.steps, "/nonexistent/prefix").steps}


def test_adding_a_budget_adds_runs_and_changes_no_existing_step():
    two = identities(exp27_nano_ladder.build(budgets=(1e12, 2e12)))
    three = identities(exp27_nano_ladder.build(budgets=(1e12, 2e12, 4e12)))
    kept = {name for name in two if not name.startswith("analysis/")}
    assert kept < set(three)
    assert all(two[name] == three[name] for name in kept)  # every run, eval, the target and the data steps
    added = {name for name in set(three) - set(two)}
    assert added and all(name.split("/")[1].startswith("nano-ladder-4e12-") for name in added)
    # the fit is the one step that changes: it now reads the new budget's runs
    fit = "analysis/nano-ladder-fit"
    assert two[fit] != three[fit]
    # and it waits for the ladder's evals but not for the target it predicts
    plan = plan_steps(exp27_nano_ladder.LADDER.steps, "/nonexistent/prefix")
    [fit_step] = [p for p in plan.steps if p.name == fit]
    assert {d.name for d in fit_step.nonblocking_deps} == {
        exp27_nano_ladder.LADDER.target.name,
        exp27_nano_ladder.LADDER.target_eval.name,
    }
    assert {d.name for d in fit_step.deps} >= {e.name for e in exp27_nano_ladder.LADDER.evals}


def test_the_nano_ladders_rates_and_batches_agree_with_a_published_compute_rule():
    """The rules were written down on the generated corpus; this checks them against a rule fitted on real
    runs: DeepSeek-AI (2024), "DeepSeek LLM", eq. 1: eta_opt = 0.3118 C^-0.125, B_opt = 0.2920 C^0.3271
    tokens, whose near-optimal region spans about 2x in rate and more in batch. At the nano ladder's
    1e12-1.6e13 FLOPs they give 7.0e-3 to 9.9e-3 and 2.5k-6.1k tokens; the rules give 6e-3 to 1e-2 and 8k."""
    ladder = exp27_nano_ladder
    family = nano_family(vocab_size=2048, seq_len=ladder.RULES.seq_len)
    points = isoflop_grid(ladder.BUDGETS, family, ladder.RULES)
    [target_model] = [m for m in family if m.hidden_dim == ladder.TARGET_WIDTH]
    points.append(target_point(ladder.TARGET_BUDGET, target_model, ladder.RULES))
    for p in points:
        rate, batch = 0.3118 * p.flops**-0.125, 0.2920 * p.flops**0.3271
        assert 0.7 < p.learning_rate / rate < 1.3, (p.label, p.budget, p.learning_rate, rate)
        assert 1 <= p.batch_size * p.model.seq_len / batch < 4, (p.label, p.budget, p.batch_size, batch)


def test_a_moe_ladder_counts_active_parameters_and_names_its_runs():
    """A mixture-of-experts family (8 experts, top-2, each expert half the dense MLP's width) runs the dense
    ladder's grid: the same admitted sizes, batches and rates, tokens within the router's share, N in active
    parameters, while each size holds ~4x the dense MLP parameters; its runs are MoE training steps."""
    from experiments.defaults import default_scaling_ladder
    from marin.execution import InputName
    from marin.scaling.ladder import moe_family

    rules = LadderRules(seq_len=128, min_steps=40, max_tokens_per_param=160.0)
    dense = nano_family(vocab_size=2048, seq_len=128)
    moe = moe_family(dense, router_aux_loss_coef=0.01)
    dense_grid, moe_grid = isoflop_grid([1e12, 4e12], dense, rules), isoflop_grid([1e12, 4e12], moe, rules)
    assert [(p.budget, p.model.hidden_dim, p.batch_size, p.learning_rate) for p in moe_grid] == [
        (p.budget, p.model.hidden_dim, p.batch_size, p.learning_rate) for p in dense_grid
    ]
    for d, m in zip(dense_grid, moe_grid, strict=True):
        router = m.model.num_layers * m.model.hidden_dim * 8  # each layer's router matrix, in the active count
        assert m.params == pytest.approx(d.params + router, rel=1e-9)
        assert m.tokens == pytest.approx(d.tokens, rel=0.05)
        assert m.model.param_count > 2 * d.model.param_count - d.model.vocab_size * d.model.hidden_dim * 2
        assert m.label == f"{d.label}-e8k2" and m.model.router_aux_loss_coef == 0.01
    with pytest.raises(ValueError, match="mlp_dim 170 does not split into 3 experts"):
        moe_family([dataclasses.replace(dense[0], mlp_dim=170)], experts_per_token=3)

    tokenized = InputName.hardcoded("tokenized/books")
    ladder = default_scaling_ladder(
        "moe-ladder",
        tokenized,
        tokenizer=InputName.hardcoded("tokenizers/books"),
        family=moe,
        budgets=(1e12, 2e12, 4e12),
        target_budget=1.6e13,
        target_model=moe[-3],
        rules=rules,
        train=exp27_nano_ladder.TRAIN,
    )
    assert len(ladder.runs) == len(isoflop_grid((1e12, 2e12, 4e12), moe, rules))
    assert all(s.name.startswith("checkpoints/moe-ladder-") and s.name.endswith("-e8k2") for s in ladder.runs)
    assert all(s.config.model.value.num_experts == 8 for s in [*ladder.runs, ladder.target])
