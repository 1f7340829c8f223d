"""Bootstrap weights: the vectorized form equals resampling items explicitly."""

from __future__ import annotations

import math

import numpy as np
import pytest

from beacon.metrics import (
    adaptivity,
    item_outcomes,
    percentile_ci,
    resample_weights,
    two_level_weights,
)
from beacon.metrics.adaptivity import adaptivity_arrays


def test_resample_weights_are_draw_counts():
    w = resample_weights(7, 5, np.random.default_rng(0))
    assert w.shape == (5, 7)
    assert np.all(w.sum(axis=1) == 7)
    assert np.all(w >= 0)
    assert np.all(w == np.round(w))


def test_weights_equal_explicit_resampling():
    """Metrics under weights w[b] equal `adaptivity` over items repeated w[b, i] times."""
    rng = np.random.default_rng(1)
    records = [
        {
            "correct_notool": float(rng.integers(0, 3)) / 2,
            "correct_tool": float(rng.integers(0, 3)) / 2,
            "used_tool": float(rng.integers(0, 3)) / 2,
        }
        for _ in range(12)
    ]
    weights = resample_weights(len(records), 6, np.random.default_rng(2))
    vectorized = adaptivity_arrays(item_outcomes(records), weights)
    for b, row in enumerate(weights):
        repeated = [r for r, count in zip(records, row, strict=True) for _ in range(int(count))]
        explicit = adaptivity(repeated)
        for key, values in vectorized.items():
            if math.isnan(explicit[key]):
                assert math.isnan(values[b]), key
            else:
                assert values[b] == pytest.approx(explicit[key], abs=1e-12), key


def test_percentile_ci_by_hand():
    # 101 values 0..100: the 2.5th and 97.5th percentiles (linear interpolation) are 2.5 and 97.5
    values = np.arange(101.0)
    assert percentile_ci(values) == pytest.approx((2.5, 97.5))
    assert percentile_ci(np.concatenate([values, [np.nan] * 10])) == pytest.approx((2.5, 97.5))
    assert percentile_ci(values, level=0.5) == pytest.approx((25.0, 75.0))


def test_percentile_ci_all_nan():
    low, high = percentile_ci(np.array([np.nan, np.nan]))
    assert math.isnan(low) and math.isnan(high)


def test_two_level_weights_are_products_of_seed_and_item_counts():
    seeds = resample_weights(3, 4, np.random.default_rng(0))
    items = resample_weights(5, 4, np.random.default_rng(1))
    w = two_level_weights(seeds, items)
    assert w.shape == (4, 15)
    assert np.all(w.sum(axis=1) == 15)  # (Σ s)(Σ c) = S·N
    for b in range(4):
        for j in range(3):
            assert np.array_equal(w[b, j * 5 : (j + 1) * 5], seeds[b, j] * items[b])


def test_two_level_weights_equal_resampling_seeds_and_one_item_multiset():
    """The weighted mean equals the mean of the table y[drawn seeds][:, drawn items]."""
    y = np.random.default_rng(2).random((3, 6))
    seed_idx = np.array([[2, 2, 0], [1, 0, 1]])
    item_idx = np.array([[0, 0, 5, 3, 3, 1], [4, 4, 4, 2, 1, 0]])
    seeds = np.stack([np.bincount(row, minlength=3) for row in seed_idx]).astype(float)
    items = np.stack([np.bincount(row, minlength=6) for row in item_idx]).astype(float)
    weighted = two_level_weights(seeds, items) @ y.ravel() / 18
    explicit = [y[s][:, i].mean() for s, i in zip(seed_idx, item_idx, strict=True)]
    assert weighted == pytest.approx(explicit, abs=1e-12)


def test_two_level_weights_need_as_many_seed_draws_as_item_draws():
    with pytest.raises(ValueError, match="same number of resamples"):
        two_level_weights(np.ones((3, 2)), np.ones((4, 5)))
