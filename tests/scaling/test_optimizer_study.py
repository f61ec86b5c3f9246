"""The optimizer study's analysis: the best learning rate per setting, seeds at it, and the speedup over AdamW
read off AdamW's own runs (Wen et al. 2025's definition)."""

import math

import pytest

from marin.scaling.optimizer_study import StudyRun, adamw_tokens_to_reach, best_runs, markdown, speedups


def adamw_loss(tokens: float) -> float:
    return 3.0 - 0.1 * math.log(tokens)  # linear in log D: the interpolation is then exact


def runs_for(
    kind: str, params: float, tokens_by_ratio: dict, losses: dict, seeds: dict | None = None
) -> list[StudyRun]:
    out = []
    for ratio, tokens in tokens_by_ratio.items():
        for lr, loss in losses[ratio].items():
            out.append(StudyRun(kind, params, tokens, ratio, lr, 0, loss))
        for lr, loss in (seeds or {}).get(ratio, {}).items():
            out.append(StudyRun(kind, params, tokens, ratio, lr, 1, loss))
    return out


def test_speedup_is_how_much_more_data_adamw_needs_for_the_same_loss():
    tokens = {1: 1e6, 4: 4e6}
    adamw = runs_for(
        "adamw", 1e5, tokens, {r: {1e-2: adamw_loss(d), 2e-2: adamw_loss(d) + 0.05} for r, d in tokens.items()}
    )
    # muon reaches at 1e6 tokens what AdamW reaches at 2e6, and at 4e6 what AdamW would at 8e6 (beyond its runs)
    muon = runs_for("muon", 1e5, tokens, {1: {1e-2: adamw_loss(2e6)}, 4: {1e-2: adamw_loss(8e6)}})
    table = speedups(best_runs(adamw + muon))
    assert table[("adamw", 1e5, 1)].speedup == pytest.approx(1.0) and table[("adamw", 1e5, 4)].speedup == pytest.approx(
        1.0
    )
    assert table[("adamw", 1e5, 1)].learning_rate == 1e-2  # the lower loss of the sweep
    assert table[("muon", 1e5, 1)].speedup == pytest.approx(2.0) and not table[("muon", 1e5, 1)].extrapolated
    assert table[("muon", 1e5, 4)].speedup == pytest.approx(2.0) and table[("muon", 1e5, 4)].extrapolated
    text = markdown(table)
    assert "| muon | 2.00 | 2.00* |" in text and "| adamw | 1.00 | 1.00 |" in text


def test_the_best_setting_s_seeds_are_averaged_and_a_worse_optimizer_is_below_one():
    tokens = {1: 1e6, 4: 4e6}
    adamw = runs_for("adamw", 1e5, tokens, {r: {1e-2: adamw_loss(d)} for r, d in tokens.items()})
    # lion's best lr (1e-3) has two seeds; their mean equals AdamW's loss at 0.5e6 tokens: speedup 0.5
    target = adamw_loss(5e5)
    lion = runs_for(
        "lion", 1e5, {1: 1e6}, {1: {1e-3: target - 0.01, 3e-3: target + 0.2}}, seeds={1: {1e-3: target + 0.01}}
    )
    setting = speedups(best_runs(adamw + lion))[("lion", 1e5, 1)]
    assert setting.learning_rate == 1e-3 and len(setting.losses) == 2 and setting.loss == pytest.approx(target)
    assert setting.speedup == pytest.approx(0.5) and setting.extrapolated


def test_a_size_where_adamw_does_not_improve_with_data_has_no_speedup():
    flat = [StudyRun("adamw", 1e5, 1e6, 1, 1e-2, 0, 2.0), StudyRun("adamw", 1e5, 4e6, 4, 1e-2, 0, 2.1)]
    with pytest.raises(ValueError, match="does not fall with data"):
        adamw_tokens_to_reach(list(best_runs(flat).values()), 1.9)


def test_a_best_rate_at_an_end_of_its_sweep_is_flagged():
    tokens = {1: 1e6}
    runs = runs_for("adamw", 1e5, tokens, {1: {5e-3: 2.3, 1e-2: 2.2, 2e-2: 2.25}})
    runs += runs_for("muon", 1e5, tokens, {1: {5e-3: 2.3, 1e-2: 2.2, 2e-2: 2.1}})
    runs += runs_for("lion", 1e5, tokens, {1: {1e-3: 2.4}})  # one point: no sweep to be at the end of
    table = best_runs(runs)
    assert not table[("adamw", 1e5, 1)].at_edge and table[("muon", 1e5, 1)].at_edge
    assert not table[("lion", 1e5, 1)].at_edge
    text = markdown(table)
    assert "| muon | 100k | 1x | 0.02 † |" in text and "| adamw | 100k | 1x | 0.01 |" in text
