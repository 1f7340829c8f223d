"""Eq. 9/11 weights on hand-made impact vectors, fallbacks and the intervention registry."""

from __future__ import annotations

import pytest
import torch

from beacon.train.opd.revue_loss import (
    WEIGHTINGS,
    grouped_weights,
    high_count,
    impact_order,
    revue_weights,
)


def t(values: list[float]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def test_hand_made_vector_top_two_of_ten() -> None:
    # |T| = 10, alpha = 0.2 -> |High| = 2: positions 3 (0.9) and 7 (0.8)
    impact = t([0.1, 0.0, 0.2, 0.9, 0.05, 0.3, 0.0, 0.8, 0.1, 0.2])
    w = grouped_weights(impact)
    expected = torch.full((10,), 0.5 * 10 / 8, dtype=torch.float64)  # Low: 0.625
    expected[[3, 7]] = 0.5 * 10 / 2  # High: 2.5
    torch.testing.assert_close(w, expected, atol=1e-12, rtol=0)


def test_ties_go_to_the_earlier_position() -> None:
    # |T| = 5, alpha = 0.2 -> |High| = 1; positions 1, 2, 4 tie at the top: 1 wins
    impact = t([0.1, 0.5, 0.5, 0.2, 0.5])
    w = grouped_weights(impact)
    assert torch.argmax(w).item() == 1
    assert (w > 1).sum().item() == 1
    # alpha = 0.4 -> |High| = 2: positions 1 and 2, not 4
    w = grouped_weights(impact, alpha=0.4)
    assert torch.nonzero(w > 1).flatten().tolist() == [1, 2]


def test_alpha_times_t_not_an_integer_rounds_up() -> None:
    # |T| = 7, alpha = 0.2 -> 1.4 -> |High| = 2, |Low| = 5
    impact = t([0.0, 3.0, 0.1, 0.2, 2.0, 0.3, 0.0])
    w = grouped_weights(impact)
    expected = torch.full((7,), 0.5 * 7 / 5, dtype=torch.float64)
    expected[[1, 4]] = 0.5 * 7 / 2
    torch.testing.assert_close(w, expected, atol=1e-12, rtol=0)


def test_high_count_is_robust_to_float_error() -> None:
    # 0.1 * 30 = 3.0000000000000004 in floats; the group must still have 3 positions
    assert high_count(30, 0.1) == 3
    assert high_count(7, 0.2) == 2
    assert high_count(1, 0.2) == 1
    assert high_count(100, 0.2) == 20


@pytest.mark.parametrize("n", [2, 3, 5, 7, 10, 33, 100, 257])
@pytest.mark.parametrize("alpha", [0.05, 0.1, 0.2, 0.5, 0.9])
def test_mean_weight_is_one(n: int, alpha: float) -> None:
    impact = torch.rand(n, generator=torch.Generator().manual_seed(n), dtype=torch.float64)
    w = grouped_weights(impact, alpha=alpha, lam=0.3)
    assert abs(w.mean().item() - 1.0) < 1e-12
    n_high = high_count(n, alpha)
    if n_high < n:  # otherwise Low is empty and the fallback gives ones
        high = impact_order(impact)[:n_high]
        assert torch.allclose(w[high], torch.full((n_high,), 0.3 * n / n_high, dtype=w.dtype))


def test_group_sums_equal_lambda_shares() -> None:
    impact = torch.rand(100, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    w = grouped_weights(impact, alpha=0.2, lam=0.5)
    # the paper's 100-position example (Appendix D.2): 2.5 on 20 positions, 0.625 on 80
    assert sorted(set(w.tolist())) == [0.625, 2.5]
    assert (w == 2.5).sum().item() == 20
    assert abs((w / 100)[w == 2.5].sum().item() - 0.5) < 1e-12


@pytest.mark.parametrize(
    ("impact", "alpha", "reason"),
    [
        (None, 0.2, "no_impact"),
        ([0.7], 0.2, "too_short"),  # |T| < 2
        ([0.0, 0.0, 0.0, 0.0], 0.2, "zero_impact"),
        ([0.1, float("nan"), 0.3], 0.2, "nonfinite_impact"),
        ([0.1, 0.4], 0.6, "empty_group"),  # ceil(1.2) = 2 = |T|: Low would be empty
        ([0.1, 0.4, 0.2], 1.0, "empty_group"),  # alpha = 100% of the sweep
    ],
)
def test_fallbacks_are_uniform(impact: list[float] | None, alpha: float, reason: str) -> None:
    n = 4 if impact is None else len(impact)
    out = revue_weights(None if impact is None else t(impact), n, alpha=alpha)
    assert out.fallback == reason
    assert torch.equal(out.weights, torch.ones(n, dtype=out.weights.dtype))


def test_grouped_weights_needs_a_length_without_impact() -> None:
    assert grouped_weights(None, num_positions=3).tolist() == [1.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="num_positions"):
        grouped_weights(None)


@pytest.mark.parametrize(("alpha", "lam"), [(0.0, 0.5), (1.5, 0.5), (0.2, 0.0), (0.2, 1.0)])
def test_bad_settings_name_the_setting(alpha: float, lam: float) -> None:
    with pytest.raises(ValueError, match=r"revue\.(alpha|lam)"):
        grouped_weights(t([0.1, 0.2, 0.3]), alpha=alpha, lam=lam)


def test_interventions_follow_table_10() -> None:
    impact = t([0.9, 0.0, 0.5, 0.1, 0.2, 0.3, 0.05, 0.4, 0.6, 0.7])  # ranking 0, 9, 8, 2, 7, ...
    n, gen = 10, torch.Generator().manual_seed(0)
    top = WEIGHTINGS["mask_top"](impact, n, 0.2, 0.5, gen).weights
    assert top[[0, 9]].tolist() == [0.0, 0.0]
    assert torch.allclose(top[[1, 2, 3, 4, 5, 6, 7, 8]], torch.full((8,), 0.625, dtype=top.dtype))
    low = WEIGHTINGS["mask_low"](impact, n, 0.2, 0.5, gen).weights
    assert low[[1, 6]].tolist() == [0.0, 0.0]  # the two lowest impacts
    assert low[[0, 9]].tolist() == [2.5, 2.5]  # High keeps its weight
    assert abs(low[[2, 3, 4, 5, 7, 8]].sum().item() - 5.0) < 1e-12  # middle keeps 1 - lam
    rnd = WEIGHTINGS["mask_random"](impact, n, 0.2, 0.5, gen).weights
    assert (rnd == 0).sum().item() == 2
    assert abs(rnd.sum().item() - 5.0) < 1e-12
    sel = WEIGHTINGS["random_select"](impact, n, 0.2, 0.5, gen).weights
    assert sorted(sel.tolist()) == [0.625] * 8 + [2.5] * 2
    assert WEIGHTINGS["uniform"](impact, n, 0.2, 0.5, gen).weights.tolist() == [1.0] * 10


def test_random_interventions_are_reproducible_with_a_seed() -> None:
    a = WEIGHTINGS["random_select"](None, 50, 0.2, 0.5, torch.Generator().manual_seed(3)).weights
    b = WEIGHTINGS["random_select"](None, 50, 0.2, 0.5, torch.Generator().manual_seed(3)).weights
    assert torch.equal(a, b)


@pytest.mark.parametrize("name", sorted(WEIGHTINGS))
@pytest.mark.parametrize("n", [2, 7, 30])
def test_every_weighting_keeps_each_group_total(name: str, n: int) -> None:
    """Contract over the table: weights are >= 0, the masked count is ceil(alpha|T|) where a
    weighting masks, and the kept weight sums to |T| (no masking) or to the groups it keeps."""
    impact = torch.rand(n, generator=torch.Generator().manual_seed(n), dtype=torch.float64)
    w = WEIGHTINGS[name](impact, n, 0.2, 0.5, torch.Generator().manual_seed(0)).weights
    masked = int((w == 0).sum())
    assert bool((w >= 0).all()) and w.dtype == torch.float64
    if name in ("revue", "uniform", "random_select"):
        assert masked == 0 and abs(w.sum().item() - n) < 1e-9
    elif name in ("mask_random", "mask_top"):
        assert masked == high_count(n, 0.2) and abs(w.sum().item() - 0.5 * n) < 1e-9
    else:  # mask_low: High keeps lam |T| and the middle (1 - lam) |T|; at |T| = 2 no middle
        assert masked == (0 if n == 2 else high_count(n, 0.2))
        assert abs(w.sum().item() - n) < 1e-9
