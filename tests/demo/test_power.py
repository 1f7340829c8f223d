"""Demo II's power arithmetic (demo2_design §3.3): the rule of thumb by hand, and the simulation
with the demo's own bootstrap against one row of the design's table."""

from __future__ import annotations

import math

import numpy as np
import pytest

from beacon.demo.power import (
    logit_offset,
    mde80,
    power,
    simulate_power,
    standard_error,
)


def test_rule_of_thumb_by_hand() -> None:
    # v = 0.25, N = 100, σ_seed = 0.05, S = 2: SE² = 0.25/100 + 2·0.0025/2 = 0.005.
    se = standard_error(0.25, 100, 0.05, 2)
    assert se == pytest.approx(math.sqrt(0.005), abs=1e-12)
    assert mde80(1.0) == pytest.approx(1.959964 + 0.841621, abs=1e-6)  # z_.975 + z_.80
    assert mde80(se) == pytest.approx(0.198102, abs=1e-6)
    assert power(mde80(se), se) == pytest.approx(0.80, abs=1e-12)
    assert power(1.959964 * se, se) == pytest.approx(0.5, abs=1e-6)
    assert power(0.0, se) == pytest.approx(0.025, abs=1e-6)  # the interval's own upper tail


def test_rule_of_thumb_refuses_no_items_and_names_the_setting() -> None:
    with pytest.raises(ValueError, match="N=0, S=3"):
        standard_error(0.25, 0, 0.05, 3)


def test_logit_offset_hits_the_mean_accuracy() -> None:
    assert logit_offset(0.45, 0.0) == pytest.approx(math.log(0.45 / 0.55), abs=1e-9)
    # Check the Gauss–Hermite mean against a plain Riemann sum of the normal density.
    x = np.linspace(-10, 10, 200_001)
    density = np.exp(-(x**2) / 2) / math.sqrt(2 * math.pi)
    mu = logit_offset(0.6, 1.0)
    mean = float(np.sum(density / (1 + np.exp(-(mu + x)))) * (x[1] - x[0]))
    assert mean == pytest.approx(0.6, abs=1e-6)


def test_simulation_reproduces_the_designs_row() -> None:
    """§3.3's table: Δ = 0.15, N = 240, 3 seeds, seed sd 0.2 logit: power 0.91, half-width
    0.084 (150 experiments of 1000 resamples). The same here: the binomial SE of a 0.91 power
    over 150 experiments is 0.023, so the band is 0.91 ± 3 SE; measured 0.907 and 0.089."""
    estimate = simulate_power(0.15, 240, 3, 0.2, experiments=150, resamples=1000, seed=0)
    assert 0.84 <= estimate.power <= 0.98
    assert 0.07 <= estimate.median_half_width <= 0.10


def test_simulation_without_an_effect_rarely_excludes_zero() -> None:
    """The negative control's row: Δ = 0 gives false positives 0.03 in the design; a one-sided
    rate should be near 0.025 (measured 0.02 here)."""
    estimate = simulate_power(0.0, 120, 3, 0.25, experiments=100, resamples=400, seed=1)
    assert estimate.power <= 0.08
