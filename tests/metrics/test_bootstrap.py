"""Bootstrap weights: the vectorized form equals resampling items explicitly."""

from __future__ import annotations

import math

import numpy as np
import pytest

from beacon.metrics import adaptivity, item_outcomes, percentile_ci, resample_weights
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
