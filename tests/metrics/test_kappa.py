"""Cohen's kappa against hand-computed values."""

from __future__ import annotations

import math

import pytest

from beacon.metrics import cohens_kappa


def test_binary_by_hand():
    # p_o = 3/4; p_e = (2·1 + 2·3) / 16 = 1/2; κ = (3/4 - 1/2) / (1/2) = 1/2
    assert cohens_kappa([1, 1, 0, 0], [1, 0, 0, 0]) == pytest.approx(0.5, abs=1e-12)


def test_three_labels_by_hand():
    a = ["A", "R", "G", "A", "R"]
    b = ["A", "R", "R", "A", "G"]
    # p_o = 3/5; both raters: A 2, R 2, G 1 -> p_e = (4 + 4 + 1) / 25 = 9/25
    # κ = (15/25 - 9/25) / (16/25) = 6/16
    assert cohens_kappa(a, b) == pytest.approx(0.375, abs=1e-12)


def test_perfect_and_opposite():
    assert cohens_kappa(["x", "y", "x"], ["x", "y", "x"]) == pytest.approx(1.0)
    # p_o = 0, p_e = 1/2 -> κ = -1
    assert cohens_kappa([0, 1], [1, 0]) == pytest.approx(-1.0)


def test_single_shared_label_is_nan():
    assert math.isnan(cohens_kappa(["a", "a"], ["a", "a"]))


def test_bad_inputs():
    with pytest.raises(ValueError, match="got 2 and 1 labels"):
        cohens_kappa([1, 0], [1])
    with pytest.raises(ValueError, match="at least one"):
        cohens_kappa([], [])
